"""The ``inputResponses`` the probe sends when ``--answer`` gives none: for each input request,
the least a client could answer and be accepted. An elicitation is accepted with the smallest
content its schema allows (each required field at its least value; optional ones left out), a
sampling request gets a one-word assistant message, a roots request an empty list.

The answers only have to be good enough for an honest retry to complete: the probe checks that
one does before it judges any refusal, so an answer the tool rejects stops the probe (exit 8,
"give --answer") instead of making every attack look refused.
"""

from __future__ import annotations

from typing import Any

__all__ = ["default_answers"]


def default_answers(requests: Any) -> dict[str, Any]:
    """An answer for each entry of ``inputRequests`` (a mapping of key to request)."""
    if not isinstance(requests, dict):
        return {}
    return {key: _answer(request) for key, request in requests.items()}


def _answer(request: Any) -> Any:
    method = request.get("method") if isinstance(request, dict) else None
    params = request.get("params") if isinstance(request, dict) else None
    params = params if isinstance(params, dict) else {}
    if method == "sampling/createMessage":
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "ok"},
            "model": "mrtr-state-probe",
            "stopReason": "endTurn",
        }
    if method == "roots/list":
        return {"roots": []}
    # elicitation/create (and anything else: an acceptance is the likeliest to be understood)
    if params.get("mode") == "url":
        return {"action": "accept"}
    return {"action": "accept", "content": _least(params.get("requestedSchema"), 0)}


def _least(schema: Any, depth: int) -> Any:
    """The smallest value ``schema`` (a JSON Schema, as elicitation uses it) accepts."""
    if not isinstance(schema, dict) or depth > 8:
        return {}
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    for key in ("enum", "examples"):
        if isinstance(schema.get(key), list) and schema[key]:
            return schema[key][0]
    for key in ("oneOf", "anyOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            first = options[0]
            if isinstance(first, dict) and "const" in first:
                return first["const"]
            return _least(first, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        required = required if isinstance(required, list) else []
        return {
            name: _least(properties.get(name), depth + 1)
            for name in required
            if isinstance(name, str)
        }
    if kind == "string":
        return _least_string(schema)
    if kind in ("number", "integer"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        if isinstance(low, int | float) and not isinstance(low, bool):
            bumped = low + 1 if "minimum" not in schema else low
            return int(bumped) if kind == "integer" else bumped
        return 0
    if kind == "boolean":
        return False
    if kind == "array":
        count = schema.get("minItems", 0)
        count = count if isinstance(count, int) and 0 <= count <= 16 else 0
        return [_least(schema.get("items"), depth + 1) for _ in range(count)]
    if kind == "null":
        return None
    return {}


def _least_string(schema: dict[str, Any]) -> str:
    form = schema.get("format")
    if form == "email":
        return "probe@example.com"
    if form == "uri":
        return "https://example.com/"
    if form == "date":
        return "2026-01-01"
    if form == "date-time":
        return "2026-01-01T00:00:00Z"
    length = schema.get("minLength", 0)
    length = length if isinstance(length, int) and 0 <= length <= 1024 else 0
    return "a" * length
