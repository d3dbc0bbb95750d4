"""The ``dplan`` command line as one thing: one exit-code enum, one operator option, bad
input refused in one line before anything is reached, an unreachable server said once."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from durable_plans.cli._common import Exit
from durable_plans.cli.main import build_parser, main


@pytest.fixture
def nothing_listening(monkeypatch: pytest.MonkeyPatch) -> str:
    """TEMPORAL_ADDRESS at a port nothing listens on: a command that tries to connect
    fails with 'cannot reach', so one that does not has proven it checked input first."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    for name in ("TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE", "TEMPORAL_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    return address


def test_the_exit_codes() -> None:
    assert [int(e) for e in (Exit.OK, Exit.FAILED, Exit.INVALID, Exit.INTERRUPTED)] == [
        0,
        1,
        2,
        130,
    ]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["budget", "p", "--max-tokens", "-5"],
            "error: --max-tokens must be zero or more, not -5",
        ),
        (
            ["budget", "p", "--max-cost-usd", "-0.5"],
            "error: --max-cost-usd must be zero or more, not -0.5",
        ),
        (["budget", "p"], "error: name a new limit: --max-tokens N and/or --max-cost-usd X"),
        (["approve", "p", "no-colon"], "error: "),
        (["approve", "p", "a:0.0", "--args", "[1]"], "error: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_connection(
    argv: list[str], line: str, nothing_listening: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == Exit.INVALID
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith(line)
    assert "cannot reach" not in out.err and "Traceback" not in out.err
    assert out.out == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "p"],
        ["list"],
        ["approvals"],
        ["resume", "p", "s"],
        ["skip", "p", "s"],
        ["budget", "p", "--max-tokens", "5"],
        ["approve", "p", "a:0.0"],
        ["reject", "p", "a:0.0", "--reason", "no"],
        ["cancel", "p"],
    ],
)
def test_an_unreachable_server_is_named_once_with_exit_1(
    argv: list[str], nothing_listening: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == Exit.FAILED
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach a Temporal server at {nothing_listening}: ")
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["approve", "reject", "resume", "skip", "budget"])
def test_one_operator_option_with_the_old_name_as_a_hidden_alias(command: str) -> None:
    parser = build_parser()
    extra = {"approve": ["a:0.0"], "reject": ["a:0.0", "--reason", "r"], "budget": []}.get(
        command, ["s"]
    )
    for flag in ("--by", "--who"):
        args = parser.parse_args([command, "p", *extra, flag, "alice"])
        assert args.operator == "alice"
    assert parser.parse_args([command, "p", *extra]).operator is None
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    help_text = subcommands.choices[command].format_help()
    assert "--by" in help_text and "--who" not in help_text


@pytest.mark.integration  # --embedded starts a dev server before it opens the store
def test_a_session_store_that_cannot_be_opened_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--embedded`` opens the session store in this process: a store that refuses is
    named in one line, not a traceback."""
    (tmp_path / "store-is-a-dir").mkdir()
    monkeypatch.setenv("DPLAN_SESSION_STORE", str(tmp_path / "store-is-a-dir"))
    monkeypatch.setenv("DPLAN_STATE_DIR", str(tmp_path / "state"))
    plan = tmp_path / "plan.json"
    plan.write_text('{"goal": "g", "subtasks": [{"id": "a", "description": "x"}]}')
    code = main(["run", str(plan), "--embedded"])
    err = capsys.readouterr().err
    assert code == Exit.FAILED
    assert f"error: session store {tmp_path / 'store-is-a-dir'}" in err
    assert "Traceback" not in err
