"""What spans the devices of the home, owned by the hub; each device's satellite takes part.

The nearest round (nearest.py, wake_rate.py) and the volumes the quieter rooms owe (volumes.py).
"""
