"""Tool-call id hygiene: the strict provider's rules, our own ids, and history repair."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from durable_plans.domain.ids import stable_id
from durable_plans.domain.models import FunctionCall, Message, ToolCall
from durable_plans.domain.tool_ids import (
    MISSING_RESULT,
    assign_tool_call_ids,
    missing_result_message_id,
    repair_tool_pairing,
    strict_violations,
)


def call(cid: str, name: str = "read_file") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


def asst(*ids: str, content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [call(i) for i in ids]}


def tool(cid: str | None, content: str = "ok") -> dict[str, Any]:
    out: dict[str, Any] = {"role": "tool", "content": content}
    if cid is not None:
        out["tool_call_id"] = cid
    return out


USER = {"role": "user", "content": "do it"}
SYSTEM = {"role": "system", "content": "you are a coder"}
PLAIN = {"role": "assistant", "content": "done"}


def m_user(mid: str, text: str = "hi") -> Message:
    return Message(id=mid, role="user", content=text)


def m_asst(mid: str, *ids: str, content: str | None = None) -> Message:
    calls = tuple(ToolCall(id=i, function=FunctionCall(name="f")) for i in ids)
    return Message(id=mid, role="assistant", content=content, tool_calls=calls or None)


def m_tool(mid: str, cid: str | None, content: str = "ok") -> Message:
    return Message(id=mid, role="tool", content=content, tool_call_id=cid)


def wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.to_openai() for m in messages]


# --------------------------------------------------------------------------- strict_violations


class TestStrictViolations:
    def test_well_paired_conversation_is_accepted(self) -> None:
        messages = [
            SYSTEM,
            USER,
            asst("call_1", "call_2"),
            tool("call_2"),  # answers may come in any order within the block
            tool("call_1"),
            asst("call_3"),
            tool("call_3"),
            PLAIN,
            USER,
        ]
        assert strict_violations(messages) == []

    def test_empty_and_tool_free_requests_are_accepted(self) -> None:
        assert strict_violations([]) == []
        assert strict_violations([SYSTEM, USER, PLAIN]) == []

    def test_answer_to_a_call_the_assistant_did_not_make(self) -> None:
        messages = [SYSTEM, USER, asst("call_y"), tool("call_y"), tool("call_x")]
        assert strict_violations(messages) == [
            "messages[4]: tool message answers 'call_x' but the preceding assistant "
            "message did not call it"
        ]

    def test_tool_message_without_assistant_call(self) -> None:
        problems = strict_violations([USER, tool("call_1")])
        assert problems == [
            "messages[1]: tool message answers 'call_1' but does not follow an assistant "
            "message with tool_calls"
        ]

    def test_answer_after_an_interrupting_message_is_outside_the_block(self) -> None:
        problems = strict_violations([USER, asst("call_1"), USER, tool("call_1")])
        assert problems == [
            "messages[1]: tool call 'call_1' is not answered by a tool message before messages[2]",
            "messages[3]: tool message answers 'call_1' but does not follow an assistant "
            "message with tool_calls",
        ]

    def test_unanswered_call_at_end_of_request(self) -> None:
        problems = strict_violations([USER, asst("call_1", "call_2"), tool("call_1")])
        assert problems == [
            "messages[1]: tool call 'call_2' is not answered by a tool message before the end"
        ]

    def test_second_answer_to_one_call(self) -> None:
        problems = strict_violations([USER, asst("call_1"), tool("call_1"), tool("call_1")])
        assert problems == ["messages[3]: tool message answers 'call_1' a second time"]

    def test_seed_000_reused_id_across_assistant_messages(self) -> None:
        messages = [
            USER,
            asst("call_abc123"),
            tool("call_abc123"),
            PLAIN,
            USER,
            asst("call_abc123"),
            tool("call_abc123"),
        ]
        assert strict_violations(messages) == [
            "messages[5]: tool call id 'call_abc123' was already used by messages[1]"
        ]

    def test_duplicate_id_within_one_message(self) -> None:
        problems = strict_violations([USER, asst("call_1", "call_1"), tool("call_1")])
        assert problems == ["messages[1]: tool call id 'call_1' appears twice in one message"]

    def test_tool_message_without_tool_call_id(self) -> None:
        problems = strict_violations([USER, asst("call_1"), tool("call_1"), tool(None)])
        assert problems == ["messages[3]: tool message has no tool_call_id"]

    def test_empty_tool_call_id_counts_as_missing(self) -> None:
        assert strict_violations([USER, tool("")]) == [
            "messages[1]: tool message has no tool_call_id"
        ]

    def test_call_without_id_and_empty_tool_calls_list(self) -> None:
        no_id = {"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}
        empty = {"role": "assistant", "content": "hm", "tool_calls": []}
        assert strict_violations([USER, no_id, USER, empty]) == [
            "messages[1]: tool call #0 has no id",
            "messages[3]: assistant message has an empty tool_calls list",
        ]

    def test_reports_every_problem_not_just_the_first(self) -> None:
        messages = [tool("a"), asst("b"), tool("c"), asst("b")]
        problems = strict_violations(messages)
        assert [p.split(":")[0] for p in problems] == [
            "messages[0]",  # orphan answer
            "messages[2]",  # answers a call that was not made
            "messages[1]",  # 'b' left unanswered before messages[3]
            "messages[3]",  # 'b' reused
            "messages[3]",  # and unanswered again at the end
        ]

    def test_accepts_messages_serialised_from_the_domain_model(self) -> None:
        history = [m_user("u"), m_asst("a", "call_1", content="looking"), m_tool("t", "call_1")]
        assert strict_violations(wire(history)) == []


# --------------------------------------------------------------------------- assign_tool_call_ids


class TestAssignToolCallIds:
    def test_ids_are_ours_and_derived_from_salt_and_position(self) -> None:
        message = m_asst("m-1", "call_abc123", "toolu_XYZ", content="let me look")
        new, pairs = assign_tool_call_ids(message, salt="m-1")
        expected = [f"call_{stable_id('m-1', 0)}", f"call_{stable_id('m-1', 1)}"]
        assert new.tool_calls is not None
        assert [c.id for c in new.tool_calls] == expected
        assert pairs == [("call_abc123", expected[0]), ("toolu_XYZ", expected[1])]

    def test_everything_but_the_ids_is_kept(self) -> None:
        message = Message(
            id="m-1",
            role="assistant",
            content="text",
            tool_calls=(
                ToolCall(id="x", function=FunctionCall(name="write", arguments='{"a":1}')),
            ),
        )
        new, _ = assign_tool_call_ids(message, salt="s")
        assert new.id == "m-1" and new.content == "text" and new.role == "assistant"
        assert new.tool_calls is not None
        assert new.tool_calls[0].function == message.tool_calls[0].function  # type: ignore[index]

    def test_duplicate_model_ids_become_distinct_and_pairs_keep_positions(self) -> None:
        message = m_asst("m-2", "call_abc123", "call_abc123")
        new, pairs = assign_tool_call_ids(message, salt="m-2")
        assert new.tool_calls is not None
        first, second = (c.id for c in new.tool_calls)
        assert first != second
        assert pairs == [("call_abc123", first), ("call_abc123", second)]

    def test_deterministic_under_retry_and_distinct_across_salts(self) -> None:
        message = m_asst("m", "call_abc123")
        assert assign_tool_call_ids(message, salt="a") == assign_tool_call_ids(message, salt="a")
        ids_a = assign_tool_call_ids(message, salt="a")[0].tool_calls
        ids_b = assign_tool_call_ids(message, salt="b")[0].tool_calls
        assert ids_a != ids_b

    def test_message_without_calls_is_returned_unchanged(self) -> None:
        message = Message(id="m", role="assistant", content="plain")
        assert assign_tool_call_ids(message, salt="s") == (message, [])

    def test_empty_salt_is_refused(self) -> None:
        with pytest.raises(ValueError, match="salt"):
            assign_tool_call_ids(m_asst("m", "x"), salt="")

    def test_rewritten_history_of_a_repeating_model_is_accepted(self) -> None:
        history: list[Message] = [m_user("u")]
        for turn in range(3):  # the model says call_abc123 every time
            new, pairs = assign_tool_call_ids(m_asst(f"a{turn}", "call_abc123"), salt=f"a{turn}")
            history.append(new)
            history.extend(m_tool(f"t{turn}", new_id) for _, new_id in pairs)
        assert strict_violations(wire(history)) == []


# --------------------------------------------------------------------------- repair_tool_pairing


class TestRepairToolPairing:
    def test_valid_history_is_unchanged(self) -> None:
        history = [m_user("u"), m_asst("a", "c1", "c2"), m_tool("t1", "c1"), m_tool("t2", "c2")]
        assert repair_tool_pairing(history) == history

    def test_orphan_and_duplicate_answers_are_dropped(self) -> None:
        history = [
            m_tool("orphan", "c0"),
            m_user("u"),
            m_asst("a", "c1"),
            m_tool("t1", "c1"),
            m_tool("dup", "c1", content="again"),
            m_tool("stray", "nope"),
            m_tool("noid", None),
        ]
        assert [m.id for m in repair_tool_pairing(history)] == ["u", "a", "t1"]

    def test_unanswered_calls_get_a_synthetic_error_after_existing_answers(self) -> None:
        history = [
            m_user("u"),
            m_asst("a", "c1", "c2", "c3"),
            m_tool("t2", "c2"),
            m_user("u2"),
        ]
        out = repair_tool_pairing(history)
        assert [(m.id, m.role, m.tool_call_id) for m in out] == [
            ("u", "user", None),
            ("a", "assistant", None),
            ("t2", "tool", "c2"),
            (missing_result_message_id("c1"), "tool", "c1"),
            (missing_result_message_id("c3"), "tool", "c3"),
            ("u2", "user", None),
        ]
        assert out[3].content == MISSING_RESULT
        assert MISSING_RESULT == "error: no result was recorded for this tool call (interrupted)"

    def test_interrupted_at_the_end_and_custom_text(self) -> None:
        out = repair_tool_pairing([m_user("u"), m_asst("a", "c1")], missing_result="lost")
        assert out[-1] == Message(
            id=missing_result_message_id("c1"), role="tool", content="lost", tool_call_id="c1"
        )

    def test_synthetic_ids_are_deterministic_and_per_call(self) -> None:
        assert missing_result_message_id("c1") == missing_result_message_id("c1")
        assert missing_result_message_id("c1") != missing_result_message_id("c2")

    def test_reused_id_is_rewritten_together_with_its_answer(self) -> None:
        history = [
            m_user("u"),
            m_asst("a1", "call_abc123"),
            m_tool("t1", "call_abc123", content="first"),
            m_asst("a2", "call_abc123"),
            m_tool("t2", "call_abc123", content="second"),
        ]
        out = repair_tool_pairing(history)
        assert out[:3] == history[:3]
        assert out[3].tool_calls is not None
        new_id = out[3].tool_calls[0].id
        assert new_id != "call_abc123"
        assert out[4].tool_call_id == new_id and out[4].content == "second"
        assert strict_violations(wire(out)) == []
        assert repair_tool_pairing(history) == out  # deterministic

    def test_duplicate_ids_in_one_message_pair_answers_by_order(self) -> None:
        history = [
            m_user("u"),
            m_asst("a", "x", "x"),
            m_tool("t1", "x", content="one"),
            m_tool("t2", "x", content="two"),
        ]
        out = repair_tool_pairing(history)
        assert out[1].tool_calls is not None
        first, second = (c.id for c in out[1].tool_calls)
        assert first == "x" and second != "x"
        assert [(m.content, m.tool_call_id) for m in out[2:]] == [("one", first), ("two", second)]
        assert strict_violations(wire(out)) == []

    def test_repair_is_idempotent(self) -> None:
        history = [
            m_tool("o", "z"),
            m_asst("a1", "c", "c"),
            m_user("u"),
            m_asst("a2", "c"),
            m_tool("t", "c"),
            m_tool("t", "c"),
        ]
        once = repair_tool_pairing(history)
        assert strict_violations(wire(once)) == []
        assert repair_tool_pairing(once) == once
