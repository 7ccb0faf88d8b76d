"""Selects: screen theme, the assistant, finished-speaking detection, how the device connects, its wake word."""

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from homeassistant.components.assist_pipeline import AssistPipelineSelect, VadSensitivitySelect
from homeassistant.components.media_player import DOMAIN as MEDIA_PLAYER_DOMAIN
from homeassistant.components.select import SelectEntity, SelectEntityDescription
from homeassistant.const import EVENT_STATE_CHANGED, EntityCategory
from homeassistant.core import Event, EventStateChangedData, HomeAssistant, callback
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.dispatcher import async_dispatcher_connect, async_dispatcher_send
from homeassistant.helpers.entity import Entity
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

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
from .repairs import async_reply_player_played
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

    async_follow_players(hass, entry)
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
        """Store it; the device follows at the first moment it can (admission/transport_choice.py).

        The hub's endpoint starts if this device is the first to want MQTT (the entry's update).
        """
        async_store_choice(
            self.hass, self.entry, self.device, CONF_TRANSPORT, None if option == TRANSPORT_HUB else option
        )
        self.async_write_ha_state()


ATTR_PLAYER = "player"
REPLY_SPEAKER = SelectEntityDescription(
    key="reply_speaker", translation_key="reply_speaker", entity_category=EntityCategory.CONFIG
)


class XiaozhiReplySpeakerSelect(XiaozhiEntity, SelectEntity):
    """Where the device's replies play: ``device`` (its own speaker), or a media player, by its name.

    Announcements and questions follow; timers ring on the device (satellite/reply_speaker.py).
    Stored with the device (its subentry) as the player's entity id, which follows a rename. The
    options are Home Assistant's media players by name (the xiaozhis' own aside), kept current as
    players come, go and are renamed; a chosen player that went stays listed.
    """

    def __init__(self, entry: XiaozhiConfigEntry, device: XiaozhiDevice) -> None:
        super().__init__(device, REPLY_SPEAKER)
        self.entry = entry

    async def async_added_to_hass(self) -> None:
        """Follow the device, and the home's players (``async_follow_players``)."""
        await super().async_added_to_hass()
        self.async_on_remove(async_dispatcher_connect(self.hass, players_signal(self.entry), self._players_changed))

    @callback
    def _players_changed(self, entity_id: str) -> None:
        if not is_xiaozhi(self.hass, entity_id):  # a device's own speaker is never an option
            self.async_write_ha_state()

    @property
    def available(self) -> bool:
        """Always: the choice is Home Assistant's, the device need not be connected."""
        return True

    @property
    def _chosen(self) -> str | None:
        subentry = self.entry.subentries.get(self.device.subentry_id)
        choice = subentry.data.get(CONF_REPLY_PLAYER) if subentry is not None else None
        return choice if isinstance(choice, str) and choice.startswith(f"{MEDIA_PLAYER_DOMAIN}.") else None

    def _label(self, labels: dict[str, str]) -> str:
        """The chosen player's label in ``labels`` (its entity id once it is gone), or ``device``."""
        if (chosen := self._chosen) is None:
            return REPLY_ON_DEVICE
        return next((label for label, player in labels.items() if player == chosen), chosen)

    @property
    def options(self) -> list[str]:
        """The device itself, then every media player but the xiaozhis' own speakers, by name."""
        labels = player_labels(self.hass)
        current = self._label(labels)
        return [REPLY_ON_DEVICE, *labels, *([current] if current not in (REPLY_ON_DEVICE, *labels) else [])]

    @property
    def current_option(self) -> str:
        """The chosen player's name (its entity id once it is gone), or ``device``."""
        return self._label(player_labels(self.hass))

    @property
    def extra_state_attributes(self) -> dict[str, Any]:
        """The chosen player's entity id (None: the device), for automations and templates."""
        return {ATTR_PLAYER: self._chosen}

    async def async_select_option(self, option: str) -> None:
        """Store it: the next reply plays there."""
        player = None if option == REPLY_ON_DEVICE else player_labels(self.hass).get(option, option)
        if player != self._chosen:  # the repair's advice followed: another speaker, or the device
            async_reply_player_played(self.hass, self.device.mac)
        async_store_choice(self.hass, self.entry, self.device, CONF_REPLY_PLAYER, player)
        self.async_write_ha_state()


def is_xiaozhi(hass: HomeAssistant, entity_id: str) -> bool:
    """Whether ``entity_id`` is a xiaozhi's own speaker (small: never another's reply speaker).

    Pairing a hundred devices then adds a hundred players without rewriting every select.
    """
    entry = er.async_get(hass).async_get(entity_id)
    return entry is not None and entry.platform == DOMAIN


def player_labels(hass: HomeAssistant) -> dict[str, str]:
    """The home's media players (the xiaozhis' own aside) by what the select shows: their names.

    A name two players share is followed by each one's entity id, so that every label is one player.
    """
    named = [
        (state.name, state.entity_id)
        for state in hass.states.async_all(MEDIA_PLAYER_DOMAIN)
        if not is_xiaozhi(hass, state.entity_id)
    ]
    counts = Counter(name for name, _ in named)
    shared = {name for name, count in counts.items() if count > 1}
    labels = {
        f"{name} ({entity_id})" if name in shared or name == REPLY_ON_DEVICE else name: entity_id
        for name, entity_id in named
    }
    return dict(sorted(labels.items(), key=lambda item: (item[0].casefold(), item[0])))


def players_signal(entry: XiaozhiConfigEntry) -> str:
    """Dispatched with an entity id when a media player came, went or was renamed."""
    return f"{DOMAIN}_media_players_{entry.entry_id}"


@callback
def async_follow_players(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """One listener for the entry's Reply speaker selects; a chosen player's new entity id is kept.

    Only a player that comes, goes or changes its name reaches the selects (not every state).
    """

    @callback
    def named(data: EventStateChangedData) -> bool:
        if not data["entity_id"].startswith(f"{MEDIA_PLAYER_DOMAIN}."):
            return False
        old, new = data["old_state"], data["new_state"]
        return old is None or new is None or old.name != new.name

    @callback
    def changed(event: Event[EventStateChangedData]) -> None:
        async_dispatcher_send(hass, players_signal(entry), event.data["entity_id"])

    @callback
    def moved(event: Event[er.EventEntityRegistryUpdatedData]) -> None:
        data = event.data
        if data["action"] != "update" or not (old := data.get("old_entity_id")):
            return
        if not data["entity_id"].startswith(f"{MEDIA_PLAYER_DOMAIN}."):
            return
        for subentry in list(entry.subentries.values()):
            if subentry.data.get(CONF_REPLY_PLAYER) == old:
                data_now = {**subentry.data, CONF_REPLY_PLAYER: data["entity_id"]}
                hass.config_entries.async_update_subentry(entry, subentry, data=data_now)
        async_dispatcher_send(hass, players_signal(entry), data["entity_id"])

    entry.async_on_unload(hass.bus.async_listen(EVENT_STATE_CHANGED, changed, event_filter=named))
    entry.async_on_unload(hass.bus.async_listen(er.EVENT_ENTITY_REGISTRY_UPDATED, moved))


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
