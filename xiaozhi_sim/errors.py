"""How a simulated device fails where real firmware would."""


class DeviceCrashed(Exception):
    """The server hello would have crashed real firmware (no ``transport``, or not a string)."""


class HelloTimeout(Exception):
    """No valid server hello within the firmware's 10 s."""
