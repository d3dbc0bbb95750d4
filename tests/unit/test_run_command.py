"""run_command's guard: what it refuses, and what it contains when a command misbehaves."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from durable_plans.activities.commands import COMMAND_REGISTRY, CommandContext
from durable_plans.activities.file_jail import FileJail
from durable_plans.activities.sandbox import _PidsCgroup
from durable_plans.domain.tools_config import CommandPolicy
from durable_plans.settings import Settings

PY = Path(sys.executable).name


def ctx(tmp_path: Path, **policy: object) -> CommandContext:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    fields: dict[str, object] = {"allow": (PY, "cat", "env"), "approval_required": False}
    return CommandContext(FileJail(ws), CommandPolicy.model_validate({**fields, **policy}))


async def run(c: CommandContext, argv: list[str], **extra: object) -> str:
    result = await COMMAND_REGISTRY.execute("run_command", json.dumps({"argv": argv, **extra}), c)
    return result.content


async def test_a_command_runs_in_the_workspace_and_reports_its_exit_code(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    (c.workspace.root / "sub").mkdir()
    out = await run(c, [PY, "-c", "import os,sys; print(os.getcwd()); sys.exit(3)"], cwd="sub")
    assert "exit code 3" in out
    assert str(c.workspace.root / "sub") in out


@pytest.mark.parametrize(
    ("argv", "cwd", "why"),
    [
        (["cat", "/etc/passwd"], ".", "outside the workspace"),
        (["cat", "../secret.txt"], ".", "outside the workspace"),
        (["cat", "--file=/etc/hostname"], ".", "outside the workspace"),
        (["cat", "x"], "/etc", "absolute path"),
        (["cat", "x"], "..", "outside the workspace"),
        (["/bin/cat", "x"], ".", "bare name"),
        (["../bin/cat", "x"], ".", "bare name"),
        (["rm", "-rf", "."], ".", "not allowed for this agent"),
        (["bash", "-c", "cat /etc/passwd"], ".", "not allowed for this agent"),
    ],
)
async def test_paths_and_programs_outside_the_guard_are_refused(
    tmp_path: Path, argv: list[str], cwd: str, why: str
) -> None:
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    out = await run(ctx(tmp_path), argv, cwd=cwd)
    assert out.startswith("error:") and why in out, out
    assert "TOP SECRET" not in out


async def test_symlinks_out_of_the_workspace_are_refused_as_cwd_and_as_arguments(
    tmp_path: Path,
) -> None:
    c = ctx(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET")
    (c.workspace.root / "link").symlink_to(outside)
    as_cwd = await run(c, ["cat", "secret.txt"], cwd="link")
    as_arg = await run(c, ["cat", "link/secret.txt"])
    assert as_cwd.startswith("error:") and "symbolic link" in as_cwd
    assert as_arg.startswith("error:") and "outside the workspace" in as_arg
    assert "TOP SECRET" not in as_cwd + as_arg


async def test_the_environment_carries_no_worker_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DPLAN_API_KEY", "sk-live-abcdefghijklmnopqrstuvwx0123")
    monkeypatch.setenv("SOME_TOKEN_FOR_TESTS", "tok-value-that-must-not-leak")
    out = await run(ctx(tmp_path), ["env"])
    assert "exit code 0" in out
    assert "DPLAN_API_KEY" not in out and "sk-live" not in out
    assert "tok-value-that-must-not-leak" not in out
    names = {line.split("=", 1)[0] for line in out.splitlines()[2:] if "=" in line}
    assert names <= {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "TMPDIR",
        "PWD",
    }


@pytest.mark.parametrize("sandbox", ["auto", "none"])
async def test_a_command_that_never_ends_is_killed_with_its_children(
    tmp_path: Path, sandbox: str
) -> None:
    c = ctx(tmp_path, timeout_s=1.0)
    c = CommandContext(c.workspace, c.policy, Settings(sandbox=sandbox))  # type: ignore[arg-type]
    marker = f"sleeper-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
        f"{marker!r}], start_new_session=True)\n"
        "print('started', flush=True)\n"
        "time.sleep(600)\n"
    )
    out = await run(c, [PY, "-c", code])
    assert out.startswith("error:") and "timed out after 1s" in out
    assert "started" in out
    # Nothing of the command outlives it, not even a child in a session of its own: it is
    # gone, or a zombie nobody reaped yet (SIGKILL was sent; the exit is the kernel's).
    children = [p for p in os.listdir("/proc") if p.isdigit() and marker in _cmdline(p)]
    assert [await asyncio.to_thread(_ends, int(p)) for p in children] in (
        [],
        ["gone"],
        ["Z"],
    )


def _ends(pid: int) -> str:
    deadline = time.monotonic() + 30
    while _state(pid) not in ("gone", "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    return _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


async def test_huge_output_is_capped_keeping_head_and_tail(tmp_path: Path) -> None:
    c = ctx(tmp_path, max_output_chars=1000)
    code = "import sys; sys.stdout.write('HEAD' + 'x' * 50_000_000 + 'TAIL')"
    out = await run(c, [PY, "-c", code])
    assert "exit code 0" in out
    assert len(out) < 2000
    assert "HEAD" in out and "TAIL" in out and "bytes of output omitted" in out


def _process_limit_applies() -> bool:
    cgroup = _PidsCgroup()
    try:
        return cgroup.path is not None or os.getuid() != 0
    finally:
        cgroup.remove()


@pytest.mark.skipif(
    not _process_limit_applies(),
    reason="a root worker without a writable pids cgroup has no process limit to test",
)
async def test_a_fork_bomb_is_contained_and_killed(tmp_path: Path) -> None:
    c = ctx(tmp_path, timeout_s=3.0)
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    out = await run(c, [PY, "-c", code])
    assert out.startswith("error:") and "timed out" in out
    leftover = [
        p
        for p in os.listdir("/proc")
        if p.isdigit() and _cmdline(p).endswith("os.fork()\n    except OSError:\n        pass\n")
    ]
    assert leftover == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
