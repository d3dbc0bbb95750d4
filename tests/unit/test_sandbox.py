"""The sandbox's bwrap command line, its modes, and run_sandboxed's outcome."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from durable_plans._errors import SandboxUnavailable
from durable_plans.activities import sandbox
from durable_plans.activities.sandbox import (
    bwrap_argv,
    checked_sandbox,
    python_prefixes,
    run_sandboxed,
    sandbox_status,
)
from durable_plans.domain.tools_config import CommandPolicy, McpServerConfig, SandboxPolicy
from durable_plans.settings import Settings

has_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _fake_root(tmp_path: Path, *, merged: bool) -> Path:
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "lib").mkdir()
    (root / "etc" / "ssl").mkdir(parents=True)
    if merged:
        (root / "bin").symlink_to("usr/bin")
        (root / "lib").symlink_to("usr/lib")
    else:
        (root / "bin").mkdir()
        (root / "lib").mkdir()
    return root


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def _argv(tmp_path: Path, **kw: object) -> list[str]:
    fields: dict[str, object] = {
        "tree": tmp_path / "trees" / "p" / "t",
        "cwd": None,
        "policy": SandboxPolicy(),
        "env": {"PATH": "/usr/bin", "HOME": "/h"},
    }
    fields.update(kw)
    if "root" not in fields:
        fields["root"] = _fake_root(tmp_path, merged=True)
    return bwrap_argv("/usr/bin/bwrap", ["python3", "-V"], **fields)  # type: ignore[arg-type]


def test_every_namespace_is_its_own_and_no_capability_is_kept(tmp_path: Path) -> None:
    argv = _argv(tmp_path)
    assert argv[0] == "/usr/bin/bwrap"
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert "--share-net" not in argv
    assert "--disable-userns" in argv
    assert "--disable-userns" not in _argv(tmp_path / "b", harden=False)


def test_network_only_where_the_policy_says_so(tmp_path: Path) -> None:
    argv = _argv(tmp_path, policy=SandboxPolicy(network=True))
    assert "--share-net" in argv
    assert any(dst == "/etc/resolv.conf" for _, dst in _pairs(argv, "--ro-bind-try"))
    closed = _argv(tmp_path / "b")
    assert not any(dst == "/etc/resolv.conf" for _, dst in _pairs(closed, "--ro-bind-try"))


def test_the_system_is_read_only_as_the_distro_lays_it_out(tmp_path: Path) -> None:
    merged = _argv(tmp_path / "m", root=_fake_root(tmp_path / "m", merged=True))
    assert ("usr/bin", "/bin") in _pairs(merged, "--symlink")
    assert any(dst == "/usr" for _, dst in _pairs(merged, "--ro-bind"))
    split = _argv(tmp_path / "s", root=_fake_root(tmp_path / "s", merged=False))
    assert any(dst == "/bin" for _, dst in _pairs(split, "--ro-bind"))
    assert not _pairs(split, "--symlink")


def test_the_tree_is_the_only_writable_path_and_the_command_runs_last(tmp_path: Path) -> None:
    tree = tmp_path / "trees" / "p" / "t"
    argv = _argv(tmp_path, tree=tree, cwd=tree / "sub")
    assert _pairs(argv, "--bind") == [(str(tree), str(tree))]
    assert argv[argv.index("--chdir") + 1] == str(tree / "sub")
    # The private /tmp comes before the tree, so a tree under /tmp is not hidden by it.
    assert argv.index("--tmpfs") < argv.index("--bind")
    assert tuple(argv[argv.index("--proc") : argv.index("--proc") + 2]) == ("--proc", "/proc")
    assert argv[argv.index("--dev") + 1] == "/dev"
    assert argv[-3:] == ["--", "python3", "-V"]


def test_the_environment_is_cleared_then_set(tmp_path: Path) -> None:
    argv = _argv(tmp_path, env={"PATH": "/usr/bin", "HOME": "/h"})
    at = argv.index("--clearenv")
    assert _pairs(argv[at:], "--setenv") == [("PATH", "/usr/bin"), ("HOME", "/h")]


def test_the_worker_python_is_bound_read_only_never_a_home(tmp_path: Path) -> None:
    prefixes = python_prefixes()
    home = Path.home().resolve()
    assert all(p != home and not home.is_relative_to(p) for p in prefixes)
    assert Path(sys.executable).resolve().is_relative_to(Path("/usr")) or any(
        Path(sys.executable).resolve().is_relative_to(p) for p in prefixes
    )
    argv = _argv(tmp_path)
    bound = _pairs(argv, "--ro-bind")
    for p in prefixes:
        assert (str(p), str(p)) in bound
    # A venv (or an operator's path) under /tmp, as in a checkout cloned there, is bound
    # after the private /tmp is mounted: mounted before, the tmpfs hid it ("bwrap: execvp
    # /tmp/fresh/.venv/bin/python: No such file or directory" for every command).
    private_tmp = next(i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == "/tmp")
    policy = SandboxPolicy(read_only=("/tmp/data",))
    under_tmp = _argv(tmp_path / "t", policy=policy)
    assert under_tmp.index("/tmp") < under_tmp.index("/tmp/data")
    for i, a in enumerate(argv):
        if a == "--ro-bind" and Path(argv[i + 2]) in prefixes:
            assert i > private_tmp, argv[i + 2]


def test_operator_paths_are_read_only_and_secrets_under_them_stay_hidden(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    (data / "state").mkdir(parents=True)
    (data / "sessions.db").write_text("")
    policy = SandboxPolicy(read_only=(str(data),))
    argv = _argv(tmp_path, policy=policy, hide=[data / "state", data / "sessions.db", Path("/x")])
    assert (str(data), str(data)) in _pairs(argv, "--ro-bind-try")
    assert argv[argv.index("--tmpfs", argv.index("--tmpfs") + 1) + 1] == str(data / "state")
    assert ("/dev/null", str(data / "sessions.db")) in _pairs(argv, "--ro-bind")
    assert "/x" not in argv  # not under a bound path: nothing to hide


def test_the_sandbox_policy_of_an_agent_and_of_an_mcp_server() -> None:
    policy = CommandPolicy(allow=("python3",), network=True, read_only=("/srv",), memory_mb=512)
    assert policy.sandbox == SandboxPolicy(network=True, read_only=("/srv",), memory_mb=512)
    server = McpServerConfig(name="t", command="x", sandbox=True, network=True)
    assert server.sandbox_policy.network


def test_modes_and_the_refusal_sentence(tmp_path: Path) -> None:
    none = sandbox_status(Settings(sandbox="none"))
    assert none.engine == "none" and "guard only" in none.describe()
    missing = Settings(sandbox="auto", bwrap_path=str(tmp_path / "nope"))
    status = sandbox_status(missing)
    assert status.engine is None
    assert "apt-get install bubblewrap" in status.refusal
    assert "DPLAN_SANDBOX=none" in status.refusal
    assert checked_sandbox(missing).engine is None  # auto: the worker starts, refusing
    with pytest.raises(SandboxUnavailable, match="DPLAN_SANDBOX=bwrap"):
        checked_sandbox(missing.with_overrides(sandbox="bwrap"))


async def test_auto_without_bwrap_refuses_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    settings = Settings(bwrap_path=str(tmp_path / "nope"))
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        await run_sandboxed(
            ["touch", str(marker)], tmp_path, policy=SandboxPolicy(), timeout_s=5, settings=settings
        )
    assert not marker.exists()


@has_bwrap
@pytest.mark.parametrize("mode", ["auto", "none"])
async def test_run_sandboxed_reports_code_output_and_timeout(tmp_path: Path, mode: str) -> None:
    settings = Settings(sandbox=mode)  # type: ignore[arg-type]
    done = await run_sandboxed(
        ["python3", "-c", "import os; print(os.getcwd()); open('made', 'w'); raise SystemExit(4)"],
        tmp_path,
        policy=SandboxPolicy(),
        timeout_s=30,
        settings=settings,
    )
    assert done.exit_code == 4 and not done.timed_out
    assert str(tmp_path) in done.output
    assert (tmp_path / "made").exists()  # the tree is writable, at its own path
    slow = await run_sandboxed(
        ["sleep", "30"], tmp_path, policy=SandboxPolicy(), timeout_s=0.5, settings=settings
    )
    # Killed at its timeout: timed_out is ours to say. The code is the signal's (negative)
    # unless asyncio could not read the status (once in a full suite, "Unknown child
    # process ... will report returncode 255"): never 0, never a pass.
    assert slow.timed_out and slow.exit_code != 0
    missing = await run_sandboxed(
        ["no-such-program-here"], tmp_path, policy=SandboxPolicy(), timeout_s=10, settings=settings
    )
    assert missing.exit_code != 0


@has_bwrap
async def test_inside_the_sandbox_only_its_own_processes_and_no_network(tmp_path: Path) -> None:
    code = (
        "import os, socket\n"
        "print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "print('ifaces', sorted(n for _, n in socket.if_nameindex()))\n"
        "print('user', open('/etc/passwd').read().count(chr(10)))\n"
    )
    done = await run_sandboxed(
        ["python3", "-c", code], tmp_path, policy=SandboxPolicy(), timeout_s=30, settings=Settings()
    )
    assert done.exit_code == 0, done.output
    assert "pids [1, 2]" in done.output
    assert "ifaces ['lo']" in done.output
    assert "user 2" in done.output  # its own user and nobody


def test_the_probe_is_cached_per_binary() -> None:
    assert sandbox._probe.cache_info().maxsize is None
