"""The volumes the quieter rooms owe, on disk (``xiaozhi_local.ducked``): one file for the home.

Written a moment after each change and at Home Assistant's stop; ``home/volumes.py`` owns what is in it.
"""

from collections.abc import Callable
from typing import Any, Final

from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.storage import Store
from homeassistant.util.hass_dict import HassKey

from ..const import DOMAIN
from .storage import async_save_later

STORE: HassKey[Store[dict[str, Any]]] = HassKey(f"{DOMAIN}_ducked_store")
SAVE_DELAY: Final = 1.0
"""Seconds after a change before the players made quieter are written (Home Assistant writes at its stop)."""


def ducked_store(hass: HomeAssistant) -> Store[dict[str, Any]]:
    """The file, made once per Home Assistant."""
    if (store := hass.data.get(STORE)) is None:
        store = hass.data[STORE] = Store(hass, 1, f"{DOMAIN}.ducked")
    return store


@callback
def async_save_soon(hass: HomeAssistant, data: Callable[[], dict[str, Any]]) -> None:
    """Written ``SAVE_DELAY`` from now (and at the stop), so that a restart does not lose a volume."""
    async_save_later(hass, ducked_store(hass), data, SAVE_DELAY)
