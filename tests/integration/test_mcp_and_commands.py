"""Real tools through a real Temporal server: two third-party MCP servers and run_command.

The MCP servers are the real ``mcp-server-git`` and ``mcp-server-time`` from PyPI,
started from this virtual environment; the model is the strict fake provider (it rejects
a request whose tool messages do not answer the calls), driven by ``<<tool {json}>>``
steps in the task. The git server runs behind a proxy that kills it on the first call,
so one test covers a server dying mid-call: retried, restarted, answered once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from durable_plans.client._approvals import PendingCall, decide, pending_calls
from durable_plans.domain.agents_loader import load_agents_file
from durable_plans.domain.models import Plan, PlanStatus, Subtask
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider
from tests.integration.conftest import FAKE_KEY, running_worker
from tests.integration.plans import by_id, run_plan
from tests.integration.replay import assert_replays
from tests.integration.stored import subtask_messages, tool_answers
from tests.integration.workspace_files import plan_paths, result_paths, result_text

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KILLER = Path(__file__).with_name("mcp_killer.py")
EXAMPLE = ROOT / "examples" / "fix-failing-test"


@asynccontextmanager
async def worker(
    client: Client, tmp_path: Path, agents_file: Path, workspace: Path, **settings: object
) -> AsyncIterator[tuple[Settings, SessionStore]]:
    s = Settings(
        task_queue=f"tq-{uuid.uuid4().hex[:10]}",
        session_store=str(tmp_path / "sessions.db"),
        workspace=workspace,
        state_dir=tmp_path / "state",
        agents_file=agents_file,
        llm_timeout_s=30.0,
        **settings,  # type: ignore[arg-type]
    )
    async with running_worker(client, s) as (_, store):
        yield s, store


def _git_repo(path: Path) -> Path:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    (path / "notes.txt").write_text("first\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "initial notes"], check=True)
    (path / "notes.txt").write_text("first\nsecond\n")
    return path


def _step(tool: str, args: dict[str, object]) -> str:
    return f"<<{tool} {json.dumps(args)}>>"


@pytest.mark.skipif(shutil.which("git") is None, reason="mcp-server-git needs git")
async def test_two_real_mcp_servers_answer_through_the_strict_provider_even_when_one_dies(
    client: Client, tmp_path: Path
) -> None:
    repo = _git_repo(tmp_path / "repo")
    flag, starts = tmp_path / "kill-next-call", tmp_path / "git-starts.log"
    flag.touch()
    agents = tmp_path / "agents.toml"
    git_args = [str(KILLER), str(flag), str(starts), "--", sys.executable, "-m", "mcp_server_git"]
    agents.write_text(
        f"""
[mcp_servers.git]
command = {json.dumps(sys.executable)}
args = {json.dumps([*git_args, "--repository", str(repo)])}
timeout_s = 30
max_attempts = 3

[mcp_servers.time]
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
sandbox = {json.dumps(shutil.which("bwrap") is not None)}

[agents.ops]
system_prompt = "You look things up with your tools."
mcp = ["time", "git/git_status", "git/git_log"]
"""
    )
    catalog = load_agents_file(agents)
    task = " ".join(
        [
            "Report the time and the repository state.",
            _step("time__get_current_time", {"timezone": "UTC"}),
            _step("git__git_status", {"repo_path": str(repo)}),
            _step("git__git_add", {"repo_path": str(repo), "files": ["notes.txt"]}),
            _step("git__git_log", {"repo_path": str(repo), "max_count": 1}),
        ]
    )
    plan = Plan(
        id=f"mcp-{uuid.uuid4().hex[:8]}",
        goal="MCP tools",
        subtasks=(Subtask(id="look", description=task, agent="ops"),),
    )
    async with FakeProvider(latency_ms=0) as provider:
        async with worker(
            client,
            tmp_path,
            agents,
            tmp_path / "ws",
            model="openai/fake-model",
            api_base=provider.base_url,
            api_key=FAKE_KEY,
        ) as (settings, store):
            report, failure = await run_plan(
                client, plan, settings.task_queue, agents=catalog.agents
            )
            assert failure is None, failure
            branch = await subtask_messages(store, report, "look")
        assert report.status is PlanStatus.COMPLETED

        # The model was offered exactly the granted tools, as the servers described them.
        offered = {t["function"]["name"] for t in (provider.requests[0].body or {})["tools"]}
        assert {"time__get_current_time", "time__convert_time"} <= offered
        assert {"git__git_status", "git__git_log"} <= offered
        assert "git__git_add" not in offered and "git__git_commit" not in offered

    answers = {m.name: m.content or "" for m in branch if m.role == "tool"}
    assert '"timezone": "UTC"' in answers["time__get_current_time"]
    # Killed mid-call, restarted, answered once: the retry reached a fresh server.
    assert "modified:   notes.txt" in answers["git__git_status"]
    assert not flag.exists()
    # At least the first server and the one after the kill; a listing attempt cut short by
    # its timeout on a loaded host starts one more, which is retrying doing its job.
    started = starts.read_text().splitlines()
    assert set(started) == {"start"} and len(started) >= 2, started
    # A tool the agent was not given is refused as a tool result; nothing was staged.
    assert answers["git__git_add"].startswith("error: unknown tool 'git__git_add'")
    assert "initial notes" in answers["git__git_log"]
    staged = await asyncio.to_thread(
        subprocess.run,
        ["git", "-C", str(repo), "diff", "--cached", "--name-only"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert staged.stdout == ""
    assert await assert_replays(client, [plan.id, f"{plan.id}/look"]) == 2


async def test_the_fix_a_failing_test_example_runs_offline(client: Client, tmp_path: Path) -> None:
    """The README's example: run the test, read the failure, fix the file, run it again;
    the subtask is gated by its check, ``python -m unittest``."""
    workspace = tmp_path / "ws"
    shutil.copytree(EXAMPLE / "workspace", workspace)
    agents = EXAMPLE / "agents.toml"
    plan = Plan.model_validate_json((EXAMPLE / "plan.json").read_text())
    plan = plan.model_copy(update={"id": f"fix-{uuid.uuid4().hex[:8]}"})
    async with worker(client, tmp_path, agents, workspace, model="scripted/demo") as (
        settings,
        store,
    ):
        report, failure = await run_plan(
            client, plan, settings.task_queue, agents=load_agents_file(agents).agents
        )
        assert failure is None, failure
        branch = await subtask_messages(store, report, "fix")
    runs = [m.content or "" for m in branch if m.role == "tool" and m.name == "run_command"]
    assert len(runs) == 2
    assert "exit code 1" in runs[0] and "FAIL: test_adds_two_numbers" in runs[0]
    assert "exit code 0" in runs[1] and "\nOK" in runs[1]
    assert "return a + b" in (result_text(workspace, plan.id, "calc.py") or "")
    assert "exit code 0" in (by_id(report)["fix"].result or "")
    # Completed because `python -m unittest` passed on its last commit (its check).
    [check] = by_id(report)["fix"].checks
    assert check.argv == ("python", "-m", "unittest") and check.exit_code == 0
    assert "OK" in check.output


@pytest.mark.parametrize("sandbox", ["none", "auto"])
async def test_run_command_waits_for_approval_by_default_without_a_sandbox(
    client: Client, tmp_path: Path, sandbox: str
) -> None:
    """No approval switch in the agents file and DPLAN_SANDBOX=none: each command waits
    for a person (with a sandbox, ``approval_required = true`` asks the same). One is
    approved with edited arguments (the edited command runs), one rejected (nothing runs,
    the model reads why)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    agents = tmp_path / "agents.toml"
    agents.write_text(
        '[agents.debug]\ntools = ["run_command"]\nrun_command = {allow = ["touch"]'
        + (", approval_required = true}\n" if sandbox == "auto" else "}\n")
    )
    sandboxed = sandbox != "none"
    plan = Plan(
        id=f"ask-{uuid.uuid4().hex[:8]}",
        goal="approval by default",
        subtasks=(
            Subtask(
                id="yes",
                description="Touch a file. " + _step("run_command", {"argv": ["touch", "a"]}),
                agent="debug",
            ),
            Subtask(
                id="no",
                description="Touch a file. " + _step("run_command", {"argv": ["touch", "b"]}),
                agent="debug",
            ),
        ),
    )
    async with worker(
        client, tmp_path, agents, workspace, model="scripted/demo", sandbox=sandbox
    ) as (s, store):
        catalog = load_agents_file(agents, sandboxed=sandboxed)
        result = asyncio.ensure_future(run_plan(client, plan, s.task_queue, agents=catalog.agents))
        pending: dict[str, PendingCall] = {}
        while set(pending) != {"yes", "no"}:  # until both commands wait
            await asyncio.sleep(0.1)
            with contextlib.suppress(RPCError):  # the plan may not have started yet
                pending = {row.subtask: row for row in await pending_calls(client, plan.id)}
        assert {row.tool for row in pending.values()} == {"run_command"}
        assert not {"a", "b"} & plan_paths(workspace, plan.id)  # no command ran yet
        edited = json.dumps({"argv": ["touch", "edited"]})
        await decide(client, plan.id, pending["yes"].call, approve=True, who="t", arguments=edited)
        await decide(client, plan.id, pending["no"].call, approve=False, who="t", reason="not now")
        report, failure = await result
        assert failure is None, failure
        answers = {
            sid: [m.content or "" for m in tool_answers(await subtask_messages(store, report, sid))]
            for sid in ("yes", "no")
        }
    # The approver's arguments ran, not the model's.
    assert "edited" in result_paths(workspace, plan.id)
    assert not {"a", "b"} & plan_paths(workspace, plan.id)
    assert "exit code 0" in answers["yes"][0]
    assert "t rejected it: not now" in answers["no"][0]
