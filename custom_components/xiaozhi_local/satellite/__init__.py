"""The Assist satellite in parts.

``runs`` (what runs), ``base`` (state, runs, pipeline events), ``listening`` (the listening
turn), ``text`` (typed text), ``playback`` (announcements, questions, timers, media).
"""
