"""Selects: screen theme, the assistant, finished-speaking detection, how the device connects, its wake word."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from homeassistant.components.assist_pipeline import AssistPipelineSelect, VadSensitivitySelect
from homeassistant.components.media_player import DOMAIN as MEDIA_PLAYER_DOMAIN
from homeassistant.components.select import SelectEntity, SelectEntityDescription
from homeassistant.const import EntityCategory
from homeassistant.core import Event, EventStateChangedData, HomeAssistant, callback
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.event import async_track_state_added_domain, async_track_state_removed_domain

from .const import (
    CONF_REPLY_PLAYER,
    CONF_TRANSPORT,
    DOMAIN,
    REPLY_ON_DEVICE,
    TRANSPORT_HUB,
    TRANSPORT_MQTT,
    TRANSPORT_WEBSOCKET,
)
from .device import XiaozhiDevice
from .entity import (
    XiaozhiEntity,
    XiaozhiSettingDescription,
    XiaozhiValueEntity,
    async_setup_device_entities,
    async_store_choice,
    rows_for,
)
from .hub import XiaozhiConfigEntry
from .tools.table import THEMES, as_option
from .wake_words.change import WakeWords, describe
from .wake_words.pack import ENGINE_WAKENET


@dataclass(frozen=True, kw_only=True)
class XiaozhiSelectDescription(XiaozhiSettingDescription, SelectEntityDescription):
    """A select row."""


SELECTS: tuple[XiaozhiSelectDescription, ...] = (
    XiaozhiSelectDescription(
        key="theme",
        translation_key="theme",
        tools=("self.screen.set_theme",),
        path=("screen", "theme"),
        convert=as_option(THEMES),
        setter="self.screen.set_theme",
        argument="theme",
        options=THEMES,
        entity_category=EntityCategory.CONFIG,
    ),
)


PARALLEL_UPDATES = 1


async def async_setup_entry(
    hass: HomeAssistant, entry: XiaozhiConfigEntry, async_add_entities: AddConfigEntryEntitiesCallback
) -> None:
    """Selects of every device: theme, and the satellite's pipeline and VAD sensitivity."""
    rows = rows_for(SELECTS, XiaozhiSelect)
    wake_words = entry.runtime_data.wake_words

    def takes_wake_word(device: XiaozhiDevice) -> bool:
        """A WakeNet board (MultiNet boards take a phrase: text.py)."""
        return WakeWords.supported(device) and wake_words.files.engine(device) == ENGINE_WAKENET

    def candidates(device: XiaozhiDevice) -> Iterable[tuple[str, Callable[[], Entity]]]:
        return [
            ("pipeline", lambda: XiaozhiPipelineSelect(hass, device)),
            ("vad_sensitivity", lambda: XiaozhiVadSelect(hass, device)),
            ("transport", lambda: XiaozhiTransportSelect(entry, device)),
            ("reply_speaker", lambda: XiaozhiReplySpeakerSelect(entry, device)),
            *rows(device),
            *([("wake_word", lambda: XiaozhiWakeWordSelect(entry, device))] if takes_wake_word(device) else []),
        ]

    async_setup_device_entities(hass, entry, async_add_entities, candidates)


class XiaozhiPipelineSelect(AssistPipelineSelect):
    """Which Assist pipeline answers the device."""

    _attr_has_entity_name = True  # the base class leaves it off: no translated name without it

    def __init__(self, hass: HomeAssistant, device: XiaozhiDevice) -> None:
        super().__init__(hass, DOMAIN, device.mac)
        self._attr_device_info = DeviceInfo(identifiers={(DOMAIN, device.mac)})


class XiaozhiVadSelect(VadSensitivitySelect):
    """How long a pause ends what the user says."""

    _attr_has_entity_name = True

    def __init__(self, hass: HomeAssistant, device: XiaozhiDevice) -> None:
        super().__init__(hass, device.mac)
        self._attr_device_info = DeviceInfo(identifiers={(DOMAIN, device.mac)})


class XiaozhiSelect(XiaozhiValueEntity, SelectEntity):
    """A setting with fixed options."""

    takes_settings_while_away = True

    entity_description: XiaozhiSelectDescription

    @property
    def current_option(self) -> str | None:
        """The requested option while the device is away, else the reported one."""
        value = self.shown_value
        return value if isinstance(value, str) else None

    async def async_select_option(self, option: str) -> None:
        """Send it (or keep it for the next connection)."""
        description = self.entity_description
        await self.device.values.async_set(description.key, description.setter, {description.argument: option}, option)


TRANSPORT = SelectEntityDescription(
    key="transport",
    translation_key="transport",
    entity_category=EntityCategory.CONFIG,
    options=[TRANSPORT_HUB, TRANSPORT_MQTT, TRANSPORT_WEBSOCKET],
)


class XiaozhiTransportSelect(XiaozhiEntity, SelectEntity):
    """Always connected (MQTT+UDP) or per conversation (WebSocket); default: the hub's choice.

    Stored with the device (its subentry); the device switches at its next boot (OTA check).
    """

    def __init__(self, entry: XiaozhiConfigEntry, device: XiaozhiDevice) -> None:
        super().__init__(device, TRANSPORT)
        self.entry = entry

    @property
    def available(self) -> bool:
        """Always: the choice is Home Assistant's, the device need not be connected."""
        return True

    @property
    def current_option(self) -> str:
        """The device's own choice, or ``hub``."""
        subentry = self.entry.subentries.get(self.device.subentry_id)
        choice = subentry.data.get(CONF_TRANSPORT) if subentry is not None else None
        return choice if choice in (TRANSPORT_MQTT, TRANSPORT_WEBSOCKET) else TRANSPORT_HUB

    async def async_select_option(self, option: str) -> None:
        """Store it; the device follows at the first moment it can (transport/choice.py).

        The hub's endpoint starts if this device is the first to want MQTT (the entry's update).
        """
        async_store_choice(
            self.hass, self.entry, self.device, CONF_TRANSPORT, None if option == TRANSPORT_HUB else option
        )
        self.async_write_ha_state()


REPLY_SPEAKER = SelectEntityDescription(
    key="reply_speaker", translation_key="reply_speaker", entity_category=EntityCategory.CONFIG
)


class XiaozhiReplySpeakerSelect(XiaozhiEntity, SelectEntity):
    """Where the device's replies play: ``device`` (its own speaker), or a media player's entity id.

    Announcements and questions follow; timers ring on the device (satellite/reply_speaker.py).
    Stored with the device (its subentry). The options are Home Assistant's media players (the
    xiaozhis' own aside), kept current as players come and go; a chosen player that went stays listed.
    """

    def __init__(self, entry: XiaozhiConfigEntry, device: XiaozhiDevice) -> None:
        super().__init__(device, REPLY_SPEAKER)
        self.entry = entry

    async def async_added_to_hass(self) -> None:
        """Follow the device, and the media players that come and go."""
        await super().async_added_to_hass()

        @callback
        def players_changed(event: Event[EventStateChangedData]) -> None:
            if not self._ours(event.data["entity_id"]):  # a device's own speaker is never an option
                self.async_write_ha_state()

        self.async_on_remove(async_track_state_added_domain(self.hass, MEDIA_PLAYER_DOMAIN, players_changed))
        self.async_on_remove(async_track_state_removed_domain(self.hass, MEDIA_PLAYER_DOMAIN, players_changed))

    @property
    def available(self) -> bool:
        """Always: the choice is Home Assistant's, the device need not be connected."""
        return True

    def _ours(self, entity_id: str) -> bool:
        """Whether ``entity_id`` is a xiaozhi's own speaker (small: never another's reply speaker).

        Pairing a hundred devices then adds a hundred players without rewriting every select.
        """
        entry = er.async_get(self.hass).async_get(entity_id)
        return entry is not None and entry.platform == DOMAIN

    @property
    def options(self) -> list[str]:
        """The device itself, then every media player but the xiaozhis' own speakers."""
        players = sorted(
            entity_id
            for entity_id in self.hass.states.async_entity_ids(MEDIA_PLAYER_DOMAIN)
            if not self._ours(entity_id)
        )
        current = self.current_option
        return [REPLY_ON_DEVICE, *players, *([current] if current not in (REPLY_ON_DEVICE, *players) else [])]

    @property
    def current_option(self) -> str:
        """The chosen player, or ``device``."""
        subentry = self.entry.subentries.get(self.device.subentry_id)
        choice = subentry.data.get(CONF_REPLY_PLAYER) if subentry is not None else None
        return choice if isinstance(choice, str) and choice.startswith(f"{MEDIA_PLAYER_DOMAIN}.") else REPLY_ON_DEVICE

    async def async_select_option(self, option: str) -> None:
        """Store it: the next reply plays there."""
        async_store_choice(
            self.hass, self.entry, self.device, CONF_REPLY_PLAYER, None if option == REPLY_ON_DEVICE else option
        )
        self.async_write_ha_state()


WAKE_WORD = SelectEntityDescription(key="wake_word", translation_key="wake_word", entity_category=EntityCategory.CONFIG)


class XiaozhiWakeWordSelect(XiaozhiEntity, SelectEntity):
    """The device's wake word: "as built", or a WakeNet model for its chip (wake_words/change.py).

    Choosing one builds and checks a new assets pack and has the device fetch it at a restart
    once it is idle; the attributes say where the change is, and why it failed.
    """

    def __init__(self, entry: XiaozhiConfigEntry, device: XiaozhiDevice) -> None:
        super().__init__(device, WAKE_WORD)
        self.wake_words = entry.runtime_data.wake_words

    @property
    def options(self) -> list[str]:
        """What fits the device's chip (and what it has now, if that came from a local folder)."""
        offers = self.wake_words.options(self.device)
        chosen = self.device.chosen_wake_word
        return offers if chosen is None or chosen in offers else [*offers, chosen]

    @property
    def current_option(self) -> str:
        """The one being installed, else the one the device has."""
        return self.wake_words.current(self.device)

    @property
    def extra_state_attributes(self) -> dict[str, Any]:
        """Where a change is (``phase``, ``progress`` in %), why it failed (``error``), and the board's word."""
        board = self.wake_words.files.board_word(self.device)
        as_built = {"as_built_wake_word": board.word} if board is not None and board.word else {}
        return {**as_built, **describe(self.wake_words.jobs.get(self.device.mac))}

    async def async_select_option(self, option: str) -> None:
        """Build, check and hand the pack to the device; it changes at its next restart (when idle)."""
        await self.wake_words.async_choose(self.device, option)
        self.async_write_ha_state()
