"""`dplan chat` without a server: the slash-command parser, the line formats, stdin lines,
and the argument checks that must fail before anything connects."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_plans.cli._common import Exit
from durable_plans.cli.chat import chat
from durable_plans.cli.chat_commands import (
    DEFAULT_HISTORY,
    HELP_TEXT,
    MAX_HISTORY,
    Blank,
    EndConversation,
    Invalid,
    PlanGoal,
    Quit,
    SendText,
    ShowEvents,
    ShowHelp,
    ShowHistory,
    ShowStatus,
    SwitchAgent,
    UndoTurn,
    Unknown,
    parse_command,
)
from durable_plans.cli.chat_render import (
    event_line,
    files_line,
    history_line,
    switch_lines,
    undo_line,
)
from durable_plans.cli.main import build_parser
from durable_plans.cli.plan_command import plan_goal_command
from durable_plans.cli.stdin_lines import StdinLines
from durable_plans.client import check_session_id, new_session_id
from durable_plans.domain.models import FunctionCall, Message, ToolCall, Usage
from durable_plans.domain.session_contracts import (
    AgentSwitchEvent,
    AgentSwitchResult,
    SendMessageResult,
    UndoResult,
)
from durable_plans.settings import Settings

# --------------------------------------------------------------------------- parse_command


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("hello there", SendText("hello there")),
        ("  keep  inner   spaces  ", SendText("keep  inner   spaces")),
        ("//etc/hosts is odd", SendText("/etc/hosts is odd")),
        ("", Blank()),
        ("   \t ", Blank()),
        ("/switch coder", SwitchAgent("coder", "")),
        ("/switch coder need code", SwitchAgent("coder", "need code")),
        ("/switch   coder   need   code  ", SwitchAgent("coder", "need   code")),
        ("/SWITCH Coder Why", SwitchAgent("Coder", "Why")),
        ("/plan Build a weather app", PlanGoal("Build a weather app")),
        ("/status", ShowStatus()),
        ("/history", ShowHistory(DEFAULT_HISTORY)),
        ("/history 5", ShowHistory(5)),
        (f"/history {MAX_HISTORY}", ShowHistory(MAX_HISTORY)),
        ("/events", ShowEvents()),
        ("/help", ShowHelp()),
        ("/?", ShowHelp()),
        ("/quit", Quit()),
        ("/exit", Quit()),
        ("  /quit  ", Quit()),
        ("/end", EndConversation()),
        ("/undo", UndoTurn()),
        ("/UNDO  ", UndoTurn()),
        ("/frobnicate now", Unknown("/frobnicate")),
        ("/", Unknown("/")),
    ],
)
def test_parse_command(line: str, expected: object) -> None:
    assert parse_command(line) == expected


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("/switch", "AGENT is missing"),
        ("/switch    ", "AGENT is missing"),
        ("/plan", "GOAL is missing"),
        ("/plan   ", "GOAL is missing"),
        ("/history abc", "got 'abc'"),
        ("/history 0", "got 0"),
        ("/history -3", "got -3"),
        (f"/history {MAX_HISTORY + 1}", f"got {MAX_HISTORY + 1}"),
        ("/history 2.5", "got '2.5'"),
        ("/history 5 6", "got '5 6'"),
        ("/status now", "/status takes no arguments"),
        ("/quit please", "/quit takes no arguments"),
        ("/end it", "/end takes no arguments"),
        ("/undo 2", "/undo takes no arguments"),
    ],
)
def test_parse_command_usage_errors(line: str, fragment: str) -> None:
    command = parse_command(line)
    assert isinstance(command, Invalid)
    assert fragment in command.message


def test_history_usage_names_the_bounds() -> None:
    command = parse_command("/history x")
    assert isinstance(command, Invalid)
    assert command.message.startswith("usage: /history [N]")
    assert f"1 to {MAX_HISTORY}" in command.message


def test_help_lists_every_command() -> None:
    for name in ("/switch", "/plan", "/status", "/history", "/events", "/undo", "/help", "/quit"):
        assert name in HELP_TEXT
    assert "/end" in HELP_TEXT


# --------------------------------------------------------------------------- session ids


def test_new_session_ids_are_short_valid_and_distinct() -> None:
    ids = {new_session_id() for _ in range(50)}
    assert len(ids) == 50
    for value in ids:
        assert value.startswith("chat-") and len(value) == len("chat-") + 8
        assert check_session_id(value) is None


@pytest.mark.parametrize("bad", ["", "has space", "a/b", "-lead", "x" * 129])
def test_bad_session_ids_are_named(bad: str) -> None:
    problem = check_session_id(bad)
    assert problem is not None and repr(bad) in problem


# --------------------------------------------------------------------------- line formats


def test_history_line_shows_role_content_and_tool_calls_on_one_line() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="list_dir", arguments="{}"))
    assistant = Message(role="assistant", content=None, tool_calls=(call,))
    assert history_line(assistant, 80) == "assistant → tool(list_dir)"
    user = Message(role="user", content="line one\nline two")
    assert history_line(user, 80) == "user      line one line two"
    tool = Message(role="tool", content="a.txt", tool_call_id="c1", name="list_dir")
    assert history_line(tool, 80) == "tool      list_dir: a.txt"


def test_history_line_is_cut_to_the_width() -> None:
    line = history_line(Message(role="assistant", content="word " * 100), 40)
    assert len(line) == 40 and line.endswith("…")


def test_event_line_has_time_direction_reason_confidence() -> None:
    event = AgentSwitchEvent(
        session_id="s",
        from_agent="orchestrator",
        to_agent="coder",
        reason="need code",
        confidence="high",
        at="2025-01-02T03:04:05.678+00:00",
    )
    assert event_line(event) == (
        "2025-01-02 03:04:05  orchestrator → coder  reason: need code  (confidence: high)"
    )


def test_switch_lines_report_every_field() -> None:
    result = AgentSwitchResult(
        from_agent="orchestrator",
        to_agent="coder",
        removed_count=2,
        preserved_result=None,
        context_message="Agent switched: orchestrator → coder",
        final_message_count=4,
    )
    assert switch_lines(result) == [
        "switched orchestrator → coder",
        "  removed_count: 2",
        "  preserved_result: (none)",
        "  final_message_count: 4",
        "  note: Agent switched: orchestrator → coder",
    ]


def test_a_multi_line_switch_note_stays_indented_under_the_report() -> None:
    result = AgentSwitchResult(
        from_agent="a",
        to_agent="b",
        removed_count=0,
        preserved_result="kept",
        context_message="Agent switched: a → b\nReason: why\n",
        final_message_count=1,
    )
    assert switch_lines(result)[-2:] == [
        "  final_message_count: 1",
        "  note: Agent switched: a → b\n    Reason: why",
    ]


# --------------------------------------------------------------------------- stdin


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


async def test_stdin_lines_from_a_pipe_in_arbitrary_chunks(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    lines = StdinLines(read_fd)
    os.write(write_fd, b"first\r\nsec")
    assert await lines.read_line() == "first"
    pending = asyncio.ensure_future(lines.read_line())
    await asyncio.sleep(0.05)
    assert not pending.done()  # half a line is not a line
    os.write(write_fd, "ond ünïcode\nlast without newline".encode())
    assert await pending == "second ünïcode"
    os.close(write_fd)
    assert await lines.read_line() == "last without newline"
    assert await lines.read_line() is None
    assert await lines.read_line() is None


async def test_stdin_lines_from_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "input.txt"
    path.write_text("a\nb\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        lines = StdinLines(fd)  # epoll refuses regular files: read directly instead
        assert [await lines.read_line() for _ in range(3)] == ["a", "b", None]
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- CLI


def test_cli_has_chat_and_plan() -> None:
    parser = build_parser()
    args = parser.parse_args(["chat", "--session", "s1", "--embedded", "--agent", "coder"])
    assert (args.session, args.embedded, args.agent) == ("s1", True, "coder")
    args = parser.parse_args(["plan", "Build it", "--json", "--session", "s2"])
    assert (args.goal, args.json, args.session, args.embedded) == ("Build it", True, "s2", False)


# Nothing listens on this port: a test that got past the argument checks would fail to
# connect (exit 1), not pass by accident.
_NOWHERE = Settings(temporal_address="127.0.0.1:9")


async def test_chat_rejects_a_bad_session_id_before_connecting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert await chat("bad id", embedded=False, settings=_NOWHERE) == Exit.INVALID
    assert "invalid session id 'bad id'" in capsys.readouterr().err


async def test_chat_rejects_an_unknown_agent_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert await chat(None, embedded=False, agent="nobody", settings=_NOWHERE) == Exit.INVALID
    err = capsys.readouterr().err
    assert "unknown agent 'nobody'" in err and "coder" in err


@pytest.mark.parametrize("goal", ["", "   "])
async def test_plan_rejects_an_empty_goal(goal: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = await plan_goal_command(
        goal, embedded=False, session_id=None, json_output=True, settings=_NOWHERE
    )
    assert code == Exit.INVALID
    captured = capsys.readouterr()
    assert "invalid goal" in captured.err and captured.out == ""


async def test_plan_without_a_server_fails_with_the_address(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = await plan_goal_command(
        "Build it", embedded=False, session_id=None, json_output=True, settings=_NOWHERE
    )
    assert code == 1
    captured = capsys.readouterr()
    assert "127.0.0.1:9" in captured.err and captured.out == ""


def _turn(**fields: object) -> SendMessageResult:
    return SendMessageResult(
        answer="Done.", agent="coder", current_agent="coder", llm_calls=2, usage=Usage(), **fields
    )


def test_files_line_says_what_a_turn_changed_and_where_the_branch_is() -> None:
    assert files_line(_turn()) is None  # a turn that changed no file says nothing
    line = files_line(_turn(files=("a.txt", "b.txt"), commit="c" * 40, branch="dplan/chat/chat-1"))
    assert line == "files changed: a.txt, b.txt (now cccccccccccc on dplan/chat/chat-1)"
    lagging = files_line(_turn(workspace_problem="WorkspaceUnavailable: branch checked out"))
    assert lagging == "files: the branch was not updated: WorkspaceUnavailable: branch checked out"


def test_undo_line_says_what_was_taken_back() -> None:
    undone = UndoResult(
        text="write the notes " + "x" * 200,
        removed=4,
        files=("a.txt", "b.txt"),
        commit="d" * 40,
        branch="dplan/chat/chat-1",
    )
    line = undo_line(undone)
    assert line.startswith("undid: write the notes xxx")
    assert "…; removed 4 messages; files restored: a.txt, b.txt (now dddddddddddd on " in line
    assert line.endswith("dplan/chat/chat-1)")
    plain = undo_line(UndoResult(text="hi", removed=1))
    assert plain == "undid: hi; removed 1 message; files restored: none"
    gone = undo_line(UndoResult(text="", removed=0))
    assert gone == (
        "undid: (its messages were already gone); removed 0 messages; files restored: none"
    )
