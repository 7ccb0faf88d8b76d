"""The Assist satellite's helpers, owned by the entity in ``assist_satellite.py``.

``runs`` (what runs), ``runner`` (one exchange at a time, pipeline events to the device),
``listening`` (the listening turn), ``text`` (typed text), ``playback`` (announcements,
questions, timers, media).
"""
