"""The endpoint's UDP audio socket, read to its end whenever it is read.

asyncio's datagram transport reads one datagram per turn of the loop. A stock device sends its
wake word's audio (33 datagrams in a burst) just before its ``listen detect`` over MQTT: read one
a turn, the burst was still in the kernel's buffer when the detect and the ``listen start`` were
handled, and a wake was judged on two packets of its audio. Here every read takes what is
waiting (up to ``MAX_BATCH`` a turn, so a flood cannot hold the loop), and ``drain`` lets the MQTT
side take it before it handles a ``listen detect``: the wake audio sent before it is in first.
"""

from collections.abc import Callable
import logging
import socket
from typing import Final

from homeassistant.core import HomeAssistant

_LOGGER = logging.getLogger(__name__)

MAX_DATAGRAM: Final = 4096
"""Bytes read of one datagram (an audio datagram is at most about 1.5 KB; the rest is cut off)."""
MAX_BATCH: Final = 256
"""Datagrams read in one go: the rest waits for the next turn of the loop."""


class UdpSocket:
    """A non-blocking UDP socket on the loop: ``received(data, addr)`` for each datagram."""

    def __init__(self, hass: HomeAssistant, received: Callable[[bytes, tuple[str, int]], None]) -> None:
        self._hass = hass
        self._received = received
        self._sock: socket.socket | None = None

    def bind(self, host: str | None, port: int) -> int:
        """Bind and start reading; the port bound. Raises OSError (nothing stays open then)."""
        family, kind, proto, _name, address = socket.getaddrinfo(host or "0.0.0.0", port, type=socket.SOCK_DGRAM)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.bind(address)
            self._hass.loop.add_reader(sock.fileno(), self.drain)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        return int(sock.getsockname()[1])

    @property
    def open(self) -> bool:
        """Bound and not closed."""
        return self._sock is not None

    def drain(self) -> None:
        """Hand on every datagram waiting now (at most ``MAX_BATCH``)."""
        sock = self._sock
        for _ in range(MAX_BATCH):
            if sock is None or sock is not self._sock:
                return  # closed meanwhile (a handler stopped the endpoint)
            try:
                data, addr = sock.recvfrom(MAX_DATAGRAM)
            except BlockingIOError, InterruptedError:
                return
            except OSError as err:  # e.g. an ICMP error reported on the socket
                _LOGGER.debug("UDP audio socket: %s", err)
                return
            self._received(data, (str(addr[0]), int(addr[1])))

    def sendto(self, data: bytes, addr: tuple[str, int]) -> bool:
        """One datagram out, never waiting: False when it cannot go now (full buffer, closed)."""
        if self._sock is None:
            return False
        try:
            self._sock.sendto(data, addr)
        except OSError as err:
            _LOGGER.debug("UDP audio socket: not sent to %s: %s", addr, err)
            return False
        return True

    def close(self) -> None:
        """Stop reading and close."""
        sock, self._sock = self._sock, None
        if sock is not None:
            self._hass.loop.remove_reader(sock.fileno())
            sock.close()
