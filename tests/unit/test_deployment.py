"""The deployment (``Dockerfile``, ``docker-compose.yml``, ``deploy/``), read as an engine
would read it, since none runs here: no Docker engine and no image registry on these
machines, so an image that cannot do the work or a stack on a retired image would pass
every other test.

What can be checked by reading is checked against the code it must agree with: the
packages the worker runs, the variables ``Settings`` and Temporal's environment
configuration read (asked of them, not listed here), ``dplan setup``'s output, the worker's
shutdown grace period, and the ports and volumes ``docs/operating.md`` names.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import ItemsView, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from durable_plans.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
OPERATING = REPO / "docs" / "operating.md"
SETUP_SOURCE = REPO / "durable_plans" / "cli" / "list_command.py"

# What the worker runs besides Python: git for every plan's workspace, bubblewrap for the
# tool sandbox.
WORKER_PACKAGES = {"git", "bubblewrap"}
OUR_PREFIXES = ("DPLAN_", "TEMPORAL_")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|HEADERS", re.IGNORECASE)
_INTERPOLATION = re.compile(r"^\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}$")


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def dockerfile(path: Path = DOCKERFILE) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in path.read_text("utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text:
            keyword, _, arguments = text.partition(" ")
            instructions.append(Instruction(keyword.upper(), arguments.strip()))
    return instructions


def image_env(instructions: list[Instruction]) -> dict[str, str]:
    """What the image's ``ENV`` instructions set (``KEY=VALUE`` form)."""
    env: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "ENV":
            for word in shlex.split(ins.arguments):
                name, sep, value = word.partition("=")
                assert sep, f"ENV {ins.arguments!r}: use the KEY=VALUE form"
                env[name] = value
    return env


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text("utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def services() -> dict[str, dict[str, Any]]:
    found = compose()["services"]
    assert isinstance(found, dict)
    return found


def built_here(service: Mapping[str, Any]) -> bool:
    """Whether the service runs the image built from this repository's Dockerfile."""
    build = service.get("build")
    if build is None:
        return False
    context = build if isinstance(build, str) else build.get("context", ".")
    name = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    return (REPO / context / name).resolve() == DOCKERFILE.resolve()


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.partition("=") for item in env)
        return {name: value for name, _, value in pairs}
    return {name: "" if value is None else str(value) for name, value in env.items()}


def resolved(value: str) -> str:
    """A compose value with a ``${NAME:-default}`` interpolation taken at its default, as
    on a host that sets nothing."""
    match = _INTERPOLATION.match(value)
    return (match.group("default") or "") if match else value


def command_text(service: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if isinstance(value, list):
            parts.extend(str(v) for v in value)
        elif value is not None:
            parts.append(str(value))
    return " ".join(parts)


def mounts(service: Mapping[str, Any]) -> dict[str, str]:
    """Each mount's target in the container and its source (a volume name or host path)."""
    found: dict[str, str] = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            found[str(volume["target"])] = str(volume.get("source", ""))
        else:
            source, _, rest = str(volume).partition(":")
            if not rest:  # an anonymous volume: only the target
                found[source] = ""
            else:
                found[rest.split(":")[0]] = source
    return found


def published_ports(service: Mapping[str, Any]) -> dict[int, int]:
    """Host port -> container port."""
    found: dict[int, int] = {}
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            found[int(port["published"])] = int(port["target"])
        else:
            parts = str(port).split(":")
            found[int(parts[-2])] = int(parts[-1].split("/")[0])
    return found


def depends_on(service: Mapping[str, Any]) -> dict[str, str]:
    """Each dependency and the condition the service waits for."""
    found = service.get("depends_on") or {}
    if isinstance(found, list):
        return dict.fromkeys(found, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in found.items()}


def image_and_tag(image: str) -> tuple[str, str | None]:
    name = image.partition("@")[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = name.rsplit(":", 1)
        return repo, tag
    return name, None


def worker_name() -> str:
    """The service that runs ``dplan-worker``: its own command, or the image's."""
    image_cmd = " ".join(ins.arguments for ins in dockerfile() if ins.keyword == "CMD")
    found = [
        name
        for name, service in services().items()
        if built_here(service) and "dplan-worker" in (command_text(service) or image_cmd)
    ]
    assert len(found) == 1, f"one service runs dplan-worker, found {found}"
    return found[0]


def section(path: Path, heading: str) -> str:
    """The text under ``## heading`` up to the next heading of that level."""
    text = path.read_text("utf-8")
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"{path.name} has no '## {heading}' section"
    return match.group(1)


def table(text: str, first_column: str) -> list[dict[str, str]]:
    """The rows of the markdown table whose first header cell is ``first_column``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_column:
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                values = [c.strip() for c in row.strip().strip("|").split("|")]
                rows.append(dict(zip(cells, values, strict=True)))
            return rows
    raise AssertionError(f"no table with a '{first_column}' column")


def code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# --------------------------------------------------------------------------- what is read


class RecordingEnv(Mapping[str, str]):
    """An environment that notes every name looked up in it. A scan of all its items (as
    ``connection.py`` hands every ``TEMPORAL_*`` to Temporal's loader) looks none up."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.asked.add(name)
        return name in self._values

    def get(self, name: str, default: Any = None) -> Any:
        self.asked.add(name)
        return self._values.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def items(self) -> ItemsView[str, str]:
        return self._values.items()

    def __len__(self) -> int:
        return len(self._values)


def settings_reads(env: Mapping[str, str], home: Path) -> set[str]:
    """The names ``Settings.from_env`` looks up given ``env`` (no Temporal config file)."""
    recording = RecordingEnv({**env, "XDG_CONFIG_HOME": str(home)})
    Settings.from_env(recording)
    return recording.asked


def envconfig_reads(name: str, value: str) -> bool:
    """Whether Temporal's environment configuration (``temporalio.envconfig``, what
    ``connection.py`` resolves the connection with) takes ``name`` into account: setting
    it changes the profile, or is refused."""
    from temporalio.envconfig import ClientConfigProfile

    unset = ClientConfigProfile.load(disable_file=True, override_env_vars={})
    try:
        given = ClientConfigProfile.load(
            disable_file=True, override_env_vars={name: value or "probe-value"}
        )
    except Exception:
        return True  # refused: it was read
    return given.to_dict() != unset.to_dict()


# --------------------------------------------------------------------------- the image


def test_the_image_installs_what_the_worker_runs() -> None:
    installs = [
        ins.arguments
        for ins in dockerfile()
        if ins.keyword == "RUN" and re.search(r"apt-get\s+install", ins.arguments)
    ]
    assert installs, "the Dockerfile installs no system package (git, bubblewrap)"
    packages: set[str] = set()
    for run in installs:
        for step in re.split(r"&&|;", run):
            words = step.split()
            if words[:2] == ["apt-get", "install"]:
                assert "--no-install-recommends" in words, step
                packages.update(w for w in words[2:] if not w.startswith("-"))
        assert re.search(r"apt-get\s+update", run), "apt-get update in the same RUN"
        assert "rm -rf /var/lib/apt/lists" in run, "the apt lists removed in the same RUN"
    assert packages >= WORKER_PACKAGES, f"missing: {sorted(WORKER_PACKAGES - packages)}"


def test_the_image_runs_dplan_worker_as_a_user_of_its_own() -> None:
    instructions = dockerfile()
    cmd = [ins for ins in instructions if ins.keyword == "CMD"]
    assert cmd and cmd[-1].arguments == '["dplan-worker"]'
    assert not [ins for ins in instructions if ins.keyword == "ENTRYPOINT"]
    users = [ins.arguments for ins in instructions if ins.keyword == "USER"]
    assert users, "the worker runs as root"
    assert users[-1].split(":")[0] not in {"root", "0"}


def test_the_image_keeps_its_state_and_workspace_on_volumes() -> None:
    instructions = dockerfile()
    env = image_env(instructions)
    declared: set[str] = set()
    for ins in instructions:
        if ins.keyword == "VOLUME":
            text = ins.arguments
            declared.update(yaml.safe_load(text) if text.startswith("[") else text.split())
    for name in ("DPLAN_STATE_DIR", "DPLAN_WORKSPACE"):
        assert env.get(name, "").startswith("/"), f"the image sets {name} to an absolute path"
        assert env[name] in declared, f"{name}={env[name]} is not a VOLUME"


def test_every_image_is_pinned_to_a_version() -> None:
    bases = [ins.arguments.split()[0] for ins in dockerfile() if ins.keyword == "FROM"]
    images = [
        (name, service["image"])
        for name, service in services().items()
        if "image" in service and not built_here(service)
    ]
    for where, image in [("Dockerfile", base) for base in bases] + images:
        _repo, tag = image_and_tag(image)
        assert tag is not None, f"{where}: {image} names no tag"
        assert tag != "latest" and re.match(r"\d", tag), f"{where}: {image} is no version"
        assert "$" not in image, f"{where}: {image} takes its tag from the host"


# --------------------------------------------------------------------------- the stack


def test_the_server_is_set_up_as_temporal_now_advises() -> None:
    """Temporal's example for a self-hosted server on PostgreSQL
    (temporalio/samples-server, compose/docker-compose-postgres.yml): the server image, the
    schema created by admin-tools' temporal-sql-tool before it starts, the namespace
    created once it answers. auto-setup is deprecated and no longer built."""
    stack = services()
    images = {name: image_and_tag(s.get("image", "")) for name, s in stack.items()}
    retired = [name for name, (repo, _) in images.items() if repo.endswith("auto-setup")]
    assert not retired, f"temporalio/auto-setup is deprecated: {retired}"

    servers = [name for name, (repo, _) in images.items() if repo == "temporalio/server"]
    assert len(servers) == 1, "one temporalio/server service"
    server = servers[0]
    server_tag = images[server][1]

    def runs(name: str) -> str:
        """The service's command and the scripts it runs from this repository."""
        service = stack[name]
        text = command_text(service)
        for target, source in mounts(service).items():
            if source.startswith("./") and target in text:
                text += "\n" + (REPO / source).read_text("utf-8")
        return text

    admin = [name for name, (repo, _) in images.items() if repo == "temporalio/admin-tools"]
    assert admin, "no temporalio/admin-tools service"
    for name in admin:
        assert images[name][1] == server_tag, f"{name}: admin-tools and server differ"

    schema = [name for name in admin if "temporal-sql-tool" in runs(name)]
    assert len(schema) == 1, "one admin-tools service sets up the schema"
    assert re.search(r"update-schema", runs(schema[0]))
    assert depends_on(stack[server]).get(schema[0]) == "service_completed_successfully"
    assert depends_on(stack[schema[0]]).get("postgres") == "service_healthy"

    namespace = [name for name in admin if "operator namespace create" in runs(name)]
    assert len(namespace) == 1, "one admin-tools service creates the namespace"
    assert depends_on(stack[namespace[0]]).get(server) == "service_healthy"
    assert "healthcheck" in stack[server]

    ui = [name for name, (repo, _) in images.items() if repo == "temporalio/ui"]
    assert len(ui) == 1, "Temporal Web"


def test_the_search_attributes_are_registered_before_the_worker_starts() -> None:
    stack = services()
    setup = [
        name
        for name, service in stack.items()
        if built_here(service) and "dplan setup" in command_text(service)
    ]
    assert len(setup) == 1, "one service built from the Dockerfile runs `dplan setup`"
    worker = stack[worker_name()]
    assert depends_on(worker).get(setup[0]) == "service_completed_successfully"

    # It runs once the namespace exists...
    waits_for = depends_on(stack[setup[0]])
    creates_namespace = [
        name
        for name, condition in waits_for.items()
        if condition == "service_completed_successfully"
        and "namespace" in (command_text(stack[name]) + name)
    ]
    assert creates_namespace, "dplan setup waits for the namespace to be created"
    # ...and ends on what `dplan setup` says when every attribute is listed.
    said = re.findall(r'"([^"]+)"\*\)', command_text(stack[setup[0]]))
    assert said, "the setup service decides on dplan setup's output"
    source = SETUP_SOURCE.read_text("utf-8")
    for text in said:
        assert f'f"{text}' in source or f'"{text}' in source, f"dplan setup never says {text!r}"


def test_every_variable_the_image_is_given_is_one_it_reads(tmp_path: Path) -> None:
    for name, service in services().items():
        if not built_here(service):
            continue
        env = {key: resolved(value) for key, value in environment(service).items()}
        ours = sorted(key for key in env if key.startswith(OUR_PREFIXES))
        assert ours, f"{name} sets no DPLAN_/TEMPORAL_ variable"
        settings = settings_reads(env, tmp_path)
        unread = [key for key in ours if key not in settings and not envconfig_reads(key, env[key])]
        assert not unread, f"{name} sets variables nothing reads: {unread}"


def test_what_reads_variables_can_say_no(tmp_path: Path) -> None:
    """The check above can fail: a name neither reader knows is not read."""
    env = {"TEMPORAL_ADDRESS": "temporal:7233", "DPLAN_NO_SUCH_SETTING": "1"}
    settings = settings_reads(env, tmp_path)
    assert "DPLAN_METRICS_PORT" in settings
    assert "DPLAN_NO_SUCH_SETTING" not in settings
    assert envconfig_reads("TEMPORAL_ADDRESS", "temporal:7233")
    assert envconfig_reads("TEMPORAL_NAMESPACE", "default")
    assert not envconfig_reads("TEMPORAL_NO_SUCH_SETTING", "1")


def test_keys_come_from_the_host_environment_only() -> None:
    for name, service in services().items():
        if not built_here(service):
            continue
        for key, value in environment(service).items():
            if not _SECRET.search(key):
                continue
            match = _INTERPOLATION.match(value)
            assert match and match.group("name") == key and not match.group("default"), (
                f"{name}: {key} must be ${{{key}:-}} (from the host), not {value!r}"
            )


def test_the_worker_keeps_its_state_and_workspace_on_volumes() -> None:
    stack = compose()
    worker = stack["services"][worker_name()]
    env = {**image_env(dockerfile()), **environment(worker)}
    targets = mounts(worker)
    named = set(stack.get("volumes") or {})

    def on_a_volume(path: str) -> bool:
        p = PurePosixPath(path)
        return any(
            (p == PurePosixPath(target) or PurePosixPath(target) in p.parents) and source in named
            for target, source in targets.items()
        )

    for key in ("DPLAN_STATE_DIR", "DPLAN_WORKSPACE"):
        assert env.get(key, "").startswith("/"), f"the worker's {key} is not set"
        assert on_a_volume(env[key]), f"{key}={env[key]} is on no named volume"
    store = env.get("DPLAN_SESSION_STORE", "")
    if store and "://" not in store:  # a SQLite file
        assert on_a_volume(store), f"the session store {store} is on no named volume"


def test_the_worker_is_given_time_to_stop_politely() -> None:
    from durable_plans.worker import DEFAULT_GRACE_PERIOD

    worker = services()[worker_name()]
    raw = str(worker.get("stop_grace_period", "10s"))  # Docker's default
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", raw)
    assert match and raw, f"stop_grace_period {raw!r}"
    given = timedelta(minutes=int(match.group(1) or 0), seconds=int(match.group(2) or 0))
    assert given > DEFAULT_GRACE_PERIOD, (
        f"stop_grace_period {raw} leaves LLM calls in flight less than the worker's "
        f"{DEFAULT_GRACE_PERIOD.total_seconds():g} s grace period"
    )


def test_the_worker_healthcheck_asks_its_metrics_port() -> None:
    worker = services()[worker_name()]
    check = worker.get("healthcheck")
    assert check, "the worker has no healthcheck"
    test = " ".join(check["test"]) if isinstance(check["test"], list) else check["test"]
    assert "DPLAN_METRICS_PORT" in test and "/metrics" in test
    port = int(environment(worker)["DPLAN_METRICS_PORT"])
    assert port in published_ports(worker).values(), "the metrics port is published"


# --------------------------------------------------------------------------- the docs


def test_the_docs_name_the_services_ports_and_volumes_the_stack_has() -> None:
    text = section(OPERATING, "Deploying")
    stack = compose()
    listed = table(text, "service")
    assert {code(row["service"])[0] for row in listed} == set(stack["services"])
    for row in listed:
        name = code(row["service"])[0]
        service = stack["services"][name]
        if built_here(service):
            assert "Dockerfile" in row["image"], name
        else:
            assert code(row["image"]) == [service["image"]], name
        ports = sorted(int(p) for p in re.findall(r"\d+", row["port"]))
        assert ports == sorted(published_ports(service)), f"{name}: ports"

    volumes = table(text, "volume")
    declared = stack.get("volumes") or {}
    assert {code(row["volume"])[0] for row in volumes} == set(declared)
    for row in volumes:
        name = code(row["volume"])[0]
        mounted = {
            (service, target)
            for service, spec in stack["services"].items()
            for target, source in mounts(spec).items()
            if source == name
        }
        said = {(code(row["service"])[0], code(row["mounted at"])[0])}
        assert said == mounted, f"volume {name}"


@pytest.mark.parametrize("doc", sorted((REPO / "docs").glob("*.md")), ids=lambda p: p.name)
def test_no_doc_names_a_port_the_stack_does_not_publish(doc: Path) -> None:
    published = {port for s in services().values() for port in published_ports(s)}
    for line in doc.read_text("utf-8").splitlines():
        if "compose" not in line:
            continue
        for port in re.findall(r"localhost:(\d+)", line):
            assert int(port) in published, f"{doc.name}: {line.strip()}"
