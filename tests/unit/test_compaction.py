"""Compaction's pure part: the fold point, what is sent after a fold, the summary request.

The fold must never break tool-call hygiene (``tool_ids.strict_violations``): no tool
message without its call, no call without its answer, no id used twice; and it must
never lose a message from the store (a record is appended, nothing is removed).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from durable_plans._errors import SettingsError
from durable_plans.cli.chat_render import compaction_line, history_line
from durable_plans.domain.agents_loader import load_catalog
from durable_plans.domain.compaction import (
    REASON_THRESHOLD,
    SUMMARY_ASK,
    CompactOutput,
    Fold,
    estimate_tokens,
    keep_budget,
    plan_fold,
    record_message,
    sent_messages,
    summary_budget,
    summary_request,
    transcript,
    visible_history,
)
from durable_plans.domain.history import isolate_for_subtask
from durable_plans.domain.models import FunctionCall, Message, ToolCall, Usage
from durable_plans.domain.tool_ids import strict_violations
from durable_plans.settings import Settings

BIG = "x" * 600


def user(i: int, text: str = BIG) -> Message:
    return Message(id=f"u{i}", role="user", content=f"message {i}: {text}")


def answer(i: int) -> Message:
    return Message(id=f"a{i}", role="assistant", content=f"answer {i}: {BIG[:200]}")


def call(i: int, n: int = 1) -> list[Message]:
    """An assistant tool-call message and its answers."""
    calls = tuple(
        ToolCall(id=f"c{i}-{k}", function=FunctionCall(name="read_file", arguments="{}"))
        for k in range(n)
    )
    out = [Message(id=f"t{i}", role="assistant", content=None, tool_calls=calls)]
    out += [
        Message(
            id=f"r{i}-{k}", role="tool", tool_call_id=f"c{i}-{k}", name="read_file", content=BIG * 3
        )
        for k in range(n)
    ]
    return out


def chat(turns: int) -> list[Message]:
    out: list[Message] = []
    for i in range(turns):
        out += [user(i), *call(i), answer(i)]
    return out


def subtask(turns: int) -> list[Message]:
    out = [
        Message(id="sys", role="system", content="You are a coder."),
        Message(id="task", role="user", content="Read every file and report."),
    ]
    for i in range(turns):
        out += call(i)
    return out


def compact(history: list[Message], keep: int, rid: str = "rec") -> list[Message]:
    fold = plan_fold(visible_history(history), keep)
    assert fold is not None
    record = record_message(
        rid,
        "the summary",
        fold,
        tokens_before=1,
        tokens_after=1,
        reason=REASON_THRESHOLD,
        model="cheap",
        usage=Usage(),
    )
    return [*history, record]


def wire(messages: list[Message]) -> list[dict[str, object]]:
    return [m.to_openai() for m in messages]


def assert_clean(sent: list[Message]) -> None:
    assert strict_violations(wire(sent)) == []
    ids = [m.id for m in sent]
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------- the view


def test_a_history_without_a_record_is_sent_as_it_is() -> None:
    history = chat(3)
    assert visible_history(history) == history
    sent = sent_messages(history, "prompt")
    assert sent[0].role == "system" and sent[1:] == history


def test_a_fold_keeps_the_last_turns_and_puts_the_summary_in_place_of_the_rest() -> None:
    history = chat(20)
    compacted = compact(history, keep=600)
    view = visible_history(compacted)
    assert view[0].id == "rec"  # the summary
    assert view[-1] == history[-1]  # the last turn is kept verbatim
    assert len(view) < len(history) // 3
    assert estimate_tokens(view) < estimate_tokens(history) // 3
    assert_clean(sent_messages(compacted, "prompt"))
    # Nothing was removed from the store: every original message is still there.
    assert compacted[: len(history)] == history


def test_messages_after_the_record_are_sent_after_the_kept_tail() -> None:
    compacted = compact(chat(10), keep=600)
    later = [user(99), *call(99), answer(99)]
    view = visible_history([*compacted, *later])
    assert view[-len(later) :] == later
    assert_clean(sent_messages([*compacted, *later], None))


def test_a_second_fold_folds_the_first_summary_too() -> None:
    first = compact(chat(10), keep=600, rid="rec1")
    later: list[Message] = []
    for i in range(100, 110):
        later += [user(i), *call(i), answer(i)]
    second = compact([*first, *later], keep=600, rid="rec2")
    view = visible_history(second)
    assert "rec1" not in [m.id for m in view]
    assert view[0].id == "rec2"
    assert_clean(sent_messages(second, "p"))


def test_the_subtask_keeps_its_system_prompt_and_task_verbatim() -> None:
    history = subtask(40)
    compacted = compact(history, keep=1_000)
    view = visible_history(compacted)
    assert [m.id for m in view[:3]] == ["sys", "task", "rec"]
    assert view[-1].role == "tool"  # the last call's answer, with its call before it
    assert_clean(sent_messages(compacted, None))


def test_a_tail_larger_than_the_budget_still_keeps_the_last_unit_whole() -> None:
    history = subtask(5)
    fold = plan_fold(history, keep_tokens=0)
    assert fold is not None
    assert fold.kept[-2:] == ("t4", "r4-0")
    assert {m.id for m in fold.folded} == {f"t{i}" for i in range(4)} | {
        f"r{i}-0" for i in range(4)
    }


def test_an_unanswered_call_is_kept_verbatim_with_whatever_answers_it_has() -> None:
    history = subtask(6)
    # Call 2 lost its answer (a worker died between the call and its result).
    history = [m for m in history if m.id != "r2-0"]
    fold = plan_fold(history, keep_tokens=0)
    assert fold is not None
    assert "t2" in fold.kept and "t2" not in {m.id for m in fold.folded}
    assert_clean(sent_messages(compact(history, 0), None))


def test_a_block_of_several_calls_is_folded_or_kept_whole() -> None:
    history = [user(0), *call(0, n=3), answer(0), user(1), *call(1, n=2), answer(1)]
    for keep in range(0, 4_000, 50):
        fold = plan_fold(history, keep)
        if fold is None:
            continue
        kept = set(fold.kept)
        for block in ("0", "1"):
            members = {m.id for m in history if m.id[1:].startswith(block) and m.id[0] in "tr"}
            assert members <= kept or not (members & kept)


def test_nothing_to_fold_is_none() -> None:
    assert plan_fold([], 100) is None
    assert plan_fold([user(0)], 0) is None  # the last unit is always kept
    assert plan_fold([Message(id="s", role="system", content="p"), user(0)], 0) is None


def test_a_branch_built_from_a_compacted_conversation_keeps_its_own_prompt() -> None:
    base = compact(chat(12), keep=600)
    isolated = isolate_for_subtask(base, [], context_id="ctx")
    branch = [
        Message(id="bsys", role="system", content="You are a coder."),
        *isolated,
        Message(id="btask", role="user", content="the task"),
    ]
    view = visible_history(branch)
    assert view[0].id == "bsys" and view[-1].id == "btask"
    assert any(m.id == "rec" for m in view)
    assert_clean(sent_messages(branch, None))


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_stay_clean_after_repeated_folds(seed: int) -> None:
    rng = random.Random(seed)
    history: list[Message] = [Message(id="sys", role="system", content="prompt")]
    for round_ in range(4):
        for i in range(rng.randint(1, 12)):
            n = f"{round_}_{i}"
            kind = rng.random()
            if kind < 0.4:
                history.append(Message(id=f"u{n}", role="user", content="q" * rng.randint(1, 900)))
            elif kind < 0.6:
                history.append(Message(id=f"a{n}", role="assistant", content="a" * 300))
            else:
                calls = rng.randint(1, 3)
                block = call(0, calls)
                answered = rng.random() < 0.9
                for m in block:
                    if m.role == "tool" and not answered and m.id.endswith("-0"):
                        continue
                    history.append(
                        m.model_copy(
                            update={
                                "id": m.id + n,
                                "tool_call_id": (m.tool_call_id + n) if m.tool_call_id else None,
                                "tool_calls": tuple(
                                    c.model_copy(update={"id": c.id + n}) for c in m.tool_calls
                                )
                                if m.tool_calls
                                else None,
                            }
                        )
                    )
        view = visible_history(history)
        fold = plan_fold(view, rng.choice([0, 200, 1_000, 5_000]))
        if fold is None:
            continue
        # Every message of the view is either folded or kept, never both.
        folded = {m.id for m in fold.folded}
        assert folded.isdisjoint(fold.kept)
        assert folded | set(fold.kept) == {m.id for m in view}
        history = [
            *history,
            record_message(
                f"rec{round_}",
                "s",
                fold,
                tokens_before=0,
                tokens_after=0,
                reason=REASON_THRESHOLD,
                model="m",
                usage=Usage(),
            ),
        ]
        assert_clean(sent_messages(history, "p"))


# --------------------------------------------------------------------------- the request


def test_the_transcript_fits_its_bound_and_says_what_it_left_out() -> None:
    folded = chat(60)
    text = transcript(folded, 8_000)
    assert len(text) <= 8_000
    assert "older messages left out" in text
    assert folded[-1].content and folded[-1].content[:40] in text


def test_the_summary_request_ends_with_a_short_plain_ask() -> None:
    messages = summary_request(transcript(chat(3), 10_000))
    assert messages[-1] == {"role": "user", "content": SUMMARY_ASK}
    assert "[" not in SUMMARY_ASK
    assert strict_violations(messages) == []


def test_budgets_leave_room() -> None:
    assert keep_budget(2_250, 300) == 650
    assert keep_budget(100, 300) == 0
    assert summary_budget(2_250, 300) == 650
    assert summary_budget(100, 300) == 128
    assert summary_budget(10**6, 0) == 2_000


def test_the_record_says_what_it_folded() -> None:
    fold = Fold(folded=tuple(chat(2)), kept=("x",), kept_tokens=3)
    record = record_message(
        "rec",
        "sum",
        fold,
        tokens_before=900,
        tokens_after=300,
        reason=REASON_THRESHOLD,
        model="cheap",
        usage=Usage(prompt_tokens=5),
    )
    assert record.role == "system" and record.content is not None
    assert record.content.endswith("\nsum") and "8 earlier messages" in record.content
    assert record.compaction is not None and record.compaction.folded == 8
    # Stored and read back exactly (the store keeps the whole message as JSON).
    assert Message.model_validate_json(record.model_dump_json(exclude_none=True)) == record
    assert "compaction" not in json.dumps(record.to_openai())


# --------------------------------------------------------------------------- configuration


def test_the_window_and_the_share_come_from_the_environment() -> None:
    s = Settings.from_env({"DPLAN_CONTEXT_WINDOW": "3000", "DPLAN_COMPACT_AT": "0.5"})
    assert (s.context_window, s.compact_at) == (3000, 0.5)
    default = Settings.from_env({})
    assert (default.context_window, default.compact_at) == (None, 0.75)
    with pytest.raises(SettingsError, match="DPLAN_COMPACT_AT must be a share between 0 and 1"):
        Settings.from_env({"DPLAN_COMPACT_AT": "1.5"})
    with pytest.raises(SettingsError, match="DPLAN_CONTEXT_WINDOW must be an integer"):
        Settings.from_env({"DPLAN_CONTEXT_WINDOW": "big"})


def test_an_agent_may_say_its_models_window(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text("[agents.coder]\ncontext_window = 3000\n")
    assert load_catalog(path).get("coder").context_window == 3000
    path.write_text('[agents.coder]\ncontext_window = "large"\n')
    with pytest.raises(ValueError, match=r"agents\.coder: context_window: must be an integer"):
        load_catalog(path)
    path.write_text("[agents.coder]\ncontext_window = 12\n")
    with pytest.raises(ValueError, match="must be at least 256 tokens, got 12"):
        load_catalog(path)


# --------------------------------------------------------------------------- dplan chat


def test_history_shows_a_record_with_its_summary_and_the_chat_line_says_what_was_folded() -> None:
    fold = Fold(folded=tuple(chat(3)), kept=("x",), kept_tokens=3)
    record = record_message(
        "rec",
        "The user keeps notes.\nThey asked for nothing yet.",
        fold,
        tokens_before=2_405,
        tokens_after=944,
        reason=REASON_THRESHOLD,
        model="openai/cheap",
        usage=Usage(),
    )
    lines = history_line(record, 100).splitlines()
    assert lines[0].startswith("summary   12 earlier messages folded (threshold; ~2,405 → ~944")
    assert [line.strip() for line in lines[1:]] == [
        "The user keeps notes.",
        "They asked for nothing yet.",
    ]
    done = CompactOutput(
        record_id="rec",
        compacted=True,
        folded_messages=12,
        kept_messages=3,
        tokens_before=2_405,
        tokens_after=944,
        model="openai/cheap",
    )
    assert compaction_line(done) == (
        "(history compacted: 12 earlier messages folded into a summary by openai/cheap, "
        "~2,405 → ~944 tokens; /history shows it)"
    )
