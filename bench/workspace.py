"""What a workspace commit costs: one tool call on a git tree, as the tool activity makes it.

    python -m bench.workspace [--short] [--calls N]

For a repository of 10 files and one of 10,000 (1 KiB each, 100 to a directory), each
call runs what ``run_tool`` runs in its worker thread with a workspace: take the tree
(``GitWorkspace.checkout``: the lock, the state file, a reset when the tree is not known
clean at the call's head), run the file tool on it, and for a changing call commit the
whole tree and move the tree's ref (compare-and-swap). Measured per call, after one
warm-up call:

- ``write_file + commit``: a changing call on the tree the previous call left (the hot
  path: each call starts where the last one ended);
- ``read_file``: a read-only call on that tree, for comparison;
- ``write_file, no workspace``: the same write in a plain directory (the path of runs
  recorded before the workspace was kept in git), the floor;
- ``first call on a host``: a changing call on a tree this host has never materialised
  (a new subtask, or a retry on another worker): the checkout of every file included
  (no warm-up: it is cold by nature; one call in short mode, a fifth as many otherwise);
- ``write_file + commit + push``: the hot path with a remote (a bare repository on the
  same disk, reached through git's local transport), the push before the call returns.

Wall ms per call and CPU ms per call (this process plus the git processes it waited
for, from ``getrusage``). Nothing is asserted; numbers are printed.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from durable_plans.activities.file_jail import FileJail
from durable_plans.activities.file_tools import execute_workspace_tool
from durable_plans.activities.git_workspace import GitWorkspace, tool_commit_message
from durable_plans.domain.workspace_refs import GitIdentity, WorkspaceRef

IDENTITY = GitIdentity(name="coder", email="coder@bench.invalid")
PLAN = "bench"
SIZES = (10, 10_000)
FILE_BYTES = 1024
PER_DIR = 100


@dataclass(frozen=True)
class Sample:
    wall_ms: float
    cpu_ms: float
    git_cpu_ms: float


def cpu_s() -> tuple[float, float]:
    """(this process, its waited-for children) user + system CPU seconds."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def measure(calls: int, one: Callable[[int], None], *, warm_up: bool = True) -> Sample:
    """Per-call wall and CPU of ``one(i)`` for i in 1..calls, after one warm-up (i=0)
    unless ``warm_up`` is False (a call that is cold by nature)."""
    if warm_up:
        one(0)
    wall0 = time.perf_counter()
    own0, kids0 = cpu_s()
    for i in range(1, calls + 1):
        one(i)
    wall = time.perf_counter() - wall0
    own1, kids1 = cpu_s()
    total = (own1 - own0) + (kids1 - kids0)
    return Sample(wall * 1000 / calls, total * 1000 / calls, (kids1 - kids0) * 1000 / calls)


def make_repository(path: Path, files: int) -> None:
    """A bare repository whose one commit holds ``files`` files of 1 KiB, 100 to a
    directory (written with ``git fast-import``: one pack, in a second or two)."""
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "init", "--quiet", "--bare", str(path)],
        check=True,
    )
    filler = ("x" * 63 + "\n") * (FILE_BYTES // 64 - 1)
    parts: list[bytes] = []
    for i in range(files):
        data = f"file {i}\n{filler}".encode()
        parts.append(b"blob\nmark :%d\ndata %d\n%s\n" % (i + 1, len(data), data))
    message = b"the benchmark's repository"
    parts.append(
        b"commit refs/heads/main\ncommitter bench <bench@bench.invalid> 1700000000 +0000\n"
        b"data %d\n%s\n" % (len(message), message)
    )
    for i in range(files):
        parts.append(b"M 100644 :%d d%03d/f%05d.txt\n" % (i + 1, i // PER_DIR, i))
    subprocess.run(
        ["git", f"--git-dir={path}", "fast-import", "--quiet"],
        input=b"".join(parts) + b"\n",
        check=True,
    )


class Chain:
    """One tree whose head moves with each changing call, as a subtask's does."""

    def __init__(self, gw: GitWorkspace, base: str, tree: str) -> None:
        self.gw = gw
        self.head = base
        self.tree = tree
        self.turn = 0

    def ref(self) -> WorkspaceRef:
        return WorkspaceRef(plan_id=PLAN, tree=self.tree, head=self.head, identity=IDENTITY)

    def write(self, i: int) -> None:
        self.turn += 1
        args = json.dumps({"path": f"work/out{i % 7}.txt", "content": f"call {i}\n" * 20})
        with self.gw.checkout(self.ref()) as lease:
            lease.mark_changing()
            result = execute_workspace_tool("write_file", args, FileJail(lease.path))
            message = tool_commit_message(self.tree, self.turn, 0, "write_file")
            commit = lease.commit(message, 1_800_000_000 + self.turn)
        if not result.ok or commit is None:
            raise RuntimeError(f"call {i} did not commit: {result.content}")
        self.head = commit

    def read(self, i: int) -> None:
        args = json.dumps({"path": "d000/f00001.txt" if i >= 0 else "x"})
        with self.gw.checkout(self.ref()) as lease:
            result = execute_workspace_tool("read_file", args, FileJail(lease.path))
        if not result.ok:
            raise RuntimeError(result.content)


def bench_size(files: int, calls: int, cold_calls: int, root: Path) -> list[tuple[str, Sample]]:
    repo = root / f"repo-{files}.git"
    make_repository(repo, files)
    gw = GitWorkspace(repo, root / f"state-{files}")
    base = gw.open_plan(PLAN, None)
    rows: list[tuple[str, Sample]] = []

    chain = Chain(gw, base, "hot@0")
    rows.append(("write_file + commit", measure(calls, chain.write)))
    rows.append(("read_file", measure(calls, chain.read)))

    plain = FileJail(root / f"plain-{files}")

    def plain_write(i: int) -> None:
        args = json.dumps({"path": f"work/out{i % 7}.txt", "content": f"call {i}\n" * 20})
        execute_workspace_tool("write_file", args, plain)

    rows.append(("write_file, no workspace", measure(calls, plain_write)))

    def first_call(i: int) -> None:
        Chain(gw, base, f"cold{i}@0").write(i)

    rows.append(("first call on a host", measure(cold_calls, first_call, warm_up=False)))

    remote = root / f"remote-{files}.git"
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(repo), str(remote)],
        check=True,
        capture_output=True,
    )
    # The same state directory and tree as the hot path: the tree on disk moves back to
    # the base with the few files that differ, instead of a checkout of every file again
    # (the remote's commits are the cache clone's; the blobs are the same).
    pushing = GitWorkspace(repo, root / f"state-{files}", remote=str(remote))
    far = Chain(pushing, pushing.open_plan(PLAN, None), "hot@0")
    rows.append(("write_file + commit + push", measure(calls, far.write)))
    return rows


def report(files: int, rows: Sequence[tuple[str, Sample]]) -> None:
    print(f"\nrepository of {files} files ({FILE_BYTES} bytes each)")
    print(f"  {'call':<30} {'wall ms':>9} {'CPU ms':>9} {'of it git':>10}")
    for name, s in rows:
        print(f"  {name:<30} {s.wall_ms:9.1f} {s.cpu_ms:9.1f} {s.git_cpu_ms:10.1f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workspace", description=__doc__)
    parser.add_argument("--short", action="store_true", help="fewer calls (CI)")
    parser.add_argument("--calls", type=int, default=None, help="calls per measurement")
    args = parser.parse_args(argv)
    calls = args.calls or (10 if args.short else 50)
    cold_calls = 1 if args.short else max(2, calls // 5)
    version = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True)
    print(
        f"{version.stdout.strip()}; {calls} calls per row after one warm-up, "
        f"{cold_calls} for a host's first call"
    )
    root = Path(tempfile.mkdtemp(prefix="dplan-bench-ws-"))
    try:
        for files in SIZES:
            started = time.perf_counter()
            rows = bench_size(files, calls, cold_calls, root)
            report(files, rows)
            print(f"  ({time.perf_counter() - started:.1f} s including making the repository)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
