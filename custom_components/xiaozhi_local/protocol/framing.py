"""Binary framing of audio on the WebSocket (docs/protocol.md §2): versions 1, 2 and 3.

Version 1 is the bare Opus packet; 2 and 3 put a header before it. A header that does not match
its frame is a ``FrameError``, never an exception of another kind.
"""

import struct
from typing import Final

from .messages import FrameError

V2_HEADER: Final = struct.Struct(">HHIII")  # version, type, reserved, timestamp, payload size
V3_HEADER: Final = struct.Struct(">BBH")  # type, reserved, payload size


def pack_frame(version: int, payload: bytes, timestamp: int = 0) -> bytes:
    """One binary WebSocket frame in the device's framing version."""
    if version == 2:
        return V2_HEADER.pack(2, 0, 0, timestamp & 0xFFFFFFFF, len(payload)) + payload
    if version == 3:
        return V3_HEADER.pack(0, 0, len(payload)) + payload
    return payload


def unpack_frame(version: int, frame: bytes) -> bytes:
    """The Opus packet in a frame. Raises FrameError when a header does not match the frame."""
    if version == 2:
        if len(frame) < V2_HEADER.size:
            raise FrameError("bad_frame", f"v2 frame of {len(frame)} bytes is shorter than its header")
        _version, _type, _reserved, _timestamp, size = V2_HEADER.unpack_from(frame)
        if size != len(frame) - V2_HEADER.size:
            raise FrameError("bad_frame", f"v2 header says {size} bytes, frame has {len(frame) - V2_HEADER.size}")
        return frame[V2_HEADER.size :]
    if version == 3:
        if len(frame) < V3_HEADER.size:
            raise FrameError("bad_frame", f"v3 frame of {len(frame)} bytes is shorter than its header")
        _type, _reserved, size = V3_HEADER.unpack_from(frame)
        if size != len(frame) - V3_HEADER.size:
            raise FrameError("bad_frame", f"v3 header says {size} bytes, frame has {len(frame) - V3_HEADER.size}")
        return frame[V3_HEADER.size :]
    return frame
