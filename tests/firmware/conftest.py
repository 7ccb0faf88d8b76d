"""Fixtures of the firmware suite: the test's Home Assistant, served on loopback, and fwhost devices.

Without ``../shared/fwhost`` (a user's clone) every test here is skipped with one line; with
``XIAOZHI_REQUIRE_FWHOST=1`` (``.ci/run``) that is a failure instead.
"""

from collections.abc import Awaitable, Callable, Iterator
import os
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi_local.const import CONF_MQTT, CONF_SILENCE_TIMEOUT, DOMAIN
from custom_components.xiaozhi_local.device import XiaozhiDevice
from custom_components.xiaozhi_local.hub import XiaozhiHub
from custom_components.xiaozhi_local.transport import mqtt

from ..conftest import ota_url, served_hub, wait_for
from ..internals import hub_of
from . import fwhost
from .fwhost import FwHost

SILENCE_TIMEOUT = 5
"""The hub's silence timeout here (its smallest): conversations end by it in seconds."""


REAL_KEEPALIVE = mqtt.KEEPALIVE
"""What the hub hands out (the other tests hand out the firmware's default: conftest.py)."""


@pytest.fixture(autouse=True)
def real_keepalive(mqtt_on_loopback: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """fwhost runs on the real clock: the hub hands out its real keepalive."""
    monkeypatch.setattr(mqtt, "KEEPALIVE", REAL_KEEPALIVE)


@pytest.fixture(scope="session")
def fwhost_binary() -> Path:
    """fwhost, built into the cache once per content of its folder."""
    if (why := fwhost.available()) is not None:
        if os.environ.get("XIAOZHI_REQUIRE_FWHOST") == "1":
            pytest.fail(why.replace("is skipped", "is required (XIAOZHI_REQUIRE_FWHOST=1)"))
        pytest.skip(why)
    return fwhost.build()


@pytest.fixture
def config_entry() -> MockConfigEntry:
    """A hub with no device yet: each fwhost pairs by its spoken code."""
    return MockConfigEntry(domain=DOMAIN, title="Xiaozhi Local", data={})


@pytest.fixture(params=["mqtt", "websocket"])
def transport(request: pytest.FixtureRequest) -> str:
    """The hub's "Keep devices connected": MQTT+UDP (the default) or WebSocket per conversation."""
    return str(request.param)


@pytest.fixture
async def hub(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], transport: str
) -> XiaozhiHub:
    """The hub on the test server, telling devices ``transport``."""
    return await served_hub(
        hass,
        setup_integration,
        client,
        **{CONF_MQTT: transport == "mqtt", CONF_SILENCE_TIMEOUT: SILENCE_TIMEOUT},
    )


type FwFactory = Callable[..., Awaitable[FwHost]]


@pytest.fixture
def fw_processes() -> Iterator[list[FwHost]]:
    """Every fwhost a test started: stopped at its end, whatever happened."""
    started: list[FwHost] = []
    yield started
    for fw in started:
        fw.stop()


@pytest.fixture
async def paired(
    hass: HomeAssistant,
    hub: XiaozhiHub,
    client: TestClient[Any, Any],
    fwhost_binary: Path,
    tmp_path: Path,
    fw_processes: list[FwHost],
) -> FwFactory:
    """Start a fwhost and pair it by the code it speaks, as a user does: it is then ready (idle)."""

    async def factory(mac: str = "f0:9e:9e:12:34:56") -> FwHost:
        fw = FwHost(fwhost_binary, tmp_path / mac.replace(":", ""), mac, ota_url(client))
        fw_processes.append(fw)
        fw.start()
        await pair(hass, fw)
        await fw.wait(lambda f: "READY" in f.out(), 60, "READY after pairing")
        device = hub.devices[mac]
        if hub.entry.options.get(CONF_MQTT):
            await wait_for(device, lambda d: d.link is not None and d.link.settled.is_set(), timeout=30)
        return fw

    return factory


async def pair(hass: HomeAssistant, fw: FwHost) -> None:
    """The code the device speaks, typed into Home Assistant's discovered flow."""
    code = await fw.activation_code()
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN, match_context={"unique_id": fw.mac})
    assert len(flows) == 1, flows
    result = await hass.config_entries.flow.async_configure(flows[0]["flow_id"], {"code": code})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "pairing_successful"


def device_of(hub: XiaozhiHub, fw: FwHost) -> XiaozhiDevice:
    """The hub's device for ``fw``."""
    return hub.devices[fw.mac]


__all__ = ["SILENCE_TIMEOUT", "FwFactory", "device_of", "hub_of", "pair"]
