"""Sound out to a device: HA's TTS and media as PCM, the speaker path, idle announcements.

- ``media.py``: TTS streams and media URLs as s16 mono PCM at the device's downlink rate.
- ``speaker.py``: the one path for replies, announcements and media onto a device's speaker.
- ``announcements.py``: spoken announcements for idle devices (firmware 2.5 ``notify``).
"""
