"""The session store's message decoding: small bodies decoded once and shared (a message
is immutable), large ones each time, a bad body refused every time."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from durable_plans.domain.models import FunctionCall, Message, ToolCall, Usage
from durable_plans.session_store import _codec


def test_a_small_body_decodes_to_the_same_message_every_time() -> None:
    message = Message(
        id="m1",
        role="assistant",
        content="hello",
        tool_calls=(ToolCall(id="c1", function=FunctionCall(name="read_file", arguments="{}")),),
        usage=Usage(prompt_tokens=3, completion_tokens=2),
    )
    body = _codec.encode(message).body

    first = _codec.decode(body)
    again = _codec.decode("".join(list(body)))  # an equal body read anew, not the same str

    assert first == message and again is first
    with pytest.raises(ValidationError):  # immutable: sharing it is safe
        first.content = "changed"  # type: ignore[misc]


def test_a_large_body_is_decoded_anew() -> None:
    message = Message(id="m2", role="user", content="x" * (_codec.CACHED_BODY_CHARS + 1))
    body = _codec.encode(message).body

    first, again = _codec.decode(body), _codec.decode(body)

    assert first == again == message and again is not first


def test_a_bad_body_fails_every_time() -> None:
    body = '{"id": "m3", "role": "narrator"}'
    for _ in range(2):
        with pytest.raises(ValidationError):
            _codec.decode(body)
