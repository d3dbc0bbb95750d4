"""Properties of the history transforms over arbitrary, often malformed, histories.

The generator is deliberately hostile: repeated ``call_abc123`` ids, two calls with one
id, empty ids, orphan and duplicate tool messages, text next to tool calls, and message
ids that collide, because that is what crashes, retries and models produce.
"""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from durable_plans.domain.history import (
    DependencyResult,
    format_dependency_context,
    isolate_for_subtask,
    restore_from_snapshot,
    switch_agent_cleanup,
)
from durable_plans.domain.models import FunctionCall, Message, ToolCall
from durable_plans.domain.secrets import contains_secret, scrub_secrets
from durable_plans.domain.tool_ids import (
    assign_tool_call_ids,
    repair_tool_pairing,
    strict_violations,
)

PROPERTY = settings(max_examples=150, deadline=None)

message_ids = st.sampled_from([f"m{i}" for i in range(12)]) | st.text(string.hexdigits, max_size=6)
call_ids = st.sampled_from(["call_abc123", "call_1", "call_2", "toolu_1", ""]) | st.text(
    string.ascii_letters + string.digits + "_-", min_size=1, max_size=8
)
contents = st.none() | st.text(max_size=24)

tool_calls = st.builds(
    ToolCall,
    id=call_ids,
    function=st.builds(FunctionCall, name=st.sampled_from(["read_file", "write_file", "ls"])),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["system", "user", "assistant", "assistant", "tool", "tool"]))
    mid = draw(message_ids)
    if role == "tool":
        return Message(
            id=mid, role="tool", content=draw(contents), tool_call_id=draw(st.none() | call_ids)
        )
    if role == "assistant":
        calls = draw(st.none() | st.lists(tool_calls, max_size=3).map(tuple))
        return Message(id=mid, role="assistant", content=draw(contents), tool_calls=calls)
    return Message(id=mid, role=role, content=draw(st.text(max_size=24)))


histories = st.lists(messages(), max_size=25)
dependencies = st.lists(
    st.builds(
        DependencyResult,
        subtask_id=st.text(string.ascii_lowercase, min_size=1, max_size=8),
        description=st.text(max_size=400),
        result=st.text(max_size=3_000),
    ),
    max_size=6,
)


def _wire(history: list[Message]) -> list[dict[str, object]]:
    return [m.to_openai() for m in history]


def _non_tool(history: list[Message]) -> list[tuple[str, str, str | None]]:
    return [(m.id, m.role, m.content) for m in history if m.role != "tool"]


@PROPERTY
@given(histories, dependencies)
def test_isolation_removes_all_tool_traffic_and_keeps_conversation_order(
    history: list[Message], deps: list[DependencyResult]
) -> None:
    out = isolate_for_subtask(history, deps, context_id="ctx", max_context_chars=2_000)
    assert not any(m.is_tool_traffic for m in out)
    body = out[:-1] if deps else out
    if deps:
        assert out[-1].id == "ctx" and out[-1].role == "system"
    conversation = [m for m in history if m.role in ("user", "system")]
    assert [m for m in body if m.role in ("user", "system")] == conversation
    # Assistant text survives, in place; calls-only messages vanish.
    spoken = [
        (m.id, m.content)
        for m in history
        if m.role != "tool" and not (m.tool_calls and not (m.content or "").strip())
    ]
    assert [(m.id, m.content) for m in body] == spoken
    assert strict_violations(_wire(out)) == []


@PROPERTY
@given(histories, histories)
def test_restore_without_keep_is_exactly_the_snapshot(
    snapshot: list[Message], current: list[Message]
) -> None:
    assert restore_from_snapshot(snapshot, current, keep_last_result=False) == snapshot


@PROPERTY
@given(histories, histories)
def test_restore_with_keep_adds_at_most_one_new_plain_answer(
    snapshot: list[Message], current: list[Message]
) -> None:
    out = restore_from_snapshot(snapshot, current, keep_last_result=True)
    assert out[: len(snapshot)] == snapshot
    extra = out[len(snapshot) :]
    assert len(extra) <= 1
    known = {m.id for m in snapshot}
    new_answers = [m for m in current if m.is_plain_assistant and m.id not in known]
    assert extra == new_answers[-1:]


@PROPERTY
@given(histories, st.text(max_size=20))
def test_repair_always_satisfies_a_strict_provider(history: list[Message], missing: str) -> None:
    out = repair_tool_pairing(history, missing_result=missing)
    assert strict_violations(_wire(out)) == []
    assert _non_tool(out) == _non_tool(history)  # every non-tool message, in order
    for before, after in zip(
        [m for m in history if m.role != "tool"], [m for m in out if m.role != "tool"], strict=True
    ):
        assert len(before.tool_calls or ()) == len(after.tool_calls or ())
    assert repair_tool_pairing(out, missing_result=missing) == out


@PROPERTY
@given(st.lists(st.lists(tool_calls, min_size=1, max_size=4), max_size=8))
def test_our_ids_are_unique_whatever_the_model_returns(turns: list[list[ToolCall]]) -> None:
    history: list[Message] = [Message(id="u", role="user", content="go")]
    seen: list[str] = []
    for turn, calls in enumerate(turns):
        salt = f"wf-1:step-{turn}"
        message = Message(id=salt, role="assistant", tool_calls=tuple(calls))
        new, pairs = assign_tool_call_ids(message, salt=salt)
        assert [old for old, _ in pairs] == [c.id for c in calls]
        seen.extend(new_id for _, new_id in pairs)
        history.append(new)
        history.extend(
            Message(id=f"{salt}:{i}", role="tool", content="r", tool_call_id=new_id)
            for i, (_, new_id) in enumerate(pairs)
        )
    assert len(seen) == len(set(seen))
    assert strict_violations(_wire(history)) == []


@PROPERTY
@given(histories, st.none() | st.text(max_size=30))
def test_agent_switch_report_matches_the_history(
    history: list[Message], reason: str | None
) -> None:
    out, report = switch_agent_cleanup(
        history, from_agent="orchestrator", to_agent="coder", reason=reason, note_id="note"
    )
    assert not any(m.is_tool_traffic for m in out)
    assert out[-1].id == "note" and out[-1].content == report.context_message
    assert report.context_message.split("\n")[0] == "Agent switched: orchestrator → coder"
    assert report.final_message_count == len(out)
    assert report.removed_count == len(history) - (len(out) - 1)
    if report.preserved_result is not None:
        assert report.preserved_result in [m.content for m in out[:-1] if m.role == "assistant"]
    assert [m for m in out if m.role in ("user", "system")][:-1] == [
        m for m in history if m.role in ("user", "system")
    ]


@PROPERTY
@given(dependencies, st.integers(min_value=1, max_value=5_000))
def test_dependency_context_never_exceeds_its_budget(
    deps: list[DependencyResult], max_chars: int
) -> None:
    text = format_dependency_context(deps, max_chars=max_chars)
    assert len(text) <= max_chars
    if deps and len(text) < max_chars // 2:
        # Only cut when it had to be: a short text is the whole text.
        assert all(d.result in text for d in deps)


_KEY_BODY = st.text(string.ascii_letters + string.digits + "_-/+=", max_size=60)
_FRAGMENTS = st.sampled_from(
    [
        "sk-",
        "sk-proj-",
        "sk-ant-",
        "sk-or-v1-",
        "AKIA",
        "ASIA",
        "Bearer ",
        "api_key=",
        '"api_key": "',
        "aws_secret_access_key = ",
        "AWS_SECRET_ACCESS_KEY=",
        "[REDACTED:openai]",
        "task-sketch",
        " ",
        "\n",
        '"',
    ]
)
# A prefix glued to a key-like body makes real secrets frequent, not a lucky accident.
_PREFIXED = st.tuples(_FRAGMENTS, _KEY_BODY).map("".join)
secretish_text = st.lists(_PREFIXED | _FRAGMENTS | st.text(max_size=10), max_size=12).map("".join)


@PROPERTY
@given(secretish_text)
def test_scrubbing_is_idempotent_and_complete(text: str) -> None:
    once = scrub_secrets(text)
    assert scrub_secrets(once) == once
    assert not contains_secret(once)
    assert contains_secret(text) == (once != text)
