"""`dplan chat` against a provider that ignores ``stream`` and answers every streamed
request with one plain JSON completion (as some gateways do): the chat shows the answer,
the tool call it made ran, and nothing reads the answer as empty."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client

from tests.integration.test_chat import (  # noqa: F401
    Stack,
    _last_answer,
    run_cli,
    shared_stack,
    stack,
)

pytestmark = pytest.mark.integration


async def test_a_chat_whose_provider_answers_streams_with_plain_json_shows_the_answer(
    stack: Stack,  # noqa: F811
    client: Client,
) -> None:
    session = f"chat-json-{uuid.uuid4().hex[:8]}"
    code, out, err = await run_cli(stack, ["chat", "--session", session], "Hi [no-stream]\n")
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    stored = await _last_answer(client, session)
    # The first answer (a tool call) and the last (text) both came as plain JSON.
    assert stored and stored.startswith("Done: Hi. Based on the tool result:")
    assert f"orchestrator: {stored}\n" in out, out
    assert "  → tool(list_dir)\n" in out, out
    assert "EmptyAnswer" not in out + err
    streamed = [e for e in stack.log_entries() if e.get("kind") == "completion"]
    assert len(streamed) >= 2 and all(e["delivered"] for e in streamed)
