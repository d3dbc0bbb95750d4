"""Which worker deployment and build a worker belongs to (Temporal's Worker Versioning).

``DPLAN_DEPLOYMENT`` names the worker deployment; unset, the worker is unversioned, as
before (any worker on the task queue runs any workflow task, so a workflow change must wait
for the queue to drain, or carry a patch). Set, every worker says which build it is
(``DPLAN_BUILD_ID``), and the server routes by build: a plan, and its subtasks, run to the
end on the build they started on (pinned); a conversation moves to the deployment's current
build when it continues as new. ``docs/operating.md`` walks a rollout.

The default build id is derived from what decides replay: the package version and the
source of the workflow code (``durable_plans/workflows`` and the ``durable_plans.domain``
modules it imports, found by reading their imports). The same code gives the same id on
every machine and checkout; a change to any of those files gives another, so a deploy of
changed workflow code can never join the build that started the running plans.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from durable_plans._errors import DeploymentError

__all__ = [
    "MAX_NAME_LENGTH",
    "DeploymentError",
    "WorkerDeployment",
    "check_build_id",
    "check_deployment_name",
    "default_build_id",
    "derive_build_id",
    "describe_deployment",
    "source_digest",
    "workflow_sources",
]

# The server builds internal workflow ids from the deployment name and the build id and
# caps each at (its id limit - 39) / 2 characters: 480 with the default limit of 1000,
# 108 with the 255 a PostgreSQL-backed server needs (deploy/dynamicconfig/dplan.yaml).
# 100 fits both.
MAX_NAME_LENGTH = 100
# The build id's hash part: 12 hex digits (48 bits) tell apart any two builds one
# deployment will ever hold while keeping ``temporal worker deployment`` output readable.
HASH_DIGITS = 12

_PACKAGE_ROOT = Path(__file__).resolve().parent
# Where the workflow code and what it may import live; the hash follows imports only
# within these (an activity or the client does not decide replay).
_HASHED_PACKAGES = ("durable_plans.workflows", "durable_plans.domain")
_BLANK_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")


@dataclass(frozen=True)
class WorkerDeployment:
    """A versioned worker's place: ``name`` (``DPLAN_DEPLOYMENT``) and ``build_id``."""

    name: str
    build_id: str


def describe_deployment(deployment: WorkerDeployment | None) -> str:
    """One line for ``dplan-worker --check``: the deployment and build, or unversioned."""
    if deployment is None:
        return "worker deployment: none (unversioned; set DPLAN_DEPLOYMENT to version workers)"
    return f"worker deployment: {deployment.name}, build {deployment.build_id}"


def _check_common(setting: str, value: str) -> str:
    if value == "":
        raise DeploymentError(f"{setting} is set but empty")
    if value.strip() == "":
        raise DeploymentError(f"{setting} is set but blank: {value!r}")
    if _BLANK_OR_CONTROL.search(value):
        raise DeploymentError(
            f"{setting} must not contain spaces or control characters, got {value!r}"
        )
    if len(value) > MAX_NAME_LENGTH:
        raise DeploymentError(
            f"{setting} must be at most {MAX_NAME_LENGTH} characters, got {len(value)}"
        )
    if value.startswith("__"):
        raise DeploymentError(
            f"{setting} must not start with '__' (the server keeps those), got {value!r}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise DeploymentError(f"{setting} must be valid UTF-8 text, got {value!r}") from None
    return value


def check_deployment_name(value: str, setting: str = "DPLAN_DEPLOYMENT") -> str:
    """``value`` if the server accepts it as a worker deployment's name; else
    ``DeploymentError`` saying why. Besides the common rules (not empty or blank, no
    spaces or control characters, at most ``MAX_NAME_LENGTH``, not starting with ``__``),
    a name holds no ``.`` or ``:``: the server writes a version as ``name.build`` or
    ``name:build``."""
    _check_common(setting, value)
    for sep in (".", ":"):
        if sep in value:
            raise DeploymentError(
                f"{setting} must not contain {sep!r} (the server joins the deployment name "
                f"and build id with it), got {value!r}"
            )
    return value


def check_build_id(value: str, setting: str = "DPLAN_BUILD_ID") -> str:
    """``value`` if the server accepts it as a build id; else ``DeploymentError``."""
    return _check_common(setting, value)


def _module_file(module: str, root: Path) -> Path | None:
    """The source file of ``durable_plans.x.y`` inside the package at ``root``, if any."""
    parts = module.split(".")
    if parts[0] != "durable_plans":
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _within_hashed(module: str) -> bool:
    return any(module == pkg or module.startswith(pkg + ".") for pkg in _HASHED_PACKAGES)


# An import statement at the start of a line, wherever it stands (top level, inside
# ``imports_passed_through``, inside a function); a parenthesised list may span lines.
# Read as text, not parsed: parsing the ~45 files costs a worker's start a noticeable
# fraction of a second, and a false match (an import quoted in a docstring) only hashes
# one more file.
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<source>[\w.]+)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n]*)"
    r"|import[ \t]+(?P<modules>[^\n]*))",
    re.MULTILINE,
)
_NAME = re.compile(r"[A-Za-z_][\w.]*")


def _imported(text: str) -> Iterator[str]:
    """Every absolute module name ``text`` imports, and each ``module.name`` it imports
    from one (the name may itself be a module: ``from durable_plans.domain import ids``)."""
    for found in _IMPORT.finditer(text):
        if found["source"] is not None:
            source = found["source"]
            yield source
            names = found["names"].split("#")[0] if "(" not in found["names"] else found["names"]
            for part in names.strip("()").split(","):
                words = _NAME.findall(part.split("#")[0])
                if words:
                    yield f"{source}.{words[0]}"
        else:
            for part in found["modules"].split("#")[0].split(","):
                words = _NAME.findall(part)
                if words:
                    yield words[0]


def workflow_sources(root: Path = _PACKAGE_ROOT) -> list[Path]:
    """The files whose text decides how a workflow replays, sorted: every module of
    ``workflows/`` under the package directory ``root`` and each
    ``durable_plans.workflows``/``.domain`` module they import, directly or through one
    another."""
    start = sorted((root / "workflows").glob("*.py"))
    found: dict[Path, None] = dict.fromkeys(start)
    todo = list(start)
    while todo:
        path = todo.pop()
        for name in _imported(path.read_text(encoding="utf-8")):
            if not _within_hashed(name):
                continue
            target = _module_file(name, root)
            if target is not None and target not in found:
                found[target] = None
                todo.append(target)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def source_digest(paths: Iterable[Path], root: Path = _PACKAGE_ROOT) -> str:
    """sha256 over each file's path below ``root`` and its text, line endings made
    ``\\n`` (a checkout on Windows hashes as one on Linux); hex."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes().replace(b"\r\n", b"\n"))
        digest.update(b"\0")
    return digest.hexdigest()


def derive_build_id(version: str, root: Path = _PACKAGE_ROOT) -> str:
    """``<version>-<12 hex of the workflow sources' digest>`` for the package at ``root``."""
    return f"{version}-{source_digest(workflow_sources(root), root)[:HASH_DIGITS]}"


@functools.cache
def default_build_id() -> str:
    """This package's build id (``derive_build_id`` of its version and its own files):
    stable for the same code, another for changed workflow code. Computed once."""
    from durable_plans._version import __version__

    return derive_build_id(__version__)
