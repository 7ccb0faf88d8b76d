"""Firmware for the devices: where it comes from, installing it, and serving it.

- ``files.py``: offers, the local folder (``xiaozhi_firmware/``) and what a file must be.
- ``remote.py``: the vendor's OTA channel and the project's releases (options), fetching one.
- ``installer.py``: ``FirmwareUpdates``, offers per device and installs (tool or OTA answer,
  waiting, outcome).
- ``server.py``: ``XiaozhiFirmwareView``, the one-time download.
"""
