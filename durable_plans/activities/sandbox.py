"""The command sandbox: every program a model or a plan asked for runs here.

``run_command``, checks and MCP stdio servers marked ``sandbox = true`` run under
bubblewrap (``bwrap``, Debian's ``bubblewrap``) when ``DPLAN_SANDBOX`` is ``auto`` (the
default, where it works) or ``bwrap``: their own user, PID, IPC, UTS, cgroup and network
namespaces, no capabilities, no nested user namespaces. Inside, a program sees

- the system's toolchain read-only (``/usr``; ``/bin``, ``/lib*``, ``/sbin`` as the distro
  has them; the few ``/etc`` files programs need), and the worker's Python (its venv and
  the prefix the venv was made from) read-only;
- its tree read-write at the tree's own path, and nothing else of the state directory;
- a private ``/tmp``, a fresh ``/proc`` (only its own processes), a minimal ``/dev``;
- a minimal environment (PATH, HOME = the tree, locale, TMPDIR);
- no network unless its policy says ``network = true``; extra read-only paths an
  operator names.

Not the session store, the worker's home, other trees, the worker's environment or its
processes. The limits are the same with or without it: a timeout that kills everything
it started, a process limit (a pids cgroup, or RLIMIT_NPROC for a non-root worker), an
address-space limit (RLIMIT_AS), a file-size limit, and its output capped (head and tail).

``DPLAN_SANDBOX=auto`` where bwrap does not work refuses each command with one sentence
(:data:`INSTALL_SENTENCE`), never running it unconfined; ``none`` runs it under the guard
of ``activities/commands.py`` alone. Whether bwrap works is probed once per process, by
running ``/bin/true`` in the same sandbox a command gets.
"""

from __future__ import annotations

import asyncio
import functools
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from durable_plans._errors import SandboxUnavailable
from durable_plans.domain.tools_config import SandboxPolicy
from durable_plans.settings import Settings

__all__ = [
    "INSTALL_SENTENCE",
    "CommandOutcome",
    "SandboxStatus",
    "SandboxUnavailable",
    "bwrap_argv",
    "checked_sandbox",
    "minimal_environment",
    "run_sandboxed",
    "safe_path",
    "sandbox_status",
    "wrap_for_sandbox",
]

SandboxEngine = Literal["bwrap", "none"]

MAX_PROCESSES = 64
"""Processes one command may have at once (its pids cgroup, or added to RLIMIT_NPROC)."""
MAX_FILE_BYTES = 256 * 1024 * 1024
KILL_GRACE_S = 5.0
PROBE_TIMEOUT_S = 10.0
_READ_CHUNK = 65536
_PIDS_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))

INSTALL_SENTENCE = (
    "refused, not run: commands run only in a sandbox and bubblewrap does not work on this "
    "worker; install it (apt-get install bubblewrap) or opt out with DPLAN_SANDBOX=none{why}"
)

# What of /etc a program needs: the loader's cache, users and groups (made up, below),
# name service switch, time zone, TLS roots, Debian's alternatives (python3, java ...).
_ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "alternatives",
    "mime.types",
    "protocols",
    "services",
)
_ETC_NETWORK = ("resolv.conf", "hosts", "host.conf", "gai.conf")
_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True)
class CommandOutcome:
    """How one program ended: its exit code (negative: killed by that signal), its
    output (stdout and stderr together, capped keeping head and tail), how long it ran,
    and whether its timeout killed it."""

    exit_code: int
    output: str
    duration_s: float
    timed_out: bool


@dataclass(frozen=True)
class SandboxStatus:
    """Which sandbox is in force on this worker, and why (for logs and ``--check``)."""

    mode: str  # DPLAN_SANDBOX: auto, bwrap, none
    engine: SandboxEngine | None  # None: commands are refused
    bwrap: str | None  # the bwrap binary used
    reason: str
    hardened: bool = True  # bwrap's --disable-userns is in force

    @property
    def refusal(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return INSTALL_SENTENCE.format(why=why)

    def describe(self) -> str:
        if self.engine == "bwrap":
            return f"sandbox: bwrap ({self.bwrap}; DPLAN_SANDBOX={self.mode})"
        if self.engine == "none":
            return (
                "sandbox: none (DPLAN_SANDBOX=none): commands run under the guard only, "
                "as the worker's user; run_command asks for approval by default"
            )
        return (
            f"sandbox: unavailable (DPLAN_SANDBOX={self.mode}): {self.reason}; every command "
            "is refused: install bubblewrap (apt-get install bubblewrap) or opt out with "
            "DPLAN_SANDBOX=none"
        )


# --------------------------------------------------------------------------- environment


def safe_path() -> str:
    """Where programs are looked up: the worker's venv first, then the system's."""
    return os.pathsep.join(
        dict.fromkeys([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    )


def minimal_environment(home: Path, tmp: str) -> dict[str, str]:
    """A new environment, nothing inherited: the worker's secrets cannot leak through it."""
    return {
        "PATH": safe_path(),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": tmp,
    }


def python_prefixes() -> tuple[Path, ...]:
    """The worker's Python as directories to show read-only: the venv (``sys.prefix``)
    and the installation it was made from (``sys.base_prefix``), each only when it is not
    already under ``/usr``; never a home directory or ``/`` itself."""
    out: list[Path] = []
    home = Path.home().resolve()
    for raw in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        p = Path(raw).resolve()
        if p == Path("/") or p == home or home.is_relative_to(p):
            continue
        if p.parts[1:2] and p.parts[1] in _SYSTEM_DIRS:
            continue
        if p not in out:
            out.append(p)
    return tuple(out)


def _identity_files() -> tuple[bytes, bytes]:
    """An ``/etc/passwd`` and ``/etc/group`` naming only the sandbox's own user (and
    nobody): programs that ask who they are get an answer, and no other account shows."""
    uid, gid = os.getuid(), os.getgid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = "dplan"
    passwd = (
        f"{name}:x:{uid}:{gid}:{name}:/tmp:/bin/sh\n"
        "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n"
    )
    group = f"{name}:x:{gid}:\nnogroup:x:65534:\n"
    return passwd.encode(), group.encode()


# --------------------------------------------------------------------------- bwrap argv


def bwrap_argv(
    bwrap: str,
    command: Sequence[str],
    *,
    tree: Path | None,
    cwd: Path | None,
    policy: SandboxPolicy,
    env: dict[str, str],
    hide: Iterable[Path] = (),
    identity_fds: tuple[int, int] | None = None,
    harden: bool = True,
    root: Path = Path("/"),
) -> list[str]:
    """The bwrap command line that runs ``command`` in the sandbox.

    ``tree`` is bound read-write at its own path (None: no tree, e.g. an MCP server);
    ``hide``: paths that must stay unseen even where a read-only path holds them (the
    state directory, the session store, the worker's home), covered by an empty tmpfs.
    ``identity_fds``: file descriptors holding the made-up passwd and group files.
    ``root`` is where the system's directories are looked at (tests use a fake one).
    """
    args = [bwrap, "--unshare-all", "--unshare-user"]
    if policy.network:
        args.append("--share-net")
    if harden:
        args.append("--disable-userns")
    args += [
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "dplan-sandbox",
    ]
    # The fresh mounts first: what is bound below may lie under /tmp (a venv or a checkout
    # in /tmp) and must stay visible over the private /tmp, not be covered by it.
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    # The system: /usr read-only; /bin, /lib* and /sbin as the distro has them (symbolic
    # links into /usr on a merged-/usr system, else read-only too).
    for name in _SYSTEM_DIRS:
        host = root / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    etc = list(_ETC_FILES) + (list(_ETC_NETWORK) if policy.network else [])
    for name in etc:
        args += ["--ro-bind-try", str(root / "etc" / name), f"/etc/{name}"]
    if identity_fds is not None:
        args += ["--ro-bind-data", str(identity_fds[0]), "/etc/passwd"]
        args += ["--ro-bind-data", str(identity_fds[1]), "/etc/group"]
    for prefix in python_prefixes():
        args += ["--ro-bind", str(prefix), str(prefix)]
    for extra in policy.read_only:
        args += ["--ro-bind-try", extra, extra]
    bound = [*python_prefixes(), *(Path(p) for p in policy.read_only)]
    for secret in hide:
        if any(secret == b or secret.is_relative_to(b) for b in bound):
            if secret.is_dir():
                args += ["--tmpfs", str(secret)]
            elif secret.exists():
                args += ["--ro-bind", "/dev/null", str(secret)]
    if tree is not None:
        args += ["--bind", str(tree), str(tree)]
    args += ["--chdir", str(cwd or tree or "/tmp"), "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--", *command]
    return args


# --------------------------------------------------------------------------- the probe


@functools.cache
def _probe(bwrap: str) -> tuple[bool, bool, str]:
    """(works, hardened, why not): ``/bin/true`` in the sandbox a command gets."""
    policy = SandboxPolicy()
    why = ""
    for harden in (True, False):
        argv = bwrap_argv(
            bwrap,
            ["true"],
            tree=None,
            cwd=None,
            policy=policy,
            env={"PATH": safe_path()},
            harden=harden,
        )
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return False, False, f"{bwrap} could not run: {exc}"
        if done.returncode == 0:
            return True, harden, ""
        why = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1]
    return False, False, f"{bwrap} failed: {why[:200]}"


def find_bwrap(settings: Settings) -> str | None:
    if settings.bwrap_path is not None:
        path = settings.bwrap_path
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which("bwrap", path=os.environ.get("PATH", "") + os.pathsep + safe_path())


def sandbox_status(settings: Settings) -> SandboxStatus:
    """Which sandbox this worker's commands get (bwrap probed once per process)."""
    mode = settings.sandbox
    if mode == "none":
        return SandboxStatus(mode, "none", None, "DPLAN_SANDBOX=none")
    bwrap = find_bwrap(settings)
    if bwrap is None:
        where = settings.bwrap_path or "bwrap"
        return SandboxStatus(mode, None, None, f"{where} is not installed")
    works, hardened, why = _probe(bwrap)
    if not works:
        return SandboxStatus(mode, None, bwrap, why)
    return SandboxStatus(mode, "bwrap", bwrap, "", hardened)


def checked_sandbox(settings: Settings) -> SandboxStatus:
    """The sandbox a worker starts with; raises SandboxUnavailable when
    ``DPLAN_SANDBOX=bwrap`` and bwrap does not work (that worker must not start)."""
    status = sandbox_status(settings)
    if settings.sandbox == "bwrap" and status.engine != "bwrap":
        raise SandboxUnavailable(
            f"DPLAN_SANDBOX=bwrap but bubblewrap does not work here: {status.reason}; "
            "install it (apt-get install bubblewrap) or set DPLAN_SANDBOX=auto or none"
        )
    return status


def wrap_for_sandbox(
    command: Sequence[str], *, policy: SandboxPolicy, settings: Settings
) -> tuple[list[str], dict[str, str]]:
    """``command`` as bwrap runs it without a tree (an MCP stdio server): the argv, and
    the settings the server's environment gets inside. Raises SandboxUnavailable."""
    status = sandbox_status(settings)
    if status.engine == "none":
        return list(command), {}
    if status.engine is None or status.bwrap is None:
        raise SandboxUnavailable(status.refusal)
    inside = {"PATH": safe_path(), "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    argv = bwrap_argv(
        status.bwrap,
        command,
        tree=None,
        cwd=None,
        policy=policy,
        env={},
        hide=_hidden(settings),
        harden=status.hardened,
    )
    # No --clearenv here: the server's named variables (secrets) pass through bwrap's own
    # environment, never its command line; the rest is set explicitly.
    argv.remove("--clearenv")
    at = argv.index("--")
    extra: list[str] = []
    for key, value in inside.items():
        extra += ["--setenv", key, value]
    return argv[:at] + extra + argv[at:], inside


def _hidden(settings: Settings) -> list[Path]:
    out = [settings.state_dir.expanduser().absolute(), Path.home()]
    store = settings.session_store
    if "://" not in store:
        out.append(Path(store).expanduser().absolute())
    return out


# --------------------------------------------------------------------------- limits


class _PidsCgroup:
    """A pids cgroup for one command, when the worker may create one (else nothing)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        for root in _PIDS_ROOTS:
            if not (root / "pids.max").exists() and not (root / "cgroup.procs").exists():
                continue
            if root == Path("/sys/fs/cgroup") and "pids" not in _read(root / "cgroup.controllers"):
                continue
            path = root / f"dplan-cmd-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(MAX_PROCESSES))
            except OSError:
                with suppress(OSError):
                    path.rmdir()
                continue
            self.path = path
            return

    def join(self) -> None:
        """Called in the child before exec: move itself into the cgroup."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def kill_all(self) -> None:
        """SIGKILL every member until none is left (a fork bomb keeps adding some)."""
        if self.path is None:
            return
        for _ in range(200):
            pids = [int(p) for p in _read(self.path / "cgroup.procs").split()]
            if not pids:
                return
            for pid in pids:
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)  # let the killed exit and leave the group

    def remove(self) -> None:
        if self.path is not None:
            self.kill_all()
            with suppress(OSError):
                self.path.rmdir()


def process_limit_in_force() -> bool:
    """Whether a command's processes are capped here (a pids cgroup, or RLIMIT_NPROC for
    a non-root worker); a root worker without a pids cgroup has only the timeout."""
    cgroup = _PidsCgroup()
    try:
        return cgroup.path is not None or os.getuid() != 0
    finally:
        cgroup.remove()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _user_processes() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
    return count


def _child_setup(cgroup: _PidsCgroup, nproc: int | None, memory: int) -> Callable[[], None]:
    def setup() -> None:
        cgroup.join()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return setup


def _kill_group(pid: int) -> None:
    with suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


class _Capture:
    """Keeps the head and the tail of a stream, counting what it dropped in between."""

    def __init__(self, limit_chars: int) -> None:
        self.limit = max(limit_chars, 100)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        half = self.limit // 2
        room = half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > half:
            self.dropped += len(self.tail) - half
            del self.tail[: len(self.tail) - half]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.dropped:
            return head + tail
        return f"{head}\n… [{self.dropped} bytes of output omitted] …\n{tail}"


class StartFailed(Exception):
    """The program (or bwrap) could not be started at all: ``strerror`` says why."""


async def run_limited(
    command: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limit_s: float,
    max_output_chars: int,
    memory_mb: int,
    pass_fds: Sequence[int] = (),
) -> CommandOutcome:
    """Run ``command`` with the limits every command gets, sandboxed or not."""
    cgroup = _PidsCgroup()
    nproc = None
    if cgroup.path is None and os.getuid() != 0:
        nproc = _user_processes() + MAX_PROCESSES
    capture = _Capture(max_output_chars)
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            pass_fds=pass_fds,
            preexec_fn=_child_setup(cgroup, nproc, memory_mb * 1024 * 1024),
        )
    except OSError as exc:
        cgroup.remove()
        raise StartFailed(exc.strerror or str(exc)) from None

    async def drain() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(_READ_CHUNK):
            capture.add(chunk)

    reader = asyncio.create_task(drain())
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), limit_s)
        except TimeoutError:
            timed_out = True
    finally:
        # Whatever it left behind (background children, a fork bomb) goes with it.
        _kill_group(proc.pid)
        cgroup.kill_all()
        with suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        try:
            await asyncio.wait_for(reader, KILL_GRACE_S)
        except TimeoutError:
            reader.cancel()  # a process that left the group still holds the pipe
        cgroup.remove()
    code = proc.returncode
    assert code is not None  # waited for above
    return CommandOutcome(
        exit_code=code,
        output=capture.text(),
        duration_s=time.monotonic() - started,
        timed_out=timed_out,
    )


def _identity_pipes() -> tuple[int, int]:
    """Two pipes' read ends, each holding one made-up file (small: fits the buffer)."""
    fds: list[int] = []
    for data in _identity_files():
        r, w = os.pipe()
        try:
            os.write(w, data)
        finally:
            os.close(w)
        fds.append(r)
    return fds[0], fds[1]


async def run_sandboxed(
    argv: list[str],
    tree: Path,
    *,
    policy: SandboxPolicy,
    timeout_s: float,
    settings: Settings,
    cwd: Path | None = None,
) -> CommandOutcome:
    """Run ``argv`` in ``tree`` in the worker's sandbox (``DPLAN_SANDBOX``), killed at
    ``timeout_s``; the process, memory, file-size and output limits apply either way.

    ``argv[0]`` is a program name looked up on the sandbox's PATH (the worker's venv,
    then the system's) or a path. ``cwd`` (default: ``tree``) must lie inside ``tree``.
    Raises :class:`SandboxUnavailable` (its text one sentence saying how to install
    bubblewrap or opt out) when no sandbox works and ``DPLAN_SANDBOX`` is not ``none``:
    the program is then never run. A program that cannot be started at all ends with
    exit code 127 and why in its output.
    """
    tree, where, status = await asyncio.to_thread(_prepare, tree, cwd, settings)
    if status.engine is None or (status.engine == "bwrap" and status.bwrap is None):
        raise SandboxUnavailable(status.refusal)
    if "/" not in argv[0] and shutil.which(argv[0], path=safe_path()) is None:
        # Said the same way in and out of bwrap (which would exit 1 with its own words).
        return CommandOutcome(127, f"{argv[0]}: not installed on this worker", 0.0, False)
    started = time.monotonic()
    if status.engine == "none":
        import tempfile

        with tempfile.TemporaryDirectory(prefix="dplan-cmd-") as tmp:
            return await _started(
                argv,
                started,
                cwd=where,
                env=minimal_environment(tree, tmp),
                limit_s=timeout_s,
                policy=policy,
            )
    assert status.bwrap is not None
    fds = _identity_pipes()
    try:
        command = bwrap_argv(
            status.bwrap,
            argv,
            tree=tree,
            cwd=where,
            policy=policy,
            env=minimal_environment(tree, "/tmp"),
            hide=_hidden(settings),
            identity_fds=fds,
            harden=status.hardened,
        )
        return await _started(
            command,
            started,
            cwd=Path("/"),
            env={"PATH": safe_path(), "LANG": "C.UTF-8"},
            limit_s=timeout_s,
            policy=policy,
            pass_fds=fds,
        )
    finally:
        for fd in fds:
            with suppress(OSError):
                os.close(fd)


def _prepare(tree: Path, cwd: Path | None, settings: Settings) -> tuple[Path, Path, SandboxStatus]:
    return (
        Path(os.path.abspath(tree)),
        Path(os.path.abspath(cwd or tree)),
        sandbox_status(settings),
    )


async def _started(
    command: Sequence[str],
    started: float,
    *,
    cwd: Path,
    env: dict[str, str],
    limit_s: float,
    policy: SandboxPolicy,
    pass_fds: Sequence[int] = (),
) -> CommandOutcome:
    try:
        return await run_limited(
            command,
            cwd=cwd,
            env=env,
            limit_s=limit_s,
            max_output_chars=policy.max_output_chars,
            memory_mb=policy.memory_mb,
            pass_fds=pass_fds,
        )
    except StartFailed as err:
        return CommandOutcome(127, f"could not start: {err}", time.monotonic() - started, False)
