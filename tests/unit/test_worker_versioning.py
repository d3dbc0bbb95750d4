"""Worker Versioning's settings: the default build id follows the workflow code and
nothing else, and a deployment name or build id the server would refuse is refused first,
saying why (``durable_plans/worker_versioning.py``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from temporalio.common import VersioningBehavior

import durable_plans
from durable_plans import SettingsError
from durable_plans.settings import Settings
from durable_plans.worker import _check, deployment_config
from durable_plans.worker_versioning import (
    HASH_DIGITS,
    MAX_NAME_LENGTH,
    default_build_id,
    derive_build_id,
    workflow_sources,
)

PACKAGE = Path(durable_plans.__file__).parent


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the package's source, to change without touching the checkout."""
    root = tmp_path / "durable_plans"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def _edit(path: Path) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n# a change\n", encoding="utf-8")


def test_the_default_build_id_is_the_version_and_a_hash_of_the_workflow_code() -> None:
    build = default_build_id()
    assert re.fullmatch(
        re.escape(durable_plans.__version__) + rf"-[0-9a-f]{{{HASH_DIGITS}}}", build
    ), build
    assert derive_build_id(durable_plans.__version__) == build  # computed again: the same


def test_the_same_code_elsewhere_gives_the_same_id(package_copy: Path) -> None:
    # Another checkout (another directory, files written at another time), and one with
    # Windows line endings: the same id.
    assert derive_build_id("0.2.0", package_copy) == derive_build_id("0.2.0")
    for path in workflow_sources(package_copy):
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert derive_build_id("0.2.0", package_copy) == derive_build_id("0.2.0")


def test_the_hashed_files_are_the_workflows_and_the_domain_modules_they_import() -> None:
    names = {p.relative_to(PACKAGE).as_posix() for p in workflow_sources()}
    assert {p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "workflows").glob("*.py")} <= (
        names
    )
    # Imported by workflow code (inside imports_passed_through): hashed.
    assert {"domain/models.py", "domain/contracts.py", "domain/session_contracts.py"} <= names
    # Never imported by it, directly or not: activities, the client, the settings.
    assert all(n.startswith(("workflows/", "domain/")) for n in names), names


@pytest.mark.parametrize(
    "changed",
    ["workflows/plan.py", "workflows/session.py", "domain/models.py", "domain/contracts.py"],
)
def test_changed_workflow_code_gives_another_id(package_copy: Path, changed: str) -> None:
    before = derive_build_id("0.2.0", package_copy)
    _edit(package_copy / changed)
    assert derive_build_id("0.2.0", package_copy) != before


def test_a_new_workflow_module_gives_another_id(package_copy: Path) -> None:
    before = derive_build_id("0.2.0", package_copy)
    (package_copy / "workflows" / "extra.py").write_text('"""New workflow code."""\n')
    assert derive_build_id("0.2.0", package_copy) != before


def test_code_workflows_never_run_keeps_the_id(package_copy: Path) -> None:
    before = derive_build_id("0.2.0", package_copy)
    for outside in ("worker.py", "settings.py", "cli/main.py", "activities/llm.py"):
        _edit(package_copy / outside)
    assert derive_build_id("0.2.0", package_copy) == before
    assert derive_build_id("0.2.1", package_copy) != before  # the version is part of it


def test_unset_is_unversioned_as_before() -> None:
    settings = Settings.from_env({})
    assert settings.deployment is None and settings.worker_deployment() is None
    assert deployment_config(settings) is None


def test_a_deployment_gives_a_pinned_versioned_worker() -> None:
    settings = Settings.from_env({"DPLAN_DEPLOYMENT": "dplan"})
    deployment = settings.worker_deployment()
    assert deployment is not None
    assert (deployment.name, deployment.build_id) == ("dplan", default_build_id())
    config = deployment_config(settings)
    assert config is not None and config.use_worker_versioning
    assert config.default_versioning_behavior is VersioningBehavior.PINNED
    assert (config.version.deployment_name, config.version.build_id) == (
        "dplan",
        default_build_id(),
    )
    given = Settings.from_env({"DPLAN_DEPLOYMENT": "dplan", "DPLAN_BUILD_ID": "2026-11-27.1"})
    assert given.worker_deployment() is not None
    assert given.worker_deployment().build_id == "2026-11-27.1"  # type: ignore[union-attr]


def test_check_prints_the_deployment_and_build(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"DPLAN_DEPLOYMENT": "dplan", "DPLAN_BUILD_ID": "b-7", "DPLAN_SANDBOX": "none"}
    assert _check(Settings.from_env(env)) == 0
    assert "worker deployment: dplan, build b-7" in capsys.readouterr().out.splitlines()
    assert _check(Settings.from_env({"DPLAN_SANDBOX": "none"})) == 0
    assert "worker deployment: none (unversioned" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DPLAN_DEPLOYMENT": ""}, "DPLAN_DEPLOYMENT is set but empty"),
        ({"DPLAN_DEPLOYMENT": "   "}, "DPLAN_DEPLOYMENT is set but blank"),
        ({"DPLAN_DEPLOYMENT": "my plans"}, "must not contain spaces or control characters"),
        ({"DPLAN_DEPLOYMENT": " dplan"}, "must not contain spaces"),
        ({"DPLAN_DEPLOYMENT": "dplan\t"}, "must not contain spaces"),
        ({"DPLAN_DEPLOYMENT": "dplan.prod"}, "DPLAN_DEPLOYMENT must not contain '.'"),
        ({"DPLAN_DEPLOYMENT": "dplan:prod"}, "DPLAN_DEPLOYMENT must not contain ':'"),
        ({"DPLAN_DEPLOYMENT": "__dplan"}, "must not start with '__'"),
        ({"DPLAN_DEPLOYMENT": "d" * (MAX_NAME_LENGTH + 1)}, "at most 100 characters, got 101"),
        ({"DPLAN_DEPLOYMENT": "bad\udcff"}, "must be valid UTF-8"),
        ({"DPLAN_DEPLOYMENT": "dplan", "DPLAN_BUILD_ID": ""}, "DPLAN_BUILD_ID is set but empty"),
        ({"DPLAN_DEPLOYMENT": "dplan", "DPLAN_BUILD_ID": "1.0 rc"}, "must not contain spaces"),
        ({"DPLAN_DEPLOYMENT": "dplan", "DPLAN_BUILD_ID": "__1"}, "must not start with '__'"),
        (
            {"DPLAN_DEPLOYMENT": "dplan", "DPLAN_BUILD_ID": "b" * (MAX_NAME_LENGTH + 1)},
            "DPLAN_BUILD_ID must be at most 100 characters",
        ),
        ({"DPLAN_BUILD_ID": "1.0"}, "DPLAN_BUILD_ID is set without DPLAN_DEPLOYMENT"),
    ],
)
def test_a_value_the_server_would_refuse_is_refused_saying_why(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        Settings.from_env(env)


def test_what_the_server_accepts_is_accepted() -> None:
    longest = "d" * MAX_NAME_LENGTH
    for name, build in [("dplan", "1.0.0"), ("prod_eu-1", "0.2.0-1a2b3c4d5e6f"), (longest, "é")]:
        settings = Settings.from_env({"DPLAN_DEPLOYMENT": name, "DPLAN_BUILD_ID": build})
        assert (settings.deployment, settings.build_id) == (name, build)
