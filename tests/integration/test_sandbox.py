"""Issue 32's escape probes as tests: an agent allowed ``python3`` without approval, on a
real dev server with the fake provider, tries every escape from inside run_command.

With bubblewrap (``DPLAN_SANDBOX=auto``, the default) all seven fail and the limits
hold; with ``DPLAN_SANDBOX=none`` the same probes show what the guard alone allows; with
bwrap absent, ``auto`` refuses each command with its one sentence and never runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from temporalio.client import Client

from durable_plans.activities.sandbox import MAX_PROCESSES, process_limit_in_force
from durable_plans.domain.agents_loader import load_agents_file
from durable_plans.domain.models import Message, Plan, PlanStatus, Subtask
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider
from tests.integration.conftest import provider_settings, running_worker
from tests.integration.plans import by_id, run_plan
from tests.integration.stored import subtask_messages

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

PROBE = Path(__file__).with_name("sandbox_probe.py")
CANARY_NAME = "DPLAN_PROBE_CANARY"
AGENTS = """
[agents.prober]
system_prompt = "You probe the sandbox."
tools = ["run_command"]
[agents.prober.run_command]
allow = ["python3"]
timeout_s = 60
memory_mb = 256

[agents.prober_unguarded]
system_prompt = "You probe the guard."
tools = ["run_command"]
[agents.prober_unguarded.run_command]
allow = ["python3"]
timeout_s = 60
memory_mb = 256
approval_required = false

[agents.writer]
system_prompt = "You write files."
tools = ["write_file"]
"""
PROJECT_TEST = """import unittest

from calc import add


class AddTest(unittest.TestCase):
    def test_adds(self) -> None:
        self.assertEqual(add(2, 3), 5)


if __name__ == "__main__":
    unittest.main()
"""


def _step(tool: str, args: dict[str, object]) -> str:
    return f"<<{tool} {json.dumps(args)}>>"


def _run(*argv: str, **extra: object) -> str:
    return _step("run_command", {"argv": ["python3", *argv], **extra})


def _answers(branch: list[Message]) -> list[str]:
    return [m.content or "" for m in branch if m.role == "tool" and m.name == "run_command"]


def _verdicts(text: str) -> dict[str, str]:
    return dict(re.findall(r"^PROBE ([\w-]+): (.*)$", text, flags=re.M))


@pytest.fixture
def probe_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    shutil.copy(PROBE, ws / "sandbox_probe.py")
    (ws / "calc.py").write_text("def add(a: int, b: int) -> int:\n    return a + b\n")
    (ws / "test_calc.py").write_text(PROJECT_TEST)
    return ws


async def _probe_plan(
    client: Client,
    settings: Settings,
    agent: str,
    targets: dict[str, object],
    agents_file: Path,
) -> tuple[dict[str, str], list[str], str]:
    """One plan running every probe: the seven escapes, a fork bomb, a memory hog, a
    sleeper and a project's tests; the verdicts, every answer and the subtask's result."""
    hexed = json.dumps(targets).encode().hex()
    task = " ".join(
        [
            "Probe the sandbox.",
            _run("sandbox_probe.py", "all", hexed),
            _run("sandbox_probe.py", "fork", timeout_s=20),
            _run("sandbox_probe.py", "hog", "1024"),
            _run("sandbox_probe.py", "sleep", timeout_s=2),
            _run("-m", "unittest", "-v"),
        ]
    )
    plan = Plan(
        id=f"probe-{uuid.uuid4().hex[:8]}",
        goal="escape probes",
        subtasks=(Subtask(id="probe", description=task, agent=agent),),
    )
    catalog = load_agents_file(agents_file)
    async with running_worker(client, settings) as (_, store):
        report, failure = await run_plan(client, plan, settings.task_queue, agents=catalog.agents)
        assert failure is None, failure
        branch = await subtask_messages(store, report, "probe")
    assert report.status is PlanStatus.COMPLETED
    answers = _answers(branch)
    assert len(answers) == 5, answers
    return _verdicts(answers[0]), answers, by_id(report)["probe"].result or ""


async def test_escape_probes_fail_in_the_sandbox_and_the_guard_alone_lets_them_through(
    client: Client, tmp_path: Path, probe_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = f"sk-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv(CANARY_NAME, canary)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".secret").write_text("the worker's own files\n")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "outside").mkdir()
    agents_file = tmp_path / "agents.toml"
    agents_file.write_text(AGENTS)

    async with FakeProvider(latency_ms=0) as provider:
        settings = provider_settings(client, provider, tmp_path, agents_file=agents_file)
        assert settings.sandbox == "auto"
        # Another plan's tree, with a file of its own in it.
        other = Plan(
            id=f"other-{uuid.uuid4().hex[:8]}",
            goal="a neighbour",
            subtasks=(
                Subtask(
                    id="write",
                    agent="writer",
                    description="Write. "
                    + _step("write_file", {"path": "neighbour.txt", "content": "private\n"}),
                ),
            ),
        )
        async with running_worker(client, settings):
            catalog = load_agents_file(agents_file)
            _, failure = await run_plan(client, other, settings.task_queue, agents=catalog.agents)
            assert failure is None, failure
        (neighbour,) = (settings.state_dir / "trees").rglob("neighbour.txt")
        port = urlsplit(provider.base_url).port
        targets: dict[str, object] = {
            "canary_name": CANARY_NAME,
            "canary": canary,
            "worker_pid": os.getpid(),  # the worker runs in this process
            "outside": str(tmp_path / "outside" / "escaped.txt"),
            "port": port,
            "store": settings.session_store,
            "other_tree": str(neighbour),
            "home": str(home),
        }

        # The sandbox (DPLAN_SANDBOX=auto, bwrap works here): no approval by default.
        assert load_agents_file(agents_file).get("prober").run_command.approval_required is False  # type: ignore[union-attr]
        boxed, answers, result = await _probe_plan(client, settings, "prober", targets, agents_file)
        assert sorted(boxed) == sorted(
            ["env", "write", "connect", "store", "processes", "other-tree", "home"]
        )
        escaped = {name: v for name, v in boxed.items() if not v.startswith("BLOCKED")}
        assert escaped == {}, escaped
        assert not (tmp_path / "outside" / "escaped.txt").exists()
        _assert_limits(answers)
        assert "exit code 0" in answers[4] and "Ran 1 test" in answers[4], answers[4]
        # The canary reached neither the provider nor the session store.
        sent = json.dumps([r.body for r in provider.requests])
        assert canary not in sent and canary[::-1] not in sent
        stored = await asyncio.to_thread(Path(settings.session_store).read_bytes)
        assert canary.encode() not in stored and canary[::-1].encode() not in stored
        assert "Probe the sandbox" in result

        # The guard alone (DPLAN_SANDBOX=none): the same probes, what gets through.
        unguarded = settings.with_overrides(
            sandbox="none", task_queue=f"{settings.task_queue}-none"
        )
        bare, answers, _ = await _probe_plan(
            client, unguarded, "prober_unguarded", targets, agents_file
        )
    # Deterministic on any host: the file written, the port reached, the store, the
    # worker's processes, the other tree and the home read. The canary itself is not in
    # this (in-process) worker's /proc environ, which holds its environment at exec:
    # the probe reads the file, that is the escape.
    assert bare["env"].startswith("ESCAPED") and "environ read" in bare["env"], bare["env"]
    for name in ("write", "connect", "store", "processes", "other-tree", "home"):
        assert bare[name].startswith("ESCAPED"), (name, bare[name])
    assert (tmp_path / "outside" / "escaped.txt").read_text() == "escaped\n"
    # The limits are the guard's own: they hold without the sandbox too.
    _assert_limits(answers)


def _assert_limits(answers: list[str]) -> None:
    fork, hog, sleep = answers[1], answers[2], answers[3]
    forked = re.search(r"forked (\d+)", fork)
    assert forked is not None, fork
    if process_limit_in_force():
        assert int(forked.group(1)) < MAX_PROCESSES, fork
    assert "MemoryError: the memory limit held" in hog and "exit code 3" in hog, hog
    assert sleep.startswith("error:") and "timed out after 2s" in sleep, sleep
    assert "sleeping" in sleep


async def test_without_bwrap_auto_refuses_each_command_and_says_how_to_install_it(
    client: Client, tmp_path: Path, probe_workspace: Path
) -> None:
    agents_file = tmp_path / "agents.toml"
    agents_file.write_text(AGENTS)
    marker = probe_workspace / "ran.txt"
    async with FakeProvider(latency_ms=0) as provider:
        settings = provider_settings(
            client,
            provider,
            tmp_path,
            agents_file=agents_file,
            bwrap_path=str(tmp_path / "no-bwrap-here"),
        )
        plan = Plan(
            id=f"nobwrap-{uuid.uuid4().hex[:8]}",
            goal="no sandbox",
            subtasks=(
                Subtask(
                    id="probe",
                    agent="prober",
                    description="Try. "
                    + _run("-c", "open('ran.txt', 'w').write('ran')")
                    + " "
                    + _run("-c", "open('ran.txt', 'w').write('ran')"),
                ),
            ),
        )
        catalog = load_agents_file(agents_file)
        async with running_worker(client, settings) as (_, store):
            report, failure = await run_plan(
                client, plan, settings.task_queue, agents=catalog.agents
            )
            assert failure is None, failure
            branch = await subtask_messages(store, report, "probe")
    answers = _answers(branch)
    assert len(answers) == 2
    for answer in answers:
        assert answer.startswith("error: refused, not run:"), answer
        assert "apt-get install bubblewrap" in answer and "DPLAN_SANDBOX=none" in answer
    # The report says so (the model's answer quotes it), and nothing ran.
    assert "apt-get install bubblewrap" in (by_id(report)["probe"].result or "")
    assert not marker.exists()
    assert not list((settings.state_dir / "trees").rglob("ran.txt"))
