"""What a hub keeps on disk.

- ``storage.py``: ``HubStorage``, the devices' caches and the journal of their tokens.
- ``cache.py``: ``DeviceCache``, what a device reported and what waits for it, as saved.
"""
