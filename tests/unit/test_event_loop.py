"""The worker's event loop: uvloop by default where installed, asyncio's on request, and a
clear refusal when uvloop is required but missing."""

from __future__ import annotations

import asyncio
import importlib.util
import warnings
from typing import Any

import pytest

from durable_plans import event_loop, worker
from durable_plans._errors import SettingsError
from durable_plans.settings import Settings


async def loop_module() -> str:
    """Which library's loop runs this coroutine ("uvloop" or "asyncio")."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def hide_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "uvloop" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_auto_and_uvloop_run_on_uvloop_where_it_is_installed() -> None:
    assert importlib.util.find_spec("uvloop") is not None  # a dependency of the project
    assert event_loop.run(loop_module()) == "uvloop"
    assert event_loop.run(loop_module(), "uvloop") == "uvloop"


def test_asyncio_runs_on_the_standard_loop() -> None:
    assert event_loop.run(loop_module(), "asyncio") == "asyncio"


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_uvloop(monkeypatch)
    assert event_loop.run(loop_module(), "auto") == "asyncio"


def test_uvloop_required_but_missing_is_refused_without_a_stray_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide_uvloop(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine was never awaited" would raise here
        with pytest.raises(event_loop.EventLoopUnavailable, match="uvloop is not installed"):
            event_loop.run(loop_module(), "uvloop")


def test_the_worker_exits_2_naming_the_missing_loop(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hide_uvloop(monkeypatch)
    monkeypatch.setenv("DPLAN_EVENT_LOOP", "uvloop")
    with pytest.raises(SystemExit) as exited:
        worker.main(["--log-format", "console"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "DPLAN_EVENT_LOOP=uvloop" in err and "DPLAN_EVENT_LOOP=asyncio" in err


@pytest.mark.parametrize(
    ("raw", "chosen"), [(None, "auto"), (" UVloop ", "uvloop"), ("asyncio", "asyncio")]
)
def test_the_setting_reads_the_environment(raw: str | None, chosen: str) -> None:
    env = {} if raw is None else {"DPLAN_EVENT_LOOP": raw}
    assert Settings.from_env(env).event_loop == chosen


def test_a_bad_setting_names_the_choices() -> None:
    with pytest.raises(
        SettingsError, match="DPLAN_EVENT_LOOP must be one of auto, uvloop, asyncio, got 'trio'"
    ):
        Settings.from_env({"DPLAN_EVENT_LOOP": "trio"})
