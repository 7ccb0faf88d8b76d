"""Firmware for the devices: where it comes from, installing it, and serving it.

- ``files.py``: offers, the local folder (``xiaozhi_firmware/``) and what a file must be.
- ``remote.py``: the vendor's OTA channel and the project's releases (options), fetching one.
- ``catalog.py``: ``FirmwareCatalog``, what each device could install (every source, newest first).
- ``jobs.py``: ``InstallJob``, one install and where it is.
- ``installer.py``: ``FirmwareUpdates``, the table of installs (jobs, errors, listeners, OTA answers).
- ``run.py``: ``InstallRun``, one install run (tool or OTA answer, waiting, outcome).
- ``downloads.py``: one-time download URLs and the image bytes they serve.
- ``server.py``: ``XiaozhiFirmwareView``, the one-time download.
"""
