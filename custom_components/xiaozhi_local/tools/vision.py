"""The camera endpoint: ``self.camera.take_photo`` uploads here and speaks what we answer (§11).

The firmware POSTs ``multipart/form-data`` (``question``, then ``file`` = JPEG) with chunked
transfer encoding, ``Authorization: Bearer <token from initialize>`` and ``Device-Id``
(xiaozhi-sdk sends no ``Device-Id``: the token alone then says which device it is). The
photo is shown by the device's image entity, then HA's AI Task answers the question about it.
The response body becomes the tool's result: ``{"success": …, "text": …}``.
"""

import asyncio
from collections.abc import Iterable
import logging
from typing import Any

from aiohttp import BodyPartReader, web
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView

from ..admission.gate import Refused
from ..const import CONF_AI_TASK_ENTITY, DOMAIN, MAX_PHOTO, VISION_ANSWER_TIMEOUT, VISION_PATH
from ..device import XiaozhiDevice
from ..hub import async_get_hub
from ..protocol.messages import normalize_mac
from ..transport.endpoint import async_refuse, bearer_token

_LOGGER = logging.getLogger(__name__)

MAX_QUESTION = 4096
NO_AI_TASK = (
    "I took the photo, but Home Assistant has no AI Task to look at it. "
    "Set one up in Home Assistant to let me describe what I see."
)


class PhotoError(Exception):
    """An upload that is not the firmware's multipart shape."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _read_part(part: BodyPartReader, limit: int) -> bytes:
    data = bytearray()
    while chunk := await part.read_chunk(16384):
        data += chunk
        if len(data) > limit:
            raise PhotoError(413, f"{part.name} is larger than {limit} bytes")
    return bytes(data)


async def read_upload(request: web.Request) -> tuple[str, bytes]:
    """The question and the JPEG. Raises PhotoError with the status to answer."""
    if request.content_length is not None and request.content_length > MAX_PHOTO + MAX_QUESTION:
        raise PhotoError(413, "upload too large")
    try:
        reader = await request.multipart()
    except (ValueError, AssertionError, KeyError) as err:
        raise PhotoError(400, f"not a multipart upload: {err}") from None
    question = ""
    photo: bytes | None = None
    try:
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise PhotoError(400, "nested multipart")
            if part.name == "question":
                question = (await _read_part(part, MAX_QUESTION)).decode("utf-8", "replace").strip()
            elif part.name == "file":
                photo = await _read_part(part, MAX_PHOTO)
            else:
                await _read_part(part, MAX_QUESTION)  # something else: read and ignore, bounded
    except (ValueError, AssertionError, RuntimeError) as err:
        raise PhotoError(400, f"malformed multipart: {err}") from None
    if not photo:
        raise PhotoError(400, "no file part")
    if not photo.startswith(b"\xff\xd8"):
        raise PhotoError(400, "the file is not a JPEG")
    return question, photo


async def answer(hass: HomeAssistant, device: XiaozhiDevice, question: str, options: dict[str, Any]) -> dict[str, Any]:
    """Ask HA's AI Task about the photo the image entity now shows."""
    image_entity = er.async_get(hass).async_get_entity_id("image", DOMAIN, f"{device.mac}-photo")
    if image_entity is None or "ai_task" not in hass.config.components:
        return {"success": False, "text": NO_AI_TASK}
    # Imported only here: ai_task pulls in the camera component and its libraries, which the
    # rest of the integration must not depend on.
    from homeassistant.components import ai_task  # noqa: PLC0415

    try:
        async with asyncio.timeout(VISION_ANSWER_TIMEOUT):
            result = await ai_task.async_generate_data(
                hass,
                task_name=f"{device.name} camera",
                entity_id=options.get(CONF_AI_TASK_ENTITY) or None,
                instructions=question or "Describe what you see in this photo.",
                attachments=[
                    {"media_content_id": f"media-source://image/{image_entity}", "media_content_type": "image/jpeg"}
                ],
            )
    except TimeoutError:
        return {"success": False, "text": "Looking at the photo took too long."}
    except HomeAssistantError as err:
        no_task = "entity" in str(err).lower() and "preferred" in str(err).lower()
        # No AI Task entity is a choice of the user's, told to them by the device's own answer.
        _LOGGER.log(
            logging.DEBUG if no_task else logging.WARNING,
            "Device %s: the AI Task could not describe the photo: %s",
            device.mac,
            err,
        )
        return {"success": False, "text": NO_AI_TASK if no_task else f"I could not look at the photo: {err}"}
    return {"success": True, "text": str(result.data)}


def _device_of_vision_token(devices: Iterable[XiaozhiDevice], token: str) -> tuple[XiaozhiDevice | None, bool | None]:
    """The device whose camera token this is (checked against every one: constant time each)."""
    if token:
        for device in devices:
            if (valid := device.vision_token.check(token)) is not False:
                return device, valid
    return None, False


class XiaozhiVisionView(HomeAssistantView):
    """``POST /api/xiaozhi_local/vision``."""

    url = VISION_PATH
    name = "api:xiaozhi_local:vision"
    requires_auth = False

    async def post(self, request: web.Request) -> web.Response:
        """Check the upload token, keep the photo, answer the question."""
        hass = request.app[KEY_HASS]
        if (hub := async_get_hub(hass)) is None:
            return web.json_response({"error": "Xiaozhi Local is not set up"}, status=404)
        mac = normalize_mac(request.headers.get("Device-Id", ""))
        token = bearer_token(request.headers.get("Authorization"))
        if mac:
            device = hub.devices.get(mac)
            valid = device.vision_token.check(token) if device is not None and token else False
        else:
            # xiaozhi-sdk uploads without Device-Id: the short-lived token says whose photo it is.
            device, valid = _device_of_vision_token(hub.devices.values(), token)
        if not valid:
            # Its own token, expired: the device is no guesser (and must not get banned).
            return await async_refuse(request, Refused.EARLIER if valid is None else Refused.GUESS, mac)
        assert device is not None
        try:
            question, photo = await read_upload(request)
        except PhotoError as err:
            device.log.report("bad_upload", f"camera upload refused: {err}")
            return web.json_response({"success": False, "error": str(err)}, status=err.status)
        device.async_set_photo(photo)
        return web.json_response(await answer(hass, device, question, dict(hub.entry.options)))
