"""A device's conversation: from the moment its voice channel opens until it closes.

The link that carries a device and its conversations do not live as long as each other:

- over WebSocket the connection *is* the conversation (the device opens it at the wake word and
  Home Assistant ends it by closing the socket);
- over MQTT+UDP the link lives from boot to power-off, and each conversation is one audio channel
  within it: the device's ``hello`` opens it, ``goodbye`` (from either side) ends it.

Everything that belongs to one conversation lives on its ``Conversation`` and dies with it, so
nothing of one conversation reaches the next on a link that outlives it: the silence clock above
all (a conversation that ends in silence must not make the next one's timeout zero). The device
holds its open conversation (``XiaozhiDevice.conversation``); the satellite, the media player,
the installer and the transport policy read it there, whether the satellite entity exists or not.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .link import DeviceLink
    from .protocol.messages import ControlMessage


@dataclass(eq=False, slots=True)
class Conversation:
    """One conversation of a device, on the link that carries it."""

    link: DeviceLink
    opened_at: float
    """When it opened (the event loop's clock)."""
    quiet_since: float | None = None
    """Since when the device has listened with nobody speaking or typing (None: someone did since)."""

    def listening(self, now: float, timeout: float) -> float:
        """A listening turn starts at ``now``: seconds left until silence ends the conversation.

        Counted from when the device began listening with nobody speaking since: turns that end
        without speech (HA's command limit, a result with no text) do not restart the clock, and a
        new conversation starts it anew.
        """
        if self.quiet_since is None:
            self.quiet_since = now
        return max(0.0, timeout - (now - self.quiet_since))

    def heard(self) -> None:
        """Someone spoke or typed: the next silence is counted from the next listening turn."""
        self.quiet_since = None


class VoiceHandler(Protocol):
    """The device's voice satellite, as the connection sees it."""

    def on_control(self, link: DeviceLink, message: ControlMessage) -> None:
        """Handle ``listen``, ``abort`` and other control messages."""

    def on_audio(self, link: DeviceLink, packet: bytes) -> None:
        """One uplink Opus packet."""

    def on_disconnect(self, link: DeviceLink) -> None:
        """The connection ended."""

    @property
    def busy(self) -> bool:
        """Whether a conversation turn, a reply or an announcement is under way (tells listeners when it ends)."""

    @property
    def media_title(self) -> str | None:
        """The title of the media it plays now, or None (tells listeners when that changes)."""

    async def async_play_media(self, url: str, title: str) -> None:
        """Play media on the speaker; raises a translated error when it cannot."""

    def async_stop_media(self) -> None:
        """Stop the media that plays."""

    async def async_announce_media(self, url: str) -> None:
        """Announce the media at ``url`` (blocks until played)."""
