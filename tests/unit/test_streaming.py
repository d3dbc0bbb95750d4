"""The stream a watcher folds (domain/streaming.py) and the scrubbing of streamed text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_plans.domain.secrets import StreamScrubber, contains_secret, scrub_secrets
from durable_plans.domain.streaming import StreamEvent, StreamFold, streams_in


def _ev(kind: str, attempt: int = 1, text: str = "", call: str = "c1") -> StreamEvent:
    return StreamEvent.model_validate(
        {"kind": kind, "call": call, "attempt": attempt, "agent": "coder", "text": text}
    )


def test_a_retry_starts_the_message_over_and_late_batches_of_the_old_attempt_are_ignored() -> None:
    fold = StreamFold()
    fold.apply_all([_ev("start"), _ev("text", text="Half an ans")])
    view = fold.apply(_ev("start", attempt=2))
    assert view is not None and view.restarted and view.text == "" and view.attempt == 2
    assert fold.apply(_ev("text", attempt=1, text="wer")) is None  # late, from attempt 1
    fold.apply_all([_ev("text", attempt=2, text="A whole answer"), _ev("end", attempt=2)])
    latest = fold.latest
    assert latest is not None and (latest.text, latest.ended) == ("A whole answer", True)


def test_tool_starts_and_calls_are_kept_apart() -> None:
    fold = StreamFold()
    fold.apply_all([_ev("tool", text="list_dir"), _ev("end")])
    fold.apply_all([_ev("text", text="Done.", call="c2")])
    assert fold.calls["c1"].tools == ["list_dir"] and fold.calls["c1"].text == ""
    assert fold.latest is fold.calls["c2"] and not fold.calls["c2"].ended


@pytest.mark.parametrize(
    ("mode", "workflow_type", "expected"),
    [
        ("chat", "SessionWorkflow", True),
        ("chat", "SubtaskWorkflow", False),
        ("all", "SubtaskWorkflow", True),
        ("off", "SessionWorkflow", False),
        ("all", None, False),
    ],
)
def test_which_calls_stream(mode: str, workflow_type: str | None, expected: bool) -> None:
    assert streams_in(mode, workflow_type) is expected  # type: ignore[arg-type]


_SECRETS = [
    "sk-" + "a1B2" * 8,
    "api_key = hunter2hunter2",
    "Authorization: Bearer abcdefghijklmnopqrstuvwx",
    "password: correct-horse-battery",
    "aws_secret_access_key=" + "A" * 30,
]
_words = st.text(alphabet="abc XYZ.,:=\n\"'-", min_size=0, max_size=30)


@given(
    before=_words,
    secret=st.sampled_from(_SECRETS),
    after=_words,
    cuts=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=40),
)
def test_streamed_text_is_released_scrubbed_however_it_is_cut(
    before: str, secret: str, after: str, cuts: list[int]
) -> None:
    text = f"{before} {secret} {after}"
    scrubber = StreamScrubber()
    released, i, k = [], 0, 0
    while i < len(text):
        n = cuts[k % len(cuts)]
        released.append(scrubber.feed(text[i : i + n]))
        i, k = i + n, k + 1
    released.append(scrubber.finish())
    # No piece ever shown holds a secret, and together they are the scrubbed text.
    assert not any(contains_secret(piece) for piece in released)
    assert "".join(released) == scrub_secrets(text)
