"""``self.camera.take_photo``'s upload (§11): chunked multipart, question then file."""

from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from .mcp_server import McpServer, ToolError

BOUNDARY = "----ESP32_CAMERA_BOUNDARY"
# A 1×1 white JPEG: small, real, decodable.
TINY_JPEG = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300080606070605080707070909080a0c140d0c0b0b0c1912130f141d"
    "1a1f1e1d1a1c1c20242e2720222c231c1c2837292c30313434341f27393d38323c2e333432ffc0000b080001000101011100ffc4"
    "001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d"
    "01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435"
    "363738393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798"
    "999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4"
    "f5f6f7f8f9faffda0008010100003f00fbfcffd9"
)


async def _body(question: str) -> AsyncIterator[bytes]:
    yield (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="question"\r\n\r\n{question}\r\n').encode()
    yield (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="camera.jpg"\r\n'
        "Content-Type: image/jpeg\r\n\r\n"
    ).encode()
    yield TINY_JPEG
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


async def upload_photo(server: McpServer, system_info: dict[str, Any], question: str, *, identify: bool = True) -> str:
    """POST the photo; the response body is the tool's text result.

    ``identify``: the firmware sends ``Device-Id`` and ``Client-Id``; xiaozhi-sdk sends neither.
    """
    assert server.vision_url is not None
    headers = {
        "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        # Transfer-Encoding: chunked, as the firmware sends it: aiohttp chunks a generator body.
    }
    if identify:
        headers |= {"Device-Id": system_info["mac_address"], "Client-Id": system_info["uuid"]}
    if server.vision_token:
        headers["Authorization"] = f"Bearer {server.vision_token}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.post(server.vision_url, data=_body(question), headers=headers) as resp,
        ):
            if resp.status != 200:
                raise ToolError("Failed to upload photo")
            return await resp.text()
    except TimeoutError, aiohttp.ClientError:
        raise ToolError("Failed to connect to explain URL") from None
