"""Removing finished plans' trees from a worker's state directory, after a retention.

Every subtask attempt gets a checked-out tree under ``<state dir>/trees/<plan>/<tree>``
with three files beside it (``.index``, ``.state``, ``.lock``; ``git_workspace.py``).
They are a cache of commits the workflows name: once a plan has ended nothing reads them
again, and without this they pile up for as long as the worker lives. The commits, the
refs under ``refs/dplan/<plan>/`` and the result branch are the plan's result and are
never touched here; only checked-out trees and their files go.

What decides is Temporal, never the files:

- A tree is removed only when the workflow it belongs to (the plan's ``PlanWorkflow``,
  whose id is the plan id, or a conversation's ``SessionWorkflow``) has no open run, the
  run chain that made the tree is one Temporal lists as closed (its run key, the first
  ten characters of the tree's name, is the hash of the chain's first run id:
  ``workflows/plan_workspace.subtask_tree``), and both its close time and the tree's last
  modification are older than the retention. So a running plan, a plan paused on a
  failure or waiting for an approval (both Running to Temporal), a plan of another
  namespace that happens to share an id, and a plan run again under its id meanwhile
  keep their trees.
- A plan Temporal does not know (another namespace, a history past its retention, a plan
  whose id is not its workflow id), a tree whose name carries no run key, and everything
  when Temporal cannot be reached, are kept, and the report says why.
- A tree is removed under its own lock (``.lock``, the lock every call on the tree holds),
  taken without waiting: a tree in use is kept.

The worker runs ``collect`` on its own schedule (``run_periodically``) with
``DPLAN_TREE_RETENTION``; ``dplan gc`` runs it on demand (``Client.gc``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import temporalio.client
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from durable_plans.activities.git_workspace import TREES_DIR, dir_name_text
from durable_plans.activities.log import get_logger
from durable_plans.domain.durations import format_duration
from durable_plans.domain.ids import session_workflow_id, stable_id

__all__ = [
    "GcReport",
    "PlanTrees",
    "collect",
    "gc_interval",
    "run_periodically",
]

_CHAT_PREFIX = "chat/"  # workflows/chat_workspace.chat_plan_id
_RUN_KEY = re.compile(r"^([0-9a-f]{10})[/@]")
# RPC failures that say the server is not there (or not answering), as opposed to an
# answer about the plan: every one of them keeps everything.
_UNREACHABLE = (
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.UNKNOWN,
    RPCStatusCode.UNAUTHENTICATED,
    RPCStatusCode.PERMISSION_DENIED,
)
_RPC_TIMEOUT = timedelta(seconds=10)

Status = Literal["closed", "running", "unknown", "unreachable"]


@dataclass
class _Tree:
    """One tree: its directory and the files named after it (grouped by the name before
    the first dot: tree names are escaped so they hold no dot)."""

    key: str
    paths: list[Path]
    run_key: str | None
    modified: float


@dataclass
class PlanTrees:
    """What gc found and did for one plan's folder of trees."""

    plan_id: str
    workflow_id: str
    status: Status
    closed_at: datetime | None = None
    action: Literal["removed", "would remove", "kept"] = "kept"
    reason: str = ""
    trees_removed: int = 0
    files_removed: int = 0
    bytes_removed: int = 0
    trees_kept: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "workflow_id": self.workflow_id,
            "status": self.status,
            "closed_at": self.closed_at.isoformat() if self.closed_at else None,
            "action": self.action,
            "reason": self.reason,
            "removed": {
                "trees": self.trees_removed,
                "files": self.files_removed,
                "bytes": self.bytes_removed,
            },
            "kept": {"trees": self.trees_kept},
        }


@dataclass
class GcReport:
    """A gc pass: per plan folder what was removed (or would be, ``dry_run``) and kept."""

    state_dir: Path
    older_than: timedelta
    dry_run: bool
    temporal_reachable: bool = True
    plans: list[PlanTrees] = field(default_factory=list)

    def _sum(self, name: str) -> int:
        return sum(int(getattr(p, name)) for p in self.plans)

    @property
    def trees_removed(self) -> int:
        return self._sum("trees_removed")

    @property
    def files_removed(self) -> int:
        return self._sum("files_removed")

    @property
    def bytes_removed(self) -> int:
        return self._sum("bytes_removed")

    @property
    def trees_kept(self) -> int:
        return self._sum("trees_kept")

    def to_json(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.state_dir),
            "older_than": format_duration(self.older_than),
            "older_than_s": self.older_than.total_seconds(),
            "dry_run": self.dry_run,
            "temporal_reachable": self.temporal_reachable,
            "removed": {
                "trees": self.trees_removed,
                "files": self.files_removed,
                "bytes": self.bytes_removed,
            },
            "kept": {"trees": self.trees_kept},
            "plans": [p.to_json() for p in self.plans],
        }


def workflow_of(plan_id: str) -> str:
    """The workflow whose lifetime a folder of trees follows: a conversation's
    (``chat/<session>`` trees) or the plan's own (workflow id = plan id)."""
    if plan_id.startswith(_CHAT_PREFIX):
        return session_workflow_id(plan_id.removeprefix(_CHAT_PREFIX))
    return plan_id


def gc_interval(retention: timedelta) -> timedelta:
    """How often the worker looks: a quarter of the retention, between a minute and an
    hour (a tree outlives its retention by at most this)."""
    return min(max(retention / 4, timedelta(minutes=1)), timedelta(hours=1))


# ---------------------------------------------------------------------- the files


def _modified(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _trees(folder: Path) -> list[_Tree]:
    """The trees of one plan's folder, with their last modification (the directory and
    the files beside it: every call rewrites the state file, so no walk is needed)."""
    groups: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        groups.setdefault(entry.name.split(".", 1)[0], []).append(entry)
    found: list[_Tree] = []
    for key, paths in groups.items():
        match = _RUN_KEY.match(dir_name_text(key))
        modified = max(_modified(p) for p in paths)
        found.append(_Tree(key, paths, match.group(1) if match else None, modified))
    return found


def _measure(tree: _Tree) -> tuple[int, int]:
    """Files and bytes of a tree about to go (walked only then: a running plan's trees
    are never walked)."""
    files = size = 0
    for path in tree.paths:
        if not path.is_dir() or path.is_symlink():
            with contextlib.suppress(OSError):
                size += path.lstat().st_size
                files += 1
            continue
        for root, dirs, names in os.walk(path):
            for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                with contextlib.suppress(OSError):
                    size += os.lstat(os.path.join(root, name)).st_size
                    files += 1
    return files, size


@contextlib.contextmanager
def _tree_lock(folder: Path, key: str) -> Iterator[bool]:
    """The tree's own lock, taken without waiting: False when a call holds it."""
    try:
        fd = os.open(folder / f"{key}.lock", os.O_RDWR)
    except FileNotFoundError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def _remove(folder: Path, tree: _Tree) -> tuple[int, int] | None:
    """Remove the tree and its files (the lock file last, while held); the files and
    bytes it held, or None when a call holds it."""
    with _tree_lock(folder, tree.key) as free:
        if not free:
            return None
        freed = _measure(tree)
        lock = folder / f"{tree.key}.lock"
        for path in tree.paths:
            if path == lock:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)
    return freed


def _take(folder: Path, trees: list[_Tree], dry_run: bool) -> list[tuple[int, int] | None]:
    """Remove ``trees`` (or only measure them, ``dry_run``); the plan's folder too once
    it is empty (something new in it meanwhile: it stays)."""
    if dry_run:
        return [_measure(tree) for tree in trees]
    freed = [_remove(folder, tree) for tree in trees]
    if trees:
        with contextlib.suppress(OSError):
            folder.rmdir()
    return freed


# ---------------------------------------------------------------------- Temporal


@dataclass
class _Lifetime:
    status: Status
    closed_at: datetime | None = None
    run_keys: frozenset[str] = frozenset()
    why: str = ""


def _run_key(execution_run_id: str, first_run_id: str) -> str:
    return stable_id(first_run_id or execution_run_id, length=10)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def _lifetime(temporal: temporalio.client.Client, workflow_id: str) -> _Lifetime:
    """Whether ``workflow_id`` has an open run (describe: strongly consistent), and else
    the run keys of its closed runs and the latest close time (visibility)."""
    try:
        desc = await temporal.get_workflow_handle(workflow_id).describe(rpc_timeout=_RPC_TIMEOUT)
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return _Lifetime("unknown", why=f"unknown to Temporal (no workflow {workflow_id})")
        raise
    if desc.status in (None, WorkflowExecutionStatus.RUNNING):
        return _Lifetime("running", why="running (a plan paused or waiting is running too)")
    keys = {_run_key(desc.run_id or "", desc.raw_info.first_run_id)}
    closed = [desc.close_time] if desc.close_time else []
    async for run in temporal.list_workflows(
        f"WorkflowId = {_quoted(workflow_id)}", rpc_timeout=_RPC_TIMEOUT
    ):
        if run.run_id == desc.run_id:
            continue  # describe said how it stands; visibility may lag behind it
        if run.status in (None, WorkflowExecutionStatus.RUNNING):
            return _Lifetime("running", why="a run of it is still open")
        keys.add(_run_key(run.run_id, run.raw_info.first_run_id))
        if run.close_time:
            closed.append(run.close_time)
    return _Lifetime("closed", closed_at=max(closed, default=None), run_keys=frozenset(keys))


def _unreachable(err: BaseException) -> bool:
    if isinstance(err, RPCError):
        return err.status in _UNREACHABLE
    return isinstance(err, (OSError, TimeoutError, RuntimeError))


# ---------------------------------------------------------------------- a pass


def _plan_folders(state_dir: Path) -> tuple[Path, list[Path]]:
    """The state directory made absolute, and its plans' folders of trees."""
    absolute = Path(state_dir).expanduser().absolute()
    root = absolute / TREES_DIR
    if not root.is_dir():
        return absolute, []
    return absolute, sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())


async def collect(
    temporal: temporalio.client.Client,
    state_dir: Path,
    older_than: timedelta,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
) -> GcReport:
    """Remove (or, ``dry_run``, list) the trees of plans that closed more than
    ``older_than`` ago; see the module's rules for what is kept."""
    state_dir, folders = await asyncio.to_thread(_plan_folders, state_dir)
    report = GcReport(state_dir=state_dir, older_than=older_than, dry_run=dry_run)
    moment = now or datetime.now(UTC)
    cutoff = (moment - older_than).timestamp()
    for folder in folders:
        plan_id = dir_name_text(folder.name)
        row = PlanTrees(plan_id=plan_id, workflow_id=workflow_of(plan_id), status="unreachable")
        report.plans.append(row)
        trees = await asyncio.to_thread(_trees, folder)
        if report.temporal_reachable:
            try:
                life = await _lifetime(temporal, row.workflow_id)
            except Exception as err:
                if not _unreachable(err):
                    raise
                report.temporal_reachable = False
                life = _Lifetime("unreachable")
        else:
            life = _Lifetime("unreachable")
        if life.status == "unreachable":
            life.why = "Temporal cannot be reached"
        row.status, row.closed_at = life.status, life.closed_at
        why_kept: dict[str, None] = {}
        going: list[_Tree] = []
        for tree in trees:
            removable, why = _verdict(life, tree, cutoff, older_than)
            if removable:
                going.append(tree)
            else:
                row.trees_kept += 1
                why_kept[why] = None
        for freed in await asyncio.to_thread(_take, folder, going, dry_run):
            if freed is None:
                row.trees_kept += 1
                why_kept["in use"] = None
                continue
            row.trees_removed += 1
            row.files_removed += freed[0]
            row.bytes_removed += freed[1]
        if row.trees_removed:
            row.action = "would remove" if dry_run else "removed"
        if why_kept:
            row.reason = "; ".join(why_kept)
        elif life.closed_at is not None:
            row.reason = f"closed {life.closed_at:%Y-%m-%d %H:%M:%S} UTC"
    return report


def _verdict(
    life: _Lifetime, tree: _Tree, cutoff: float, older_than: timedelta
) -> tuple[bool, str]:
    """Whether ``tree`` may go, and if not, why it stays."""
    if life.status != "closed":
        return False, life.why
    if tree.run_key is None or tree.run_key not in life.run_keys:
        return False, "made by a run Temporal does not list"
    closed = life.closed_at.timestamp() if life.closed_at else float("inf")
    if max(closed, tree.modified) > cutoff:
        return False, f"closed less than {format_duration(older_than)} ago"
    return True, ""


async def run_periodically(
    temporal: temporalio.client.Client,
    state_dir: Path,
    retention: timedelta,
    *,
    interval: timedelta | None = None,
) -> None:
    """The worker's own schedule: a pass now and then every ``interval``
    (``gc_interval``), until cancelled. A failing pass is logged, never fatal."""
    log = get_logger(component="workspace_gc")
    every = interval or gc_interval(retention)
    while True:
        try:
            report = await collect(temporal, state_dir, retention)
        except Exception as err:  # a full disk, a permission: say so, try again later
            log.warning("workspace_gc.failed", error=f"{type(err).__name__}: {err}")
        else:
            if report.trees_removed or not report.temporal_reachable:
                log.info(
                    "workspace_gc.pass",
                    trees_removed=report.trees_removed,
                    files_removed=report.files_removed,
                    bytes_removed=report.bytes_removed,
                    trees_kept=report.trees_kept,
                    temporal_reachable=report.temporal_reachable,
                )
        await asyncio.sleep(every.total_seconds())
