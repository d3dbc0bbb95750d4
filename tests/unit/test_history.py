"""History transforms: dependency context, subtask isolation, agent switch, restore."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from durable_plans.domain.history import (
    DEPENDENCY_CONTEXT_HEADER,
    AgentSwitchReport,
    DependencyResult,
    format_dependency_context,
    isolate_for_subtask,
    last_result,
    restore_from_snapshot,
    switch_agent_cleanup,
)
from durable_plans.domain.models import FunctionCall, Message, ToolCall


def user(mid: str, text: str = "hi") -> Message:
    return Message(id=mid, role="user", content=text)


def system(mid: str, text: str = "rules") -> Message:
    return Message(id=mid, role="system", content=text)


def plain(mid: str, text: str) -> Message:
    return Message(id=mid, role="assistant", content=text)


def calling(mid: str, *ids: str, text: str | None = None) -> Message:
    calls = tuple(ToolCall(id=i, function=FunctionCall(name="write_file")) for i in ids)
    return Message(id=mid, role="assistant", content=text, tool_calls=calls)


def tool(mid: str, cid: str, text: str = "ok") -> Message:
    return Message(id=mid, role="tool", content=text, tool_call_id=cid)


def dep(sid: str, result: str, description: str = "do a thing") -> DependencyResult:
    return DependencyResult(subtask_id=sid, description=description, result=result)


# --------------------------------------------------------------------------- dependency context


class TestFormatDependencyContext:
    def test_lists_every_dependency_under_the_header(self) -> None:
        text = format_dependency_context(
            [dep("deps", "added http", "Add http to pubspec"), dep("api", "client written")]
        )
        assert text == (
            f"{DEPENDENCY_CONTEXT_HEADER}\n\n"
            "## Subtask deps: Add http to pubspec\nadded http\n\n"
            "## Subtask api: do a thing\nclient written"
        )
        assert DEPENDENCY_CONTEXT_HEADER == "Results of the subtasks this one depends on:"

    def test_no_dependencies_no_text(self) -> None:
        assert format_dependency_context([]) == ""

    def test_over_long_results_share_the_budget_and_say_so(self) -> None:
        deps = [dep("a", "A" * 5_000), dep("b", "B" * 5_000)]
        text = format_dependency_context(deps, max_chars=2_000)
        assert len(text) <= 2_000
        assert text.count("A") > 800 and text.count("B") > 800  # fair, not first-come
        assert text.count("… [truncated ") == 2
        kept_a = text.count("A")
        assert f"… [truncated {5_000 - kept_a:,} chars]" in text

    def test_short_results_survive_whole_next_to_a_huge_one(self) -> None:
        deps = [dep("small", "the port is 8080"), dep("huge", "x" * 50_000)]
        text = format_dependency_context(deps, max_chars=1_000)
        assert len(text) <= 1_000
        assert "the port is 8080\n" in text
        assert "… [truncated " in text and "chars]" in text

    def test_thousands_separator_in_marker(self) -> None:
        text = format_dependency_context([dep("a", "y" * 20_000)], max_chars=500)
        dropped = 20_000 - text.count("y")
        assert dropped > 1_000 and f"[truncated {dropped:,} chars]" in text

    def test_long_descriptions_are_capped_only_when_needed(self) -> None:
        long_desc = "word " * 200
        fits = format_dependency_context([dep("a", "r", long_desc)], max_chars=12_000)
        assert long_desc in fits
        tight = format_dependency_context([dep("a", "r" * 3_000, long_desc)], max_chars=1_500)
        assert len(tight) <= 1_500 and long_desc not in tight and "r" * 100 in tight

    @pytest.mark.parametrize("max_chars", [1, 10, 60, 200])
    def test_bound_holds_even_for_tiny_budgets(self, max_chars: int) -> None:
        deps = [dep(f"s{i}", "z" * 1_000, "d" * 400) for i in range(20)]
        assert len(format_dependency_context(deps, max_chars=max_chars)) <= max_chars

    def test_non_positive_budget_is_refused(self) -> None:
        with pytest.raises(ValueError):
            format_dependency_context([dep("a", "r")], max_chars=0)

    def test_dependency_result_is_frozen(self) -> None:
        d = dep("a", "r")
        with pytest.raises(ValidationError):
            d.result = "changed"  # type: ignore[misc]


# --------------------------------------------------------------------------- isolation


class TestIsolateForSubtask:
    def test_seed_000_previous_subtask_tool_traffic_is_gone(self) -> None:
        history = [
            system("s"),
            user("u1", "build the app"),
            calling("a1", "call_abc123"),
            tool("t1", "call_abc123", "written"),
            plain("a2", "subtask 1 done"),
        ]
        out = isolate_for_subtask(history, [], context_id="ctx")
        assert out == [history[0], history[1], history[4]]
        assert not any(m.is_tool_traffic for m in out)

    def test_text_next_to_tool_calls_is_kept_as_plain_message(self) -> None:
        history = [user("u"), calling("a1", "c1", text="I will write the file"), tool("t", "c1")]
        out = isolate_for_subtask(history, [], context_id="ctx")
        assert out == [user("u"), plain("a1", "I will write the file")]

    def test_whitespace_next_to_tool_calls_is_not_text(self) -> None:
        out = isolate_for_subtask(
            [calling("a", "c", text="  \n"), tool("t", "c")], [], context_id="x"
        )
        assert out == []

    def test_dependencies_become_one_final_system_message(self) -> None:
        history = [user("u"), plain("a", "ok")]
        deps = [dep("deps", "added http"), dep("api", "wrote client")]
        out = isolate_for_subtask(history, deps, context_id="ctx-1", max_context_chars=5_000)
        assert out[:2] == history
        assert out[2] == Message(
            id="ctx-1", role="system", content=format_dependency_context(deps, max_chars=5_000)
        )

    def test_context_size_is_bounded(self) -> None:
        out = isolate_for_subtask(
            [], [dep("a", "q" * 50_000)], context_id="ctx", max_context_chars=3_000
        )
        assert out[0].content is not None and len(out[0].content) <= 3_000

    def test_dependencies_need_a_context_id(self) -> None:
        with pytest.raises(ValueError, match="context_id"):
            isolate_for_subtask([], [dep("a", "r")], context_id="")

    def test_input_is_not_modified(self) -> None:
        history = [user("u"), calling("a", "c", text="t"), tool("t", "c")]
        before = list(history)
        isolate_for_subtask(history, [dep("d", "r")], context_id="ctx")
        assert history == before


# --------------------------------------------------------------------------- agent switch


class TestSwitchAgentCleanup:
    def test_seed_001_example(self) -> None:
        before = [
            user("m1", "Create a file"),
            calling("m2", "call-1", text="I'll create it"),
            tool("m3", "call-1", "File created"),
            plain("m4", "File created successfully"),
        ]
        after, report = switch_agent_cleanup(
            before, from_agent="orchestrator", to_agent="coder", note_id="note"
        )
        assert [(m.role, m.content) for m in after[:2]] == [
            ("user", "Create a file"),
            ("assistant", "File created successfully"),
        ]
        assert after[2].role == "system" and after[2].id == "note"
        assert after[2].content == (
            "Agent switched: orchestrator → coder\n"
            "Previous context preserved: 2 messages kept, 2 tool messages removed."
        )
        assert report == AgentSwitchReport(
            removed_count=2,
            preserved_result="File created successfully",
            context_message=after[2].content,
            final_message_count=3,
        )

    def test_reason_is_the_second_line(self) -> None:
        after, report = switch_agent_cleanup(
            [user("u")],
            from_agent="orchestrator",
            to_agent="coder",
            reason="User requested\ncode changes",
            note_id="n",
        )
        lines = report.context_message.split("\n")
        assert lines[0] == "Agent switched: orchestrator → coder"
        assert lines[1] == "Reason: User requested code changes"
        assert after[-1].content == report.context_message

    def test_blank_reason_is_omitted(self) -> None:
        _, report = switch_agent_cleanup([], from_agent="a", to_agent="b", reason="  ", note_id="n")
        assert "Reason" not in report.context_message

    def test_empty_session(self) -> None:
        after, report = switch_agent_cleanup([], from_agent="ask", to_agent="debug", note_id="n")
        assert after == [
            Message(
                id="n",
                role="system",
                content="Agent switched: ask → debug\n"
                "Previous context preserved: 0 messages kept, 0 tool messages removed.",
            )
        ]
        assert report.removed_count == 0 and report.preserved_result is None
        assert report.final_message_count == 1

    def test_no_result(self) -> None:
        history = [user("u"), calling("a", "c1"), tool("t", "c1")]
        after, report = switch_agent_cleanup(history, from_agent="x", to_agent="y", note_id="n")
        assert after[:-1] == [user("u")]
        assert report.preserved_result is None and report.removed_count == 2
        assert "1 message kept, 2 tool messages removed." in report.context_message

    def test_multiple_tool_calls(self) -> None:
        history = [
            user("u"),
            calling("a1", "c1", "c2", "c3"),
            tool("t1", "c1"),
            tool("t2", "c2"),
            tool("t3", "c3"),
            calling("a2", "c4"),
            tool("t4", "c4"),
            plain("a3", "all done"),
        ]
        after, report = switch_agent_cleanup(history, from_agent="x", to_agent="y", note_id="n")
        assert after[:-1] == [user("u"), plain("a3", "all done")]
        assert report.removed_count == 6 and report.final_message_count == 3
        assert report.preserved_result == "all done"

    def test_user_system_and_plain_assistant_keep_their_order(self) -> None:
        history = [
            system("s1"),
            user("u1"),
            plain("a1", "first answer"),
            calling("a2", "c1"),
            tool("t1", "c1"),
            system("s2", "more rules"),
            user("u2", "again"),
            plain("a3", "second answer"),
        ]
        after, report = switch_agent_cleanup(history, from_agent="x", to_agent="y", note_id="n")
        assert [m.id for m in after] == ["s1", "u1", "a1", "s2", "u2", "a3", "n"]
        assert report.preserved_result == "second answer"
        assert [m.content for m in after].count("second answer") == 1  # never duplicated

    def test_text_of_an_interrupted_last_turn_is_preserved_as_plain(self) -> None:
        history = [
            user("u"),
            plain("a0", "older answer"),
            calling("a1", "c0", text="plan: step one"),
            tool("t0", "c0"),
            calling("a2", "c1", text="now writing main.py"),
            tool("t1", "c1"),
        ]
        after, report = switch_agent_cleanup(history, from_agent="x", to_agent="y", note_id="n")
        assert after[:-1] == [
            user("u"),
            plain("a0", "older answer"),
            plain("a2", "now writing main.py"),
        ]
        assert report.preserved_result == "now writing main.py"
        assert report.removed_count == 3

    def test_note_id_is_required(self) -> None:
        with pytest.raises(ValueError, match="note_id"):
            switch_agent_cleanup([], from_agent="a", to_agent="b", note_id="")


# --------------------------------------------------------------------------- restore


class TestRestore:
    SNAPSHOT = (system("s"), user("u"), calling("a", "c"), tool("t", "c"), plain("p", "before"))

    def test_without_keep_the_snapshot_comes_back_exactly(self) -> None:
        current = [user("u"), plain("r", "subtask answer"), system("ctx")]
        assert restore_from_snapshot(self.SNAPSHOT, current, keep_last_result=False) == list(
            self.SNAPSHOT
        )

    def test_keep_appends_the_branch_answer_once(self) -> None:
        current = [
            user("u"),
            plain("p", "before"),
            system("ctx"),
            calling("b1", "x"),
            tool("b2", "x"),
            plain("r1", "draft"),
            plain("r2", "final answer"),
            calling("b3", "y", text="not a plain answer"),
        ]
        out = restore_from_snapshot(self.SNAPSHOT, current, keep_last_result=True)
        assert out == [*self.SNAPSHOT, plain("r2", "final answer")]

    def test_keep_ignores_answers_already_in_the_snapshot(self) -> None:
        current = [*self.SNAPSHOT, system("ctx")]
        out = restore_from_snapshot(self.SNAPSHOT, current, keep_last_result=True)
        assert out == list(self.SNAPSHOT)

    def test_last_result(self) -> None:
        assert last_result([]) is None
        assert last_result([user("u"), calling("a", "c", text="t"), tool("t", "c")]) is None
        history = [plain("a1", "one"), plain("a2", "two"), user("u"), calling("x", "c")]
        assert last_result(history) == plain("a2", "two")
