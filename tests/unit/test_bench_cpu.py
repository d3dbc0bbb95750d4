"""bench.cpu's pieces that decide what is measured: the DAG, the CPU reading, the profile
categories. No timing is asserted."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bench._actions import HistoryCost
from bench._profile import categorise
from bench.cpu import (
    VARIANTS,
    Results,
    Sample,
    cpu_seconds,
    full_layer_plan,
    peer_runner,
    pydantic_ai_runner,
)


def test_each_subtask_needs_the_whole_previous_layer() -> None:
    plan = full_layer_plan(3, 2, prefix="t")
    assert [s["id"] for s in plan] == ["l0-s0", "l0-s1", "l1-s0", "l1-s1", "l2-s0", "l2-s1"]
    assert plan[0]["depends_on"] == [] and plan[1]["depends_on"] == []
    assert plan[4]["depends_on"] == ["l1-s0", "l1-s1"]


def test_cpu_seconds_reads_this_process() -> None:
    before = cpu_seconds(os.getpid())
    sum(i * i for i in range(300_000))
    assert cpu_seconds(os.getpid()) >= before > 0


def test_samples_go_to_the_first_matching_category_and_waits_are_idle(tmp_path: Path) -> None:
    recording = tmp_path / "rec.txt"
    recording.write_text(
        "main (w.py:1);acompletion (litellm/main.py:2);completion_cost (litellm/x.py:3) 4\n"
        "main (w.py:1);SqliteSessionStore.read (session_store/sqlite.py:9) 3\n"
        "main (w.py:1);EpollSelector.select (selectors.py:4) 7\n"
        "main (w.py:1);something (elsewhere.py:1) 1\n"
    )
    counts, idle = categorise(recording)
    assert counts["litellm: cost calculation"] == 4
    assert counts["session store (ours, SQL, codec)"] == 3
    assert counts["other"] == 1
    assert idle == 7


def test_the_peer_is_skipped_with_a_reason_without_its_packages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)  # import agents -> ImportError
    reason = peer_runner(address="127.0.0.1:1", provider="http://127.0.0.1:1", workspace=tmp_path)
    assert isinstance(reason, str) and "pip install -e '.[bench]'" in reason


def test_the_pydantic_ai_peer_is_skipped_with_a_reason_without_its_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)  # import pydantic_ai -> ImportError
    reason = pydantic_ai_runner(
        address="127.0.0.1:1", provider="http://127.0.0.1:1", workspace=tmp_path
    )
    assert isinstance(reason, str) and "pydantic-ai is not installed" in reason


def test_private_apis_runs_each_switch_off_beside_ours() -> None:
    """``bench.private_apis`` measures exactly the two private-API switches, off, beside
    every default on, on the worker processes of bench.cpu; short mode stays short."""
    from bench import private_apis

    _args, full = private_apis._parse([])
    assert full.variants == ["ours-acompletion", "ours-stock-runner"]
    assert (full.layers, full.repeats, full.widths, full.peers) == (4, 7, [5], False)
    _args, short = private_apis._parse(["--short"])
    assert (short.layers, short.repeats) == (2, 3)
    assert VARIANTS["ours-acompletion"] == {"DPLAN_LLM_LEAN": "0"}
    assert VARIANTS["ours-stock-runner"] == {"DPLAN_WORKFLOW_RUNNER_LEAN": "0"}


def test_private_apis_ratios_pair_the_rounds() -> None:
    from bench import private_apis

    def sample(wall: float, cpu: float) -> Sample:
        return Sample(wall, cpu, 0.0, HistoryCost(), 40)

    results = Results()
    results.samples[("ours", 5)] = [sample(1.0, 1.0), sample(2.0, 2.0), sample(3.0, 3.0)]
    results.samples[("ours-stock-runner", 5)] = [
        sample(2.0, 2.0),
        sample(4.0, 4.0),
        sample(6.0, 6.0),
    ]
    r = private_apis.ratios(results, "ours-stock-runner")
    assert (r["cpu_paired"], r["wall_paired"], r["rounds"]) == (0.5, 0.5, 3.0)
    assert private_apis.ratios(results, "ours-acompletion") == {}
