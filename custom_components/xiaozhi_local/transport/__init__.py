"""How a device is connected: WebSocket, or MQTT with UDP audio, and the choice between them.

- ``channel.py``: the seam between a link (``link.py``) and what carries it.
- ``websocket.py``: one device socket on HA's HTTP server; ``endpoint.py``: its view, refusals.
- ``mqtt.py``: the MQTT endpoint and the UDP audio socket inside HA; ``mqtt_channel.py``: one
  device on it.
- ``choice.py``: a device's connection choice reaches it by itself, at the first moment it can.
"""
