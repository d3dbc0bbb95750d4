"""bench.stream's matching of chat turns to the provider's records: which ``first_text``
belongs to which message decides the latency it reports. No timing is asserted."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.stream import Turn, first_text_delays, percentile


def _record(first_text: float | None) -> dict[str, Any]:
    return {"kind": "completion", "first_text": first_text}


def test_each_turn_takes_the_text_record_inside_its_window() -> None:
    turns = [Turn(sent=10.0, visible=11.0), Turn(sent=20.0, visible=21.5)]
    # Per message: a tool-call answer (no text) then the text answer; the log is in
    # finishing order, not first-text order.
    entries = [_record(None), _record(20.9), _record(None), _record(10.8)]
    assert first_text_delays(turns, entries) == pytest.approx([0.2, 0.6])


def test_a_turn_without_a_record_is_left_out_not_matched_to_a_neighbour() -> None:
    turns = [Turn(sent=10.0, visible=11.0), Turn(sent=20.0, visible=21.0)]
    entries = [_record(20.5), _record(30.0)]  # the first turn's line is missing
    assert first_text_delays(turns, entries) == pytest.approx([0.5])


def test_a_retried_answer_counts_from_its_first_attempt() -> None:
    turns = [Turn(sent=10.0, visible=12.0)]
    entries = [_record(11.5), _record(10.5)]  # a cut-off attempt, then its retry
    assert first_text_delays(turns, entries) == pytest.approx([1.5])


def test_percentile_is_an_observed_value() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert percentile(values, 50) == 5.0
    assert percentile(values, 90) == 9.0
    assert percentile([7.0], 90) == 7.0
    assert math.isnan(percentile([], 90))
