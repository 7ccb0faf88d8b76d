"""Check tool arguments against a tool's JSON Schema before anything is sent to the device.

Devices describe arguments with a small JSON Schema subset (stock firmware: ``boolean``,
``integer``, ``string`` with ``default``/``minimum``/``maximum``; other clients add ``number``,
``enum``, ``array``, ``object``). Keywords we do not know are ignored rather than rejected.
"""

from typing import Any, Final

MAX_DEPTH: Final = 16

_TYPE_CHECKS: Final[dict[str, type | tuple[type, ...]]] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
    "null": type(None),
}


def _type_ok(value: Any, type_name: str) -> bool:
    if type_name in ("integer", "number") and isinstance(value, bool):
        return False
    if type_name == "integer" and isinstance(value, float):
        return value.is_integer()
    expected = _TYPE_CHECKS.get(type_name)
    return True if expected is None else isinstance(value, expected)


def validate(schema: Any, value: Any, path: str = "arguments", depth: int = 0) -> list[str]:
    """Return the problems of ``value`` against ``schema`` (empty when it fits)."""
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return []
    errors: list[str] = []
    types = schema.get("type")
    if isinstance(types, str):
        types = [types]
    if isinstance(types, list) and types and not any(_type_ok(value, str(t)) for t in types):
        return [f"{path} must be of type {' or '.join(map(str, types))}"]
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        errors.append(f"{path} must be one of {', '.join(map(str, enum))}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        minimum, maximum = schema.get("minimum"), schema.get("maximum")
        if isinstance(minimum, (int, float)) and value < minimum:
            errors.append(f"{path} must be at least {minimum}")
        if isinstance(maximum, (int, float)) and value > maximum:
            errors.append(f"{path} must be at most {maximum}")
    if isinstance(value, str):
        min_len, max_len = schema.get("minLength"), schema.get("maxLength")
        if isinstance(min_len, int) and len(value) < min_len:
            errors.append(f"{path} must have at least {min_len} characters")
        if isinstance(max_len, int) and len(value) > max_len:
            errors.append(f"{path} must have at most {max_len} characters")
    if isinstance(value, dict):
        errors.extend(_validate_object(schema, value, path, depth))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors.extend(validate(schema["items"], item, f"{path}[{index}]", depth + 1))
    return errors


def _validate_object(schema: dict[str, Any], value: dict[str, Any], path: str, depth: int) -> list[str]:
    errors: list[str] = []
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    if isinstance(required, list):
        errors.extend(f"{path}.{key} is required" for key in required if isinstance(key, str) and key not in value)
    for key, item in value.items():
        if key in properties:
            errors.extend(validate(properties[key], item, f"{path}.{key}", depth + 1))
        elif schema.get("additionalProperties") is False:
            errors.append(f"{path}.{key} is not a known argument")
    return errors
