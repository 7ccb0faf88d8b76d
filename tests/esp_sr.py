"""A stand-in for esp-sr's ``model/wakenet_model/`` on GitHub, shaped like the real one.

Learned from esp-sr (HEAD ``7ff63a7``), written here: every catalog model gets synthetic files
of esp-sr's real sizes (``wn9_data`` 124,545 to 291,201 bytes, ``wn9_index`` 1,152 or 1,200) and
a ``_MODEL_INFO_`` in one of the forms esp-sr's files take (one line, a trailing newline, a
comment line first, spaces and commas in the word, ``or`` alternatives, pinyin with tones). The
catalog's pins are swapped for these files' digests, so the integration checks them exactly as
it checks esp-sr's.

The server sends a file the way a real one may: in one write with a Content-Length, chunked in
many small pieces, slowly, cut off, or with a Content-Length that lies.
"""

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
import hashlib
from typing import Final

from aiohttp import web

from custom_components.xiaozhi_local.wake_words.catalog import CATALOG, PinnedFile, WakeModel

COMMENT: Final = "# (neural network type)_(model data version)_(label1_detection window length_threshold)_..."
INFO_FORMS: Final = (
    "wakeNet9_v1h24_{word}_3_0.63_0.635",  # one line, nothing after it
    "wakenet9l_tts1h8_{word}_3_0.640_0.650\n",  # a trailing newline
    f"{COMMENT}\nwakenet9l_tts1h8_{{word}}_3_0.627_0.632\n",  # a comment line first (Jarvis, Sophia …)
    "wakenet9_tts2h12_{word}_3_0.619_0.623  \n",  # trailing spaces
)
MODES: Final = ("whole", "chunked", "slow")
"""How a good file is sent: one write with a Content-Length; chunked in small pieces; slowly."""
BROKEN: Final = ("cut", "longer_length", "shorter_length", "no_length_closed", "404")
"""How a file goes wrong: closed half-way; a Content-Length above or below the body; no length, closed early."""


def word_of(model: WakeModel) -> str:
    """The word our ``_MODEL_INFO_`` names, in esp-sr's spelling (``Hi,Stack Chan``, ``Hi,Lily or Hi,莉莉``)."""
    parts = (part.strip() for part in model.label.split(" · ")[0].split("/"))
    return " or ".join(part.replace(" ", ",", 1) for part in parts)


def info_of(model: WakeModel, index: int) -> bytes:
    """A ``_MODEL_INFO_`` in one of esp-sr's forms (Jarvis in the comment form, as esp-sr's own)."""
    form = INFO_FORMS[2] if model.name == "wn9_jarvis_tts" else INFO_FORMS[index % len(INFO_FORMS)]
    return form.format(word=word_of(model)).encode()


def data_of(name: str, size: int) -> bytes:
    """Bytes of a model file: of its real size, made from its name (not esp-sr's content)."""
    return hashlib.shake_256(name.encode()).digest(size)


@dataclass
class EspSr:
    """The stand-in's files, how it sends them, and what was asked."""

    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    catalog: dict[str, WakeModel] = field(default_factory=dict)
    mode: str = "chunked"
    broken: dict[str, str] = field(default_factory=dict)
    """By ``model/file``: how that file goes wrong (one of ``BROKEN``)."""
    asked: list[str] = field(default_factory=list)

    @classmethod
    def like_esp_sr(cls) -> EspSr:
        """Every catalog model, files of esp-sr's sizes, pins made for them."""
        stand_in = cls()
        for index, model in enumerate(CATALOG):
            files = {
                pin.name: info_of(model, index)
                if pin.name == "_MODEL_INFO_"
                else data_of(f"{model.name}/{pin.name}", pin.size)
                for pin in model.files
            }
            stand_in.files[model.name] = files
            pins = tuple(PinnedFile(name, len(data), hashlib.sha256(data).hexdigest()) for name, data in files.items())
            stand_in.catalog[model.name] = WakeModel(model.name, model.label, model.languages, pins)
        return stand_in

    def models(self) -> Iterator[WakeModel]:
        yield from self.catalog.values()

    async def serve(self, request: web.Request) -> web.StreamResponse:
        key = f"{request.match_info['model']}/{request.match_info['file']}"
        self.asked.append(key)
        data = self.files.get(request.match_info["model"], {}).get(request.match_info["file"])
        how = self.broken.get(key)
        if data is None or how == "404":
            return web.Response(status=404)
        if how == "cut":
            return await self._send(request, data, len(data), stop_at=len(data) // 2)
        if how == "longer_length":
            return await self._send(request, data, len(data) + 4096, stop_at=len(data))
        if how == "shorter_length":
            return await self._send(request, data[: len(data) - 4096], len(data) - 4096)
        if how == "no_length_closed":
            return await self._send(request, data, None, stop_at=len(data) - 10_000, chunked=False)
        if self.mode == "whole":
            return web.Response(body=data)
        return await self._send(request, data, None if self.mode == "chunked" else len(data), slow=self.mode == "slow")

    @staticmethod
    async def _send(
        request: web.Request,
        data: bytes,
        length: int | None,
        *,
        stop_at: int | None = None,
        chunked: bool = True,
        slow: bool = False,
    ) -> web.StreamResponse:
        """``data`` in pieces of 1 to 5 KB; stopped (the connection closed) at ``stop_at``."""
        response = web.StreamResponse()
        if length is not None:
            response.content_length = length
        elif chunked:
            response.enable_chunked_encoding()
        else:
            response.force_close()
        await response.prepare(request)
        sent, piece, end = 0, 1000, len(data) if stop_at is None else stop_at
        while sent < end:
            chunk = data[sent : min(end, sent + piece)]
            await response.write(chunk)
            sent += len(chunk)
            piece = 1000 + (piece * 7) % 4096
            await asyncio.sleep(0.001 if slow else 0)
        if stop_at is not None:
            assert request.transport is not None
            request.transport.close()  # the connection breaks off
            return response
        await response.write_eof()
        return response
