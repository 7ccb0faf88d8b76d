"""What the integration uses of Home Assistant beyond its documented API: pinned, so a change fails here.

Every such use, and why there is no public way (Home Assistant 2026.10/11):
- The typed-text run (``satellite/text.py``) does what ``async_accept_pipeline_from_satellite``
  does, from the intent stage: it needs the satellite's members in ``HA_PRIVATE_MEMBERS`` and
  the pipeline's ``PipelineInput``/``PipelineRun``.
- ``button.py`` forgets the oldest records of removed tool buttons in the entity registry's
  ``deleted_entities`` (the registry offers no call to forget one), so a device that renames
  its tools all day does not grow the registry.
- ``transport/endpoint.py`` adds the routes of the views browser test pages call with HA's own request
  wrapper, ``request_handler_factory``, and a CORS preflight of their own: ``register_view``
  would put them behind HA's configured CORS origins, which allow none of the device headers.
Each test names what changed and where it is used.
"""

import ast
import dataclasses
import inspect
import textwrap

from homeassistant.components.assist_pipeline import PipelineInput, PipelineRun
from homeassistant.components.assist_satellite import AssistSatelliteEntity
from homeassistant.const import __version__ as HA_VERSION
from homeassistant.helpers import chat_session
from homeassistant.helpers.entity import Entity
import pytest

from custom_components.xiaozhi_local.assist_satellite import XiaozhiAssistSatellite
from custom_components.xiaozhi_local.satellite.listening import Listening
from custom_components.xiaozhi_local.satellite.playback import Playback
from custom_components.xiaozhi_local.satellite.runner import Runner
from custom_components.xiaozhi_local.satellite.text import HA_PRIVATE_MEMBERS, TypedText


@pytest.mark.parametrize("name", HA_PRIVATE_MEMBERS)
def test_the_satellite_base_class_still_has(name: str) -> None:
    assert hasattr(AssistSatelliteEntity, name), (
        f"Home Assistant no longer has AssistSatelliteEntity.{name}: satellite/text.py runs typed text with it"
    )


def private_uses(cls: type) -> set[str]:
    """The ``x._y`` names a class's own source reads or sets, on itself or on the entity it drives."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
    }


def test_the_text_run_is_seen_using_the_entitys_private_members() -> None:
    """The check below reads the helpers too: the text run sets the entity's members from outside it."""
    assert {"_extra_system_prompt", "_pipeline_task", "_conversation_id"} <= private_uses(TypedText)


@pytest.mark.parametrize("cls", [Runner, TypedText, Listening, Playback, XiaozhiAssistSatellite])
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


def test_the_entity_registry_still_keeps_removed_entities_as_button_py_forgets_them() -> None:
    from homeassistant.helpers import entity_registry as er

    fields = {field.name for field in er.DeletedRegistryEntry.__attrs_attrs__}
    assert {"unique_id", "platform", "domain", "modified_at"} <= fields, "button.py forget_oldest_removed"
    assert "self.deleted_entities" in inspect.getsource(er.EntityRegistry), "button.py forget_oldest_removed"
    assert callable(er.EntityRegistry.async_schedule_save)


def test_the_view_wrapper_http_py_registers_open_routes_with() -> None:
    from homeassistant.helpers.http import request_handler_factory

    params = list(inspect.signature(request_handler_factory).parameters)
    assert params[:3] == ["hass", "view", "handler"], "transport/endpoint.py register_open_view"
