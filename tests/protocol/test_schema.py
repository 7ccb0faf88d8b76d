from typing import Any

import pytest

from custom_components.xiaozhi_local.protocol.schema import validate

VOLUME = {
    "type": "object",
    "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["volume"],
}


@pytest.mark.parametrize(
    ("args", "errors"),
    [
        ({"volume": 50}, []),
        ({"volume": 50.0}, []),
        ({}, ["arguments.volume is required"]),
        ({"volume": "50"}, ["arguments.volume must be of type integer"]),
        ({"volume": True}, ["arguments.volume must be of type integer"]),
        ({"volume": 50.5}, ["arguments.volume must be of type integer"]),
        ({"volume": 101}, ["arguments.volume must be at most 100"]),
        ({"volume": -1}, ["arguments.volume must be at least 0"]),
        ({"volume": 5, "extra": 1}, []),
    ],
)
def test_firmware_schema(args: dict[str, Any], errors: list[str]) -> None:
    assert validate(VOLUME, args) == errors


def test_richer_schemas() -> None:
    schema = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["a", "b"], "minLength": 1, "maxLength": 1},
            "items": {"type": "array", "items": {"type": "number"}},
            "opt": {"type": ["string", "null"]},
        },
        "additionalProperties": False,
    }
    assert validate(schema, {"mode": "a", "items": [1, 2.5], "opt": None}) == []
    assert validate(schema, {"mode": "c"}) == ["arguments.mode must be one of a, b"]
    assert validate(schema, {"mode": ""}) == [
        "arguments.mode must be one of a, b",
        "arguments.mode must have at least 1 characters",
    ]
    assert validate(schema, {"mode": "ab"})[-1] == "arguments.mode must have at most 1 characters"
    assert validate(schema, {"items": [1, "x"]}) == ["arguments.items[1] must be of type number"]
    assert validate(schema, {"zzz": 1}) == ["arguments.zzz is not a known argument"]
    assert validate(schema, [1]) == ["arguments must be of type object"]


def test_odd_schemas_are_tolerated() -> None:
    assert validate(None, {"a": 1}) == []
    assert validate({"type": "object", "properties": [1], "required": "x"}, {"a": 1}) == []
    assert validate({"type": "mystery"}, 1) == []
    deep: dict[str, Any] = {"type": "object"}
    node = deep
    for _ in range(50):
        node["properties"] = {"a": {"type": "object"}}
        node = node["properties"]["a"]
    value: dict[str, Any] = {}
    cur = value
    for _ in range(50):
        cur["a"] = {}
        cur = cur["a"]
    assert validate(deep, value) == []
