"""Which token format an issued state is written in, by the package's own detection
(:func:`mrtr_state.tokens.registry.shape_of` and :func:`mrtr_state.inspect`), never a second
detector.

mrtr-state's own formats (``aead``, ``jws``, ``jwe``, a state handle) and each SDK's (``mcp-py``,
``mcp-ts``, ``mcp-rb``, ``mcp-rs``, ``mcp-rs2``, ``mcp-php``, ``mcp-java``) are named; shapes two
SDKs share are named as both ("mcp-py or mcp-rb") unless the readable body tells them apart,
since without the key nothing else can. A state of no known format is None.
"""

from __future__ import annotations

__all__ = ["format_of"]


def format_of(state: str) -> str | None:
    from ..errors import InvalidToken, OversizedToken
    from ..tokens.inspection import inspect
    from ..tokens.registry import HANDLE_PREFIX, shape_of

    if state.startswith(HANDLE_PREFIX):
        return "mrtr-state handle"
    try:
        shape = shape_of(state)
    except InvalidToken:
        return None
    try:
        view = inspect(state)
    except OversizedToken:  # over the size cap the anatomy is not read: the shape is all
        return shape.name
    except (InvalidToken, ValueError):
        return None  # the shape's prefix, but not its layout: a state of no known format
    if shape.only is not None:
        return view.format
    claims = view.claims
    if claims is not None and view.state_member in claims:
        return view.format  # the readable body holds one format's state member
    return shape.name
