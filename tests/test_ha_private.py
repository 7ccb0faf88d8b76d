"""What the satellite uses of Home Assistant that is not public API: pinned, so a rename fails here.

The typed-text run (``satellite/text.py``) does what ``async_accept_pipeline_from_satellite``
does, from the intent stage, because Home Assistant 2026.10/11 offers no public way to: it needs
the members below. Each test names what changed and where it is used.
"""

import ast
import dataclasses
import inspect
import textwrap

from homeassistant.components.assist_pipeline.pipeline import PipelineInput, PipelineRun
from homeassistant.components.assist_satellite import AssistSatelliteEntity
from homeassistant.const import __version__ as HA_VERSION
from homeassistant.helpers import chat_session
from homeassistant.helpers.entity import Entity
import pytest

from custom_components.xiaozhi_local.assist_satellite import XiaozhiAssistSatellite
from custom_components.xiaozhi_local.satellite.base import SatelliteBase
from custom_components.xiaozhi_local.satellite.listening import ListeningMixin
from custom_components.xiaozhi_local.satellite.playback import PlaybackMixin
from custom_components.xiaozhi_local.satellite.text import HA_PRIVATE_MEMBERS, TextMixin


@pytest.mark.parametrize("name", HA_PRIVATE_MEMBERS)
def test_the_satellite_base_class_still_has(name: str) -> None:
    assert hasattr(AssistSatelliteEntity, name), (
        f"Home Assistant no longer has AssistSatelliteEntity.{name}: satellite/text.py runs typed text with it"
    )


def private_uses(cls: type) -> set[str]:
    """The ``self._x`` names a class's own source reads or sets."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    }


@pytest.mark.parametrize("cls", [SatelliteBase, TextMixin, ListeningMixin, PlaybackMixin, XiaozhiAssistSatellite])
def test_no_other_private_member_is_used(cls: type) -> None:
    """What the satellite takes from the base class beyond ``Entity``'s is listed, hence pinned."""
    from_assist_satellite = set(dir(AssistSatelliteEntity)) - set(dir(Entity))
    unlisted = (private_uses(cls) & from_assist_satellite) - set(HA_PRIVATE_MEMBERS)
    assert not unlisted, (
        f"{cls.__name__} uses AssistSatelliteEntity.{unlisted} without pinning it in HA_PRIVATE_MEMBERS"
    )


def test_the_pipeline_takes_what_the_text_run_passes() -> None:
    fields = {field.name for field in dataclasses.fields(PipelineInput)}
    wanted = {"run", "session", "intent_input", "conversation_extra_system_prompt", "device_id", "satellite_id"}
    assert wanted <= fields, f"PipelineInput lost {wanted - fields}: satellite/text.py passes them"
    parameters = set(inspect.signature(PipelineRun).parameters)
    wanted = {"context", "pipeline", "start_stage", "end_stage", "event_callback", "tts_audio_output"}
    assert wanted <= parameters, f"PipelineRun lost {wanted - parameters}: satellite/text.py passes them"
    assert callable(getattr(PipelineInput, "execute", None)), "PipelineInput.execute is gone: satellite/text.py"
    assert "context" in inspect.signature(chat_session.async_get_chat_session).parameters or (
        HA_VERSION.startswith("2026.10")
    ), "async_get_chat_session takes no context: satellite/text.py passes None where it does"
