"""The plan's log of decisions: bounded, ordered across runs, and readable."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, PlanReport, Subtask
from durable_plans.domain.plan_log import (
    MAX_LOG_ENTRIES,
    LogEntry,
    PlanLog,
    cancel_entry,
    cancel_reason,
    describe_entry,
)


def entry(n: int, kind: str = "paused") -> LogEntry:
    return LogEntry.of(float(n), kind, subtask=f"s{n}")  # type: ignore[arg-type]


def test_the_newest_entries_are_kept_and_the_rest_counted() -> None:
    log = PlanLog()
    for n in range(MAX_LOG_ENTRIES + 7):
        log.add(entry(n))
    assert len(log.entries) == MAX_LOG_ENTRIES and log.omitted == 7
    assert log.entries[0].at_s == 7 and log.entries[-1].at_s == MAX_LOG_ENTRIES + 6
    # A continuation starts from what was carried, and keeps counting.
    again = PlanLog(log.entries, log.omitted)
    again.add(entry(999))
    assert again.omitted == 8 and again.entries[-1].at_s == 999


def test_carried_entries_go_before_those_written_since_the_run_began() -> None:
    log = PlanLog()
    log.add(entry(5, "approved"))  # a signal taken before the run's first line
    log.carry_in((entry(1), entry(2, "resumed")), omitted=3)
    assert [e.at_s for e in log.entries] == [1, 2, 5] and log.omitted == 3


def test_a_cancel_names_who_asked_or_says_it_cannot() -> None:
    ours = cancel_entry(10.0, cancel_reason("alice@host"))
    assert (ours.kind, ours.by, ours.detail) == ("cancelled", "alice@host", "")
    theirs = cancel_entry(10.0, "stuck since Monday")
    assert (theirs.by, theirs.detail) == ("", "reason: stuck since Monday")
    assert cancel_entry(10.0, None).detail == "a cancel request without a reason"
    assert cancel_entry(10.0, "  ").detail == "a cancel request without a reason"


def test_details_are_scrubbed_and_cut_and_unknown_kinds_refused() -> None:
    long = LogEntry.of(1.0, "paused", detail="x" * 2000)
    assert len(long.detail) == 500 and long.detail.endswith("…")
    # A reason is anybody's text: a key pasted into it never reaches the log.
    key = "sk-proj-" + "abcdefghijklmnopqrstuvwxyz0123"
    pasted = LogEntry.of(1.0, "rejected", detail=f"list_dir: uses {key}")
    assert key not in pasted.detail and "[REDACTED:" in pasted.detail
    with pytest.raises(ValidationError):
        LogEntry.model_validate({"at_s": 1.0, "kind": "deleted"})


def test_one_line_per_entry() -> None:
    at = 1_795_000_000.0  # 2026-11-18 11:06:40 UTC
    line = describe_entry(
        LogEntry.of(at, "rejected", by="bob", subtask="b", call="b:0.1", detail="list_dir: no")
    )
    assert line == "2026-11-18 11:06:40 UTC rejected b:0.1 by bob: list_dir: no"
    assert describe_entry(LogEntry.of(at, "paused", subtask="c")) == (
        "2026-11-18 11:06:40 UTC paused c"
    )


def test_reports_and_inputs_carry_the_log_through_their_wire_form() -> None:
    plan = Plan(id="p", subtasks=(Subtask(id="a", description="x", agent="coder"),))
    entries = (entry(1), LogEntry.of(2.0, "cancelled", by="alice"))
    report = PlanReport.build("p", [], cancelled=True, log=entries, log_omitted=4)
    again = PlanReport.model_validate_json(report.model_dump_json())
    assert again.log == entries and again.log_omitted == 4
    inp = PlanInput(plan=plan, log=entries, log_omitted=4)
    assert PlanInput.model_validate_json(inp.model_dump_json()).log == entries
    # Temporal's CLI prints an empty list as null: a report read back from it still reads.
    shown = json.loads(PlanReport.build("p", []).model_dump_json()) | {"log": None}
    assert PlanReport.model_validate(shown).log == ()
