"""The camera: the firmware's chunked multipart upload, HA's AI Task, the image entity."""

from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.components import ai_task, conversation, image
from homeassistant.core import HomeAssistant
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
)
from pytest_homeassistant_custom_component.typing import ClientSessionGenerator

from custom_components.xiaozhi_local.const import DOMAIN, VISION_PATH
from custom_components.xiaozhi_local.tools.vision import NO_AI_TASK
from xiaozhi_sim import SimulatedDevice, SimulatorOptions
from xiaozhi_sim.camera import BOUNDARY, TINY_JPEG

from .conftest import MAC, TOKEN, wait_settled, ws_url
from .integrations import async_setup_test_integration
from .internals import hub_of


class AiTaskDouble(ai_task.AITaskEntity):
    """Looks at the attached photo for real: reports its size and the question."""

    _attr_name = "Test AI Task"
    _attr_unique_id = "test_ai_task"
    _attr_supported_features = (
        ai_task.AITaskEntityFeature.GENERATE_DATA | ai_task.AITaskEntityFeature.SUPPORT_ATTACHMENTS
    )

    def __init__(self) -> None:
        self.tasks: list[ai_task.GenDataTask] = []

    async def _async_generate_data(
        self, task: ai_task.GenDataTask, chat_log: conversation.ChatLog
    ) -> ai_task.GenDataTaskResult:
        self.tasks.append(task)
        photo = (
            await self.hass.async_add_executor_job(Path(task.attachments[0].path).read_bytes)
            if task.attachments
            else b""
        )
        return ai_task.GenDataTaskResult(
            conversation_id=chat_log.conversation_id,
            data=f"A photo of {len(photo)} bytes; you asked: {task.instructions}",
        )


@pytest.fixture
async def ai(hass: HomeAssistant) -> AiTaskDouble:
    entity = AiTaskDouble()

    assert await async_setup_component(hass, "ai_task", {})
    await async_setup_test_integration(hass, "aitest", {"ai_task": [entity]})
    return entity


async def camera(
    hass: HomeAssistant, entry: MockConfigEntry, client: TestClient[Any, Any], ai_entity: str = ""
) -> SimulatedDevice:
    hass.config_entries.async_update_entry(
        entry, options={"websocket_url": ws_url(client), "ai_task_entity": ai_entity}
    )
    await hass.async_block_till_done()
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, camera=True))
    await sim.connect()
    await wait_settled(hub_of(entry).devices[MAC])
    await hass.async_block_till_done()
    return sim


async def test_take_photo_answers_the_question(
    hass: HomeAssistant, ai: AiTaskDouble, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    sim = await camera(hass, setup_integration, client, ai.entity_id)
    assert sim.mcp.vision_url == str(client.make_url(VISION_PATH))
    assert sim.mcp.vision_token  # its own short-lived token, not the device's main one
    assert sim.mcp.vision_token != TOKEN
    device = hub_of(setup_integration).devices[MAC]
    response: Any = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": device.device_id, "tool": "self.camera.take_photo", "arguments": {"question": "What is this?"}},
        blocking=True,
        return_response=True,
    )
    assert response["data"] == {
        "success": True,
        "text": f"A photo of {len(TINY_JPEG)} bytes; you asked: What is this?",
    }
    assert ai.tasks[0].attachments is not None
    assert ai.tasks[0].attachments[0].mime_type == "image/jpeg"
    photo = await image.async_get_image(hass, "image.kitchen_last_photo")
    assert photo.content == TINY_JPEG
    state = hass.states.get("image.kitchen_last_photo")
    assert state is not None
    assert state.state != "unknown"
    await sim.drop()


async def test_without_an_ai_task_the_device_says_so(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    sim = await camera(hass, setup_integration, client)
    device = hub_of(setup_integration).devices[MAC]
    response: Any = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": device.device_id, "tool": "self.camera.take_photo", "arguments": {"question": "Hi?"}},
        blocking=True,
        return_response=True,
    )
    assert response["data"] == {"success": False, "text": NO_AI_TASK}
    await sim.drop()


def multipart(question: bytes, photo: bytes) -> bytes:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="question"\r\n\r\n'.encode()
        + question
        + b"\r\n"
        + f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="camera.jpg"\r\n'
        "Content-Type: image/jpeg\r\n\r\n".encode()
        + photo
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (multipart(b"q", b"\xff\xd8" + b"\0" * (3 * 1024 * 1024)), f"multipart/form-data; boundary={BOUNDARY}", 413),
        (b"garbage", f"multipart/form-data; boundary={BOUNDARY}", 400),
        (b"{}", "application/json", 400),
        (multipart(b"q", b"not a jpeg"), f"multipart/form-data; boundary={BOUNDARY}", 400),
        (multipart(b"q", b""), f"multipart/form-data; boundary={BOUNDARY}", 400),
    ],
)
async def test_bad_uploads(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    body: bytes,
    content_type: str,
    status: int,
) -> None:
    sim = await camera(hass, setup_integration, client)
    headers = {"Authorization": f"Bearer {sim.mcp.vision_token}", "Device-Id": MAC, "Content-Type": content_type}
    resp = await client.post(VISION_PATH, data=body, headers=headers)
    assert resp.status == status
    assert hub_of(setup_integration).devices[MAC].photo is None  # nothing kept
    await sim.drop()


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer wrong", "Device-Id": MAC},
        {"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC},  # the main token is not the camera's
        {"Device-Id": MAC},
        {"Authorization": "Bearer x", "Device-Id": "aa:bb:cc:dd:ee:ff"},
    ],
)
async def test_upload_auth(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any], headers: dict[str, str]
) -> None:
    sim = await camera(hass, setup_integration, client)
    resp = await client.post(
        VISION_PATH,
        data=multipart(b"q", TINY_JPEG),
        headers={**headers, "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
    )
    assert resp.status == 401
    await sim.drop()


async def test_xiaozhi_sdk_uploads_without_device_id(
    hass: HomeAssistant, setup_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """xiaozhi-sdk sends only the vision token: the token says whose camera it is."""
    hass.config_entries.async_update_entry(setup_integration, options={"websocket_url": ws_url(client)})
    await hass.async_block_till_done()
    sim = SimulatedDevice(SimulatorOptions(url=ws_url(client), token=TOKEN, mac=MAC, camera=True, flavor="xiaozhi-sdk"))
    await sim.connect()
    device = hub_of(setup_integration).devices[MAC]
    await wait_settled(device)
    response: Any = await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {"device_id": device.device_id, "tool": "self.camera.take_photo", "arguments": {"question": "Hi?"}},
        blocking=True,
        return_response=True,
    )
    assert response["data"] == {"success": False, "text": NO_AI_TASK}  # uploaded, kept, answered
    assert device.photo == TINY_JPEG
    # Without Device-Id, a token nobody has is refused.
    resp = await client.post(
        VISION_PATH,
        data=multipart(b"q", TINY_JPEG),
        headers={"Authorization": "Bearer nobody", "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
    )
    assert resp.status == 401
    await sim.drop()


async def test_last_photo_before_the_first_photo_is_a_placeholder(
    hass: HomeAssistant,
    setup_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    hass_client: ClientSessionGenerator,
) -> None:
    """Before the camera took anything, the image answers with the icon, not HTTP 500."""
    sim = await camera(hass, setup_integration, client)
    authed = await hass_client()
    resp = await authed.get("/api/image_proxy/image.kitchen_last_photo")
    assert resp.status == 200
    assert resp.content_type == "image/png"
    assert (await resp.read()).startswith(b"\x89PNG")
    await sim.drop()
