"""`dplan chat` and `dplan plan` end to end: real CLI processes, a real dev server, a real
worker process and the fake provider, each in its own process.

The conversation must survive the CLI process: the second `dplan chat --session S` is a
new process that finds the agent switch the first one made.

Each test mostly waits (on a CLI process starting, on Temporal's round trips, on the
worker's turn), so its actions and assertions are a scenario that the module fixture
``scenarios`` runs in the background, ``SCENARIOS_AT_ONCE`` at a time, on the module's one
worker and provider; each test awaits its own scenario, whose failure is the test's. The
two that hold ``[stream-hold]`` answers take turns (the provider's hold is one switch for
all of its streams); no other prompt here holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_plans.domain.models import Message, PlanReport, PlanStatus
from durable_plans.domain.session_contracts import (
    HistoryInput,
    SessionState,
    session_workflow_id,
)
from durable_plans.testing import FakeProviderProcess
from tests.integration.replay import assert_replays
from tests.integration.workers import REPO_ROOT, WorkerProcess, worker_env
from tests.integration.workspace_files import git
from tests.integration.workspace_steps import write

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 120.0
# Scenarios running at once. Each CLI process spends about 0.6 s of CPU importing before
# it waits on anything; more at once on two cores only queue for the CPU.
SCENARIOS_AT_ONCE = 3
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@dataclass
class Stack:
    env: dict[str, str]
    provider: FakeProviderProcess
    workspace: Path
    log_start: int = 0  # the provider's log entries before this test

    def log_entries(self) -> list[dict[str, Any]]:
        """The provider's log entries of the requests answered since this test began (the
        other tests' scenarios run meanwhile: theirs are among them)."""
        return self.provider.log_entries()[self.log_start :]


@pytest.fixture(scope="module")
async def shared_stack(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """A fake provider and a `python -m durable_plans.worker` on a queue of this module's
    own, shared by its tests: each uses sessions, plans and branches of its own names."""
    tmp = tmp_path_factory.mktemp("chat-stack")
    provider = FakeProviderProcess(tmp / "provider.jsonl")
    provider.start()
    workspace = tmp / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("# chat workspace\n")
    env = {
        **worker_env(temporal_env.client, tmp, provider, f"tq-chat-{uuid.uuid4().hex[:8]}"),
        "TEMPORAL_NAMESPACE": temporal_env.client.namespace,
        # Plan subtasks stream too (chat streams in either mode), so `dplan status
        # --follow` has live text to show.
        "DPLAN_STREAM": "all",
    }
    worker = WorkerProcess(env, tmp / "worker.log").start()
    try:
        await asyncio.to_thread(worker.wait_ready)
        yield Stack(env=env, provider=provider, workspace=workspace)
    finally:
        await asyncio.to_thread(worker.stop)
        provider.stop()


@asynccontextmanager
async def streams_held(provider: FakeProviderProcess) -> AsyncIterator[None]:
    """The shared provider as a fresh one is to a test: ``[stream-hold]`` answers held
    until the test releases them."""
    await asyncio.to_thread(provider.hold_streams)
    try:
        yield
    finally:
        # A test that failed while a stream was held must not leave it to a later one.
        await asyncio.to_thread(provider.release_streams)


@pytest.fixture
async def stack(shared_stack: Stack) -> AsyncIterator[Stack]:
    """The module's stack as a fresh one is to a test: ``[stream-hold]`` answers held until
    the test releases them, and the provider's log read from this test's first request.
    For a test of its own on this stack (test_streamed_json.py imports both fixtures);
    this module's tests run as ``scenarios``."""
    async with streams_held(shared_stack.provider):
        yield replace(shared_stack, log_start=len(shared_stack.provider.log_entries()))


Scenario = Callable[[Stack, Client, Path], Awaitable[None]]
SCENARIOS: dict[str, tuple[Scenario, bool]] = {}  # test name → its scenario, holds streams


def scenario_of(test_name: str, *, holds: bool = False) -> Callable[[Scenario], Scenario]:
    """Registers the decorated function as the scenario of ``test_name``: its actions and
    its assertions. ``holds``: it sends ``[stream-hold]`` prompts."""

    def register(body: Scenario) -> Scenario:
        SCENARIOS[test_name] = (body, holds)
        return body

    return register


@dataclass
class Scenarios:
    tasks: dict[str, asyncio.Task[None]]

    async def outcome(self, test_name: str) -> None:
        """The test's scenario, awaited to its end: its failure is the test's."""
        await asyncio.shield(self.tasks[test_name])


@pytest.fixture(scope="module")
async def scenarios(
    request: pytest.FixtureRequest,
    shared_stack: Stack,
    temporal_env: WorkflowEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Scenarios]:
    """The scenarios of the tests this session runs (after ``-k`` and node ids), started
    in the background on the module's stack, ``SCENARIOS_AT_ONCE`` at a time in the
    tests' order; the two that hold streams one after the other, each holding from its
    start to its end. Each gets the provider's log from its own start and a directory of
    its own. Cancelled at the module's end if a test left one unawaited."""
    selected = [
        item.name
        for item in request.session.items
        if item.path == Path(__file__) and item.name in SCENARIOS
    ]
    holding = asyncio.Lock()  # the provider's hold: one holder at a time
    gate = asyncio.Semaphore(SCENARIOS_AT_ONCE)

    async def run(name: str) -> None:
        body, holds = SCENARIOS[name]
        tmp = tmp_path_factory.mktemp(name.removeprefix("test_")[:30])
        async with contextlib.AsyncExitStack() as turn:
            if holds:
                await turn.enter_async_context(holding)
            await turn.enter_async_context(gate)
            if holds:
                await turn.enter_async_context(streams_held(shared_stack.provider))
            stack = replace(shared_stack, log_start=len(shared_stack.provider.log_entries()))
            await body(stack, temporal_env.client, tmp)

    tasks = {name: asyncio.create_task(run(name), name=name) for name in selected}
    try:
        yield Scenarios(tasks)
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


def _cli_env(stack: Stack, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DPLAN_", "TEMPORAL_"))}
    return {**env, **stack.env, **extra}


async def run_cli(
    stack: Stack, args: list[str], stdin: str = "", **env: str
) -> tuple[int, str, str]:
    """`python -m durable_plans.cli ARGS` with ``stdin`` piped in: (exit, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durable_plans.cli",
        *args,
        cwd=REPO_ROOT,
        env=_cli_env(stack, **env),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), CLI_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"dplan {args} timed out\nstdout:\n{out.decode()}\nstderr:\n{err.decode()}")
    finally:
        if proc.returncode is None:  # a scenario cancelled at the module's end
            proc.kill()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _between(text: str, start: str, end: str) -> str:
    """The part of ``text`` after the first ``start`` and before the next ``end``."""
    assert start in text, f"{start!r} not in output:\n{text}"
    after = text.split(start, 1)[1]
    assert end in after, f"{end!r} not after {start!r}:\n{text}"
    return after.split(end, 1)[0]


@scenario_of("test_chat_over_a_pipe_then_resumed_by_a_new_process")
async def _chat_over_a_pipe_then_resumed_by_a_new_process(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    session = f"chat-{uuid.uuid4().hex[:8]}"
    script = "\n".join(
        [
            "Hello there",
            "/history 5",
            "/switch coder need code",
            "/switch coder again",  # refused: coder is already current; the chat goes on
            "/events",
            "/history 5",
            "/bogus",
            "/quit",
            "never read: /quit came first",
        ]
    )
    code, out, err = await run_cli(stack, ["chat", "--session", session], script + "\n")

    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert f"new conversation {session}" in out
    assert "\x1b[" not in out  # a pipe gets plain text, no ANSI codes
    assert "orchestrator: Done: Hello there." in out

    before_switch = _between(out, "Done: Hello there.", "switched orchestrator → coder")
    assert "user      Hello there" in before_switch
    assert "assistant → tool(list_dir)" in before_switch  # the turn's tool traffic
    assert "tool      list_dir: " in before_switch

    report = _between(out, "switched orchestrator → coder\n", "error:")
    assert "  removed_count: 2\n" in report  # the assistant tool call and its result
    assert "  preserved_result: Done: Hello there." in report
    assert "  final_message_count: 3\n" in report
    assert "  note: Agent switched: orchestrator → coder" in report

    # The type is whatever the workflow reported (a validator's rejection or the
    # handler's InvalidAgentSwitch); the CLI's job is to show it and carry on.
    assert re.search(
        r"^error: (InvalidAgentSwitch|ValueError): the coder agent is already the current agent$",
        out,
        re.MULTILINE,
    ), out
    assert re.search(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  orchestrator → coder  reason: need code"
        r"  \(confidence: medium\)$",
        out,
        re.MULTILINE,
    ), out
    after_switch = _between(out, "(confidence: medium)", "error: unknown command /bogus")
    assert "user      Hello there" in after_switch
    assert "assistant Done: Hello there." in after_switch
    assert "system    Agent switched: orchestrator → coder" in after_switch
    assert "→ tool(" not in after_switch  # the switch dropped the tool traffic
    assert "/switch AGENT [reason…]" in out  # help after the unknown command
    assert f"left conversation {session}; resume it with: dplan chat --session {session}" in out
    assert "never read" not in out

    # A new process: the conversation is found where the first one left it.
    code, out2, err2 = await run_cli(
        stack, ["chat", "--session", session], "/status\n/events\n"
    )  # end of input = /quit
    assert code == 0, f"stdout:\n{out2}\nstderr:\n{err2}"
    assert f"resumed conversation {session}: agent coder, 1 messages handled" in out2
    assert "  agent: coder\n" in out2
    assert "  messages handled: 1\n" in out2
    assert "  agent switches: 1 (see /events)" in out2
    assert "  plans: none" in out2
    assert "orchestrator → coder  reason: need code  (confidence: medium)" in out2
    assert f"left conversation {session}" in out2

    state = await client.get_workflow_handle(session_workflow_id(session)).query(
        "state", result_type=SessionState
    )
    assert (state.agent, state.messages_handled, len(state.events)) == ("coder", 1, 1)


async def test_chat_over_a_pipe_then_resumed_by_a_new_process(scenarios: Scenarios) -> None:
    await scenarios.outcome("test_chat_over_a_pipe_then_resumed_by_a_new_process")


@scenario_of("test_chat_asks_inline_for_tool_calls_that_need_approval")
async def _chat_asks_inline_for_tool_calls_that_need_approval(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text('[approval]\ntools = ["list_dir"]\n\n[agents.ask]\nmax_turns = 4\n')
    session = f"chat-approve-{uuid.uuid4().hex[:8]}"
    script = "Hello there\ny\nAnd again\nn\nnot today\n/events\n/quit\n"
    code, out, err = await run_cli(
        stack, ["chat", "--session", session], script, DPLAN_AGENTS=str(agents)
    )

    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    asked = re.findall(
        r"approval needed: orchestrator wants to call list_dir \(call (\d+\.0\.0)\) with "
        r'\{"path": "\."\}',
        out,
    )
    assert asked == ["0.0.0", "1.0.0"], out
    first = _between(out, "approved call 0.0.0 (list_dir)", "approval needed")
    assert "orchestrator: Done: Hello there. Based on the tool result: " in first
    assert "README.md" in first  # the call ran
    second = _between(out, "rejected call 1.0.0 (list_dir)", "left conversation")
    assert "did not run" in second and "not today" in second  # the model read the reason
    assert re.search(r"  \S+@\S+ approved list_dir \(call 0\.0\.0\)$", out, re.MULTILINE), out
    assert re.search(
        r"  \S+@\S+ rejected list_dir \(call 1\.0\.0\)  reason: not today$", out, re.MULTILINE
    ), out
    state = await client.get_workflow_handle(session_workflow_id(session)).query(
        "state", result_type=SessionState
    )
    assert [(d.call_id, d.approved) for d in state.approvals] == [("0.0.0", True), ("1.0.0", False)]


async def test_chat_asks_inline_for_tool_calls_that_need_approval(scenarios: Scenarios) -> None:
    await scenarios.outcome("test_chat_asks_inline_for_tool_calls_that_need_approval")


async def _spawn_cli(stack: Stack, *args: str) -> asyncio.subprocess.Process:
    """`python -m durable_plans.cli ARGS`, its pipes left open for the test to use."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durable_plans.cli",
        *args,
        cwd=REPO_ROOT,
        env=_cli_env(stack),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _last_answer(client: Client, session: str) -> str | None:
    """The conversation's last stored message's text (the answer of its last turn)."""
    history: list[Message] = await client.get_workflow_handle(
        session_workflow_id(session)
    ).execute_update("history", HistoryInput(limit=1), result_type=list[Message])
    return history[-1].content


async def _read_until(stream: asyncio.StreamReader, *needles: str) -> str:
    """What ``stream`` printed until every one of ``needles`` was in it (no line end
    needed)."""
    seen = b""
    async with asyncio.timeout(CLI_TIMEOUT_S):
        while not all(needle.encode() in seen for needle in needles):
            piece = await stream.read(256)
            if not piece:
                pytest.fail(f"{needles!r} never all printed; got:\n{seen.decode()}")
            seen += piece
    return seen.decode()


@scenario_of("test_chat_streams_the_answer_while_the_provider_is_still_sending_it", holds=True)
async def _chat_streams_the_answer_while_the_provider_is_still_sending_it(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    session = f"chat-stream-{uuid.uuid4().hex[:8]}"
    proc = await _spawn_cli(stack, "chat", "--session", session)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"Hello [stream-hold]\n")
        await proc.stdin.drain()
        # The provider holds the answer after its first few characters until released, so
        # whatever of it is on screen now was streamed; the whole answer cannot be yet.
        seen = await _read_until(proc.stdout, "orchestrator: Done: ")
        assert "  → tool(list_dir)\n" in seen  # the first call's tool start, as it came
        assert "Based on the tool result" not in seen
        await asyncio.to_thread(stack.provider.release_streams)
        proc.stdin.write(b"/quit\n")
        proc.stdin.close()
        async with asyncio.timeout(CLI_TIMEOUT_S):
            rest, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
    out = seen + rest.decode()
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err.decode()}"
    stored = await _last_answer(client, session)
    assert stored and stored.startswith("Done: Hello. Based on the tool result:")
    # The streamed line is the stored answer, and it is printed once: no second copy.
    assert f"orchestrator: {stored}\n" in out, out
    assert out.count("Done: Hello.") == 1, out
    assert "(the stored answer:)" not in out


async def test_chat_streams_the_answer_while_the_provider_is_still_sending_it(
    scenarios: Scenarios,
) -> None:
    await scenarios.outcome("test_chat_streams_the_answer_while_the_provider_is_still_sending_it")


@scenario_of("test_a_stream_cut_off_mid_answer_restarts_on_screen_and_stores_the_whole_answer")
async def _a_stream_cut_off_mid_answer_restarts_on_screen_and_stores_the_whole_answer(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    session = f"chat-cut-{uuid.uuid4().hex[:8]}"
    code, out, err = await run_cli(stack, ["chat", "--session", session], "Hi [stream-cut]\n")
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    stored = await _last_answer(client, session)
    assert stored and stored.startswith("Done: Hi. Based on the tool result:")
    # The first attempt showed a few words and broke off; the retry said so and started
    # the message over, and what it showed is the stored answer, in full.
    first, retried = out.split("(the answer restarts: attempt 2 of this call)\n", 1)
    assert "orchestrator: Done: " in first and stored not in first, out
    assert retried.startswith(f"orchestrator: {stored}\n"), out
    assert "(the stored answer:)" not in out
    # The log since this test began holds the other scenarios' requests too: only this
    # test's prompt says [stream-cut], what makes the provider cut a stream off.
    cut = [e for e in stack.log_entries() if e.get("reason", "") and "cut" in e["reason"]]
    assert len(cut) == 1 and not cut[0]["delivered"]


async def test_a_stream_cut_off_mid_answer_restarts_on_screen_and_stores_the_whole_answer(
    scenarios: Scenarios,
) -> None:
    await scenarios.outcome(
        "test_a_stream_cut_off_mid_answer_restarts_on_screen_and_stores_the_whole_answer"
    )


@scenario_of(
    "test_status_follow_shows_a_running_subtasks_step_and_the_text_it_is_writing", holds=True
)
async def _status_follow_shows_a_running_subtasks_step_and_the_text_it_is_writing(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    plan_id = f"watched-{uuid.uuid4().hex[:8]}"
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "id": plan_id,
                "goal": "watch one subtask",
                "subtasks": [{"id": "look", "agent": "coder", "description": "Look [stream-hold]"}],
            }
        )
    )
    code, out, err = await run_cli(stack, ["run", str(plan), "--no-wait"])
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    proc = await _spawn_cli(stack, "status", plan_id, "--follow")
    assert proc.stdout is not None
    try:
        # The provider holds the subtask's answer after its first words: the subtask stays
        # running, thinking, with that text streamed, until the test lets it go on.
        seen = await _read_until(proc.stdout, "look writing: Done:", "look: thinking")
        await asyncio.to_thread(stack.provider.release_streams)
        async with asyncio.timeout(CLI_TIMEOUT_S):
            rest, err_bytes = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
    out = seen + rest.decode()
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err_bytes.decode()}"
    assert re.search(r"✓ look \(coder\) completed", out), out
    assert "Plan " in out and "COMPLETED" in out, out  # the final report follows


async def test_status_follow_shows_a_running_subtasks_step_and_the_text_it_is_writing(
    scenarios: Scenarios,
) -> None:
    await scenarios.outcome(
        "test_status_follow_shows_a_running_subtasks_step_and_the_text_it_is_writing"
    )


@scenario_of("test_undo_takes_back_the_last_turn_its_files_and_its_messages")
async def _undo_takes_back_the_last_turn_its_files_and_its_messages(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    session = f"chat-undo-{uuid.uuid4().hex[:8]}"
    branch = f"dplan/chat/{session}"
    script = "\n".join(
        [
            "/undo",  # refused: nothing to undo yet
            "Start the notes " + write("notes.txt", "one\n"),
            "Change the notes " + write("notes.txt", "two\n") + " " + write("todo.txt", "t\n"),
            "/undo",
            "/history 20",
            "/status",
            "/quit",
        ]
    )
    code, out, err = await run_cli(
        stack, ["chat", "--session", session, "--agent", "coder"], script + "\n"
    )
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert (
        "error: UndoRefused: there is no turn to undo: every turn this conversation "
        "remembers is undone\n" in out
    ), out
    # After the undo the branch is at the first turn's commit again.
    first = git(stack.workspace, "rev-parse", branch).stdout.strip()
    assert f"files changed: notes.txt (now {first[:12]} on {branch})" in out
    assert "files changed: notes.txt, todo.txt (now " in out
    undone = re.search(
        r"^undid: Change the notes <<write_file .*; removed (\d+) messages; "
        r"files restored: notes\.txt, todo\.txt \(now (\w{12}) on (\S+)\)$",
        out,
        re.MULTILINE,
    )
    assert undone is not None, out
    assert int(undone[1]) >= 6  # the user message, two calls, their answers, the answer
    assert (undone[2], undone[3]) == (first[:12], branch)
    assert git(stack.workspace, "show", f"{branch}:notes.txt").stdout == "one\n"
    assert git(stack.workspace, "cat-file", "-e", f"{branch}:todo.txt", check=False).returncode
    history = _between(out, "files restored:", "session ")
    assert "user      Start the notes" in history
    assert "Change the notes" not in history
    assert f"  files: {first[:12]} on {branch} · 1 turn(s) /undo can take back" in out

    state = await client.get_workflow_handle(session_workflow_id(session)).query(
        "state", result_type=SessionState
    )
    assert (state.commit, state.branch, state.undoable) == (first, branch, 1)
    await assert_replays(client, [session_workflow_id(session)])


async def test_undo_takes_back_the_last_turn_its_files_and_its_messages(
    scenarios: Scenarios,
) -> None:
    await scenarios.outcome("test_undo_takes_back_the_last_turn_its_files_and_its_messages")


@scenario_of("test_end_finishes_the_conversation_for_good")
async def _end_finishes_the_conversation_for_good(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    session = f"chat-{uuid.uuid4().hex[:8]}"
    code, out, err = await run_cli(
        stack, ["chat", "--session", session, "--agent", "ask"], "/end\n"
    )
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert f"new conversation {session} (agent ask)" in out
    assert f"conversation {session} ended" in out
    await client.get_workflow_handle(session_workflow_id(session)).result()

    code, out, err = await run_cli(stack, ["chat", "--session", session], "hello\n")
    assert code == 1
    assert f"conversation '{session}' has ended (/end) and cannot be resumed" in err


async def test_end_finishes_the_conversation_for_good(scenarios: Scenarios) -> None:
    await scenarios.outcome("test_end_finishes_the_conversation_for_good")


@scenario_of("test_chat_on_a_pseudo_terminal")
async def _chat_on_a_pseudo_terminal(stack: Stack, client: Client, tmp_path: Path) -> None:
    """A person at a terminal: a prompt, a Markdown answer, and Ctrl-C at the prompt
    leaves the chat like /quit."""
    session = f"chat-{uuid.uuid4().hex[:8]}"
    master, proc = _spawn_on_pty(
        ["chat", "--session", session], _cli_env(stack, TERM="xterm-256color", COLUMNS="160")
    )
    screen = _Terminal(master)
    try:
        await screen.expect("you> ")
        os.write(master, b"Hello from a terminal\n")
        await screen.expect("Done: Hello from a terminal.")
        await screen.expect("you> ")
        os.write(master, b"/plan Build a tiny tool [plan]\n")
        await screen.expect("started plan ")
        await screen.expect("you> ")
        os.write(master, b"/status\n")
        await screen.expect("plans:")
        await screen.expect("you> ")
        os.write(master, b"\x03")  # Ctrl-C at the prompt
        await screen.expect(f"left conversation {session}")
        code = await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert code == 0, screen.text
    assert "orchestrator:" in screen.text
    assert "\x1b[" in screen.raw  # a terminal gets styled output
    plan_id = re.findall(r"started plan (plan-[0-9a-f]+)", screen.text)
    assert len(plan_id) == 1, screen.text
    assert re.search(rf"^  {plan_id[0]}  (running|completed)", screen.text, re.MULTILINE)


async def test_chat_on_a_pseudo_terminal(scenarios: Scenarios) -> None:
    await scenarios.outcome("test_chat_on_a_pseudo_terminal")


def _spawn_on_pty(args: list[str], env: dict[str, str]) -> tuple[int, subprocess.Popen[bytes]]:
    """`python -m durable_plans.cli ARGS` with a new pseudo-terminal as its controlling terminal
    (so Ctrl-C typed into it is a SIGINT); returns the master fd and the process."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))

    def own_terminal() -> None:  # runs in the child, after setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        # As an interactive shell starts a foreground job: SIGINT not ignored, even when
        # this suite runs in the background of a shell without job control (which starts
        # it with SIGINT ignored, and an ignored signal stays ignored across exec).
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_plans.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=own_terminal,
    )
    os.close(slave)
    return master, proc


class _Terminal:
    """The master side of a pty: everything the child wrote, ANSI codes stripped."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.raw = ""
        self._seen = 0  # expect() looks only after the previous match

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw)

    async def expect(self, needle: str, timeout_s: float = CLI_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.text.find(needle, self._seen)
            if found >= 0:
                self._seen = found + len(needle)
                return
            await asyncio.to_thread(self._read, 0.2)
        pytest.fail(f"{needle!r} did not appear on the terminal:\n{self.text}")

    def _read(self, wait_s: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], wait_s)
        if ready:
            with contextlib.suppress(OSError):  # EIO once the child has closed the pty
                self.raw += os.read(self.fd, 65536).decode(errors="replace")


@scenario_of("test_plan_command_follows_the_plan_it_started")
async def _plan_command_follows_the_plan_it_started(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    session = f"chat-{uuid.uuid4().hex[:8]}"
    code, out, err = await run_cli(
        stack, ["plan", "Build a tiny tool [plan]", "--session", session, "--json"]
    )

    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    report = PlanReport.model_validate(json.loads(out))  # stdout is only the report
    assert report.status is PlanStatus.COMPLETED
    assert report.counts.completed == len(report.subtasks) > 0
    assert "orchestrator: Planned: " in err and "Build a tiny tool" in err
    state = await client.get_workflow_handle(session_workflow_id(session)).query(
        "state", result_type=SessionState
    )
    assert [p.plan_id for p in state.plans] == [report.plan_id]


async def test_plan_command_follows_the_plan_it_started(scenarios: Scenarios) -> None:
    await scenarios.outcome("test_plan_command_follows_the_plan_it_started")


@scenario_of("test_plan_command_without_a_plan_exits_1")
async def _plan_command_without_a_plan_exits_1(
    stack: Stack, client: Client, tmp_path: Path
) -> None:
    # The model calls a tool that does not exist instead of create_plan, then answers.
    code, out, err = await run_cli(stack, ["plan", "Just say hello [unknown-tool]"])
    assert code == 1, f"stdout:\n{out}\nstderr:\n{err}"
    assert "error: the orchestrator started no plan for this goal" in err
    assert "orchestrator: Done: " in err and "Just say hello" in err
    assert out == ""


async def test_plan_command_without_a_plan_exits_1(scenarios: Scenarios) -> None:
    await scenarios.outcome("test_plan_command_without_a_plan_exits_1")
