"""Durations as operators write them (``DPLAN_TREE_RETENTION``, ``dplan gc --older-than``)
and the settings that read them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from durable_plans._errors import DurationError, SettingsError
from durable_plans.domain.durations import format_duration, parse_duration
from durable_plans.settings import DEFAULT_TREE_RETENTION, Settings


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1d", timedelta(days=1)),
        ("12h", timedelta(hours=12)),
        ("30m", timedelta(minutes=30)),
        ("90s", timedelta(seconds=90)),
        ("2w", timedelta(weeks=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("0.5h", timedelta(minutes=30)),
        (" 1D ", timedelta(days=1)),
        ("0", timedelta(0)),
        ("0s", timedelta(0)),
    ],
)
def test_durations_read(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "2", "1x", "d", "-1d", "1d-", "one day", "1.d"])
def test_what_is_not_a_duration_is_refused_saying_what_is(text: str) -> None:
    with pytest.raises(DurationError, match="write a number and a unit"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("delta", "text"),
    [(timedelta(0), "0"), (timedelta(days=1, hours=2), "1d2h"), (timedelta(seconds=90), "1m30s")],
)
def test_durations_are_written_back_readably(delta: timedelta, text: str) -> None:
    assert format_duration(delta) == text
    assert parse_duration(text) == delta


def test_tree_retention_defaults_to_a_day_and_is_read() -> None:
    assert Settings.from_env({}).tree_retention == DEFAULT_TREE_RETENTION == timedelta(days=1)
    assert Settings().tree_retention == DEFAULT_TREE_RETENTION
    assert Settings.from_env({"DPLAN_TREE_RETENTION": "12h"}).tree_retention == timedelta(hours=12)
    assert Settings.from_env({"DPLAN_TREE_RETENTION": "0"}).tree_retention == timedelta(0)
    assert Settings.from_env({"DPLAN_TREE_RETENTION": "never"}).tree_retention is None


@pytest.mark.parametrize("value", ["2", "a day", "-1h", "1y"])
def test_a_bad_tree_retention_is_named(value: str) -> None:
    with pytest.raises(SettingsError, match=r"^DPLAN_TREE_RETENTION: .*e\.g\. 1d.*or never"):
        Settings.from_env({"DPLAN_TREE_RETENTION": value})


def test_the_state_directory_is_per_user_unless_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    s = Settings.from_env({})
    assert s.state_dir == tmp_path / "xdg" / "durable-plans"
    assert s.session_store == str(tmp_path / "xdg" / "durable-plans" / "sessions.db")
    assert Settings().state_dir == s.state_dir and Settings().session_store == s.session_store

    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Settings.from_env({}).state_dir == tmp_path / "home" / ".local/state/durable-plans"
    # A relative XDG_STATE_HOME is ignored, as the XDG specification asks.
    assert Settings.from_env({"XDG_STATE_HOME": "rel"}).state_dir == (
        tmp_path / "home" / ".local/state/durable-plans"
    )

    named = Settings.from_env({"DPLAN_STATE_DIR": str(tmp_path / "mine")})
    assert named.state_dir == tmp_path / "mine"
    assert named.session_store == str(tmp_path / "mine" / "sessions.db")
    store = Settings.from_env({"DPLAN_STATE_DIR": "s", "DPLAN_SESSION_STORE": "x.db"})
    assert store.session_store == "x.db"
