"""Logs are JSON lines on stderr, and a key never reaches them, whichever way it leaks."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from temporalio.testing import ActivityEnvironment

from durable_plans.activities.log import (
    activity_logger,
    configure_logging,
    ensure_logging,
    get_logger,
)

FAKE_KEY = "sk-or-v1-" + "0123456789abcdef" * 4


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "dplan-structlog"]:
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def _lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def test_event_is_one_json_line_on_stderr_with_iso_timestamp(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging()
    get_logger(component="test").info("worker.started", task_queue="dplan")

    out, err = capsys.readouterr()
    assert out == ""
    [line] = _lines(err)
    assert line["event"] == "worker.started"
    assert line["task_queue"] == "dplan"
    assert line["component"] == "test"
    assert line["level"] == "info"
    assert line["timestamp"].startswith("20") and "T" in line["timestamp"]


def test_fake_key_never_appears_anywhere_in_output(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging()
    log = get_logger()
    log.info(f"calling provider with {FAKE_KEY}")
    log.info("request", headers={"Authorization": f"Bearer {FAKE_KEY}"}, args=[FAKE_KEY])
    log.info("env", note=f"DPLAN_API_KEY={FAKE_KEY}")
    try:
        raise RuntimeError(f"401 from provider: invalid key {FAKE_KEY}")
    except RuntimeError:
        log.exception("llm.failed")

    _, err = capsys.readouterr()
    assert FAKE_KEY not in err
    assert "sk-or-v1-0123" not in err
    lines = _lines(err)
    assert len(lines) == 4
    assert "[REDACTED" in lines[0]["event"]
    assert "RuntimeError" in lines[3]["exception"]  # the traceback is kept, minus the key


@pytest.mark.parametrize(
    "key", ["api_key", "DPLAN_API_KEY", "authorization", "Authorization", "password"]
)
def test_secret_named_keys_are_dropped_not_just_masked(
    capsys: pytest.CaptureFixture[str], key: str
) -> None:
    configure_logging()
    get_logger().info("configured", model="openrouter/x", **{key: "short"})

    [line] = _lines(capsys.readouterr().err)
    assert key not in line
    assert "short" not in json.dumps(line)
    assert line["model"] == "openrouter/x"  # ordinary fields survive


def test_token_counts_are_not_mistaken_for_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging()
    get_logger().info("usage", prompt_tokens=12, completion_tokens=3, max_tokens=100)

    [line] = _lines(capsys.readouterr().err)
    assert (line["prompt_tokens"], line["completion_tokens"], line["max_tokens"]) == (12, 3, 100)


def test_stdlib_records_go_through_the_same_redaction(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging()
    logging.getLogger("temporalio.worker").warning("retrying with key %s", FAKE_KEY)

    [line] = _lines(capsys.readouterr().err)
    assert FAKE_KEY not in json.dumps(line)
    assert line["logger"] == "temporalio.worker"
    assert line["level"] == "warning"


def test_level_filters_and_reconfiguring_does_not_duplicate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(level="INFO")
    configure_logging(level="warn")
    log = get_logger()
    log.info("hidden")
    log.warning("shown")

    assert [line["event"] for line in _lines(capsys.readouterr().err)] == ["shown"]


def test_unknown_level_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging(level="loud")


def test_console_mode_is_plain_text_and_still_scrubbed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(json=False)
    get_logger().info("hello", key_text=FAKE_KEY)

    err = capsys.readouterr().err
    assert "hello" in err
    assert FAKE_KEY not in err
    assert not err.lstrip().startswith("{")


def _info(workflow_id: str, workflow_type: str) -> Any:
    return dataclasses.replace(
        ActivityEnvironment.default_info(),
        workflow_id=workflow_id,
        workflow_type=workflow_type,
        activity_type="call_llm",
        attempt=3,
    )


async def test_activity_logger_binds_plan_and_subtask_from_workflow_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging()
    env = ActivityEnvironment()
    env.info = _info("plan-7/ui", "SubtaskWorkflow")

    def act() -> None:
        activity_logger(turn=2).info("llm.call")

    env.run(act)

    [line] = _lines(capsys.readouterr().err)
    assert line["workflow_id"] == "plan-7/ui"
    assert line["activity_type"] == "call_llm"
    assert line["attempt"] == 3
    assert line["plan_id"] == "plan-7"
    assert line["subtask_id"] == "ui"
    assert line["turn"] == 2


async def test_activity_logger_for_plan_workflow_binds_plan_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging()
    env = ActivityEnvironment()
    env.info = _info("plan-7", "PlanWorkflow")
    env.run(lambda: activity_logger().info("merge"))

    [line] = _lines(capsys.readouterr().err)
    assert line["plan_id"] == "plan-7"
    assert "subtask_id" not in line


def test_activity_logger_outside_an_activity_fails_loudly() -> None:
    with pytest.raises(RuntimeError):
        activity_logger()


def test_unconfigured_use_goes_to_stderr_never_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    structlog.reset_defaults()  # as in a fresh process: structlog would print to stdout
    get_logger().warning("early", detail=FAKE_KEY)

    out, err = capsys.readouterr()
    assert out == ""
    [line] = _lines(err)
    assert line["event"] == "early"
    assert FAKE_KEY not in err


def test_ensure_logging_keeps_an_existing_configuration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(json=True, level="ERROR")
    ensure_logging(json=False, level="DEBUG")
    log = get_logger()
    log.warning("filtered")
    log.error("kept")

    assert [line["event"] for line in _lines(capsys.readouterr().err)] == ["kept"]
