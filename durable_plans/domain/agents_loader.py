"""An agents file in, an :class:`~domain.agents.AgentCatalog` out, every problem named.

Agents are configuration (docs/tools.md, "Agents"): a TOML, YAML or JSON file with
one top-level ``agents`` table keyed by agent name overrides fields of the built-ins and
adds new agents::

    [agents.reviewer]                 # a new agent: system_prompt is required
    system_prompt = "You review ..."
    tools = ["list_dir", "read_file", "search_files"]
    max_turns = 8
    model = "openrouter/some/model"   # optional; default: the worker's DPLAN_MODEL
    fallback_models = ["openai/gpt-4o-mini"]  # take over while it fails (docs/models.md)

    [agents.coder]                    # a built-in: fields not given are inherited
    max_turns = 24

    [agents.coder.approval]           # calls of these tools wait for a person
    tools = ["write_file"]            # or "all"; timeout_s = N rejects undecided calls

    [approval]                        # the policy of every agent without its own
    tools = []
    [mcp_servers.git]                 # an MCP server the worker starts (stdio) ...
    command = "mcp-server-git"
    args = ["--repository", "/srv/repo"]
    sandbox = true                    # started in the command sandbox (read_only, network)
    read_only = ["/srv/repo"]
    env = ["GIT_AUTHOR_NAME"]         # names of worker variables passed to it
    timeout_s = 30                    # per call; max_attempts = 3 retries a call
    [mcp_servers.search]              # ... or reaches over streamable HTTP
    url = "https://mcp.example.com/mcp"
    headers = {Authorization = "SEARCH_AUTH"}   # header = worker variable's name

    [agents.debug]
    tools = ["read_file", "write_file", "run_command"]
    mcp = ["git", "search/find"]      # all of git's tools, one of search's
    check = ["python -m unittest"]    # must pass after each final answer (docs/plans.md)
    check_rounds = 3                  # failed rounds before the subtask fails
    [agents.debug.run_command]        # the guarded shell (domain.tools_config)
    allow = ["python", "git"]
    approval_required = true          # default: false in a sandbox (DPLAN_SANDBOX), else true
    network = true                    # sandbox: share the network (default: none)
    read_only = ["/srv/datasets"]      # sandbox: extra paths it may read

The worker reads the file once at start-up; a mistake found there is found before any
plan runs, so, as with plan files (:mod:`domain.plan_loader`), nothing stops at the first
problem: the error lists every one, one line each, prefixed by the file and the agent.
Only :func:`load_agents_file` / :func:`load_catalog` touch the file system;
:func:`parse_agents_data` is pure.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from durable_plans._errors import AgentsFileError, TextFormatError
from durable_plans.domain.agents import (
    APPROVABLE_TOOL_NAMES,
    BUILTIN_CATALOG,
    KNOWN_TOOL_NAMES,
    MAX_TURNS,
    MIN_TURNS,
    AgentCatalog,
    AgentSpec,
)
from durable_plans.domain.approval_rules import ApprovalPolicy, policy_problems
from durable_plans.domain.checks import check_problems, check_rounds_problems
from durable_plans.domain.problems import (
    capped,
    describe,
    explain_error,
    lone_surrogate,
    unknown_field,
    unknown_name,
)
from durable_plans.domain.text_formats import (
    QUOTE_LIMIT,
    one_line,
    parse_json,
    parse_yaml,
    quote,
    read_text_file,
)
from durable_plans.domain.tools_config import (
    ENV_NAME,
    MCP_SERVER_NAME,
    MCP_SERVER_NAME_RULE,
    RUN_COMMAND_TOOL,
    CommandPolicy,
    McpServerConfig,
)

MAX_AGENTS_FILE_BYTES: Final = 1024 * 1024

# Agent names appear in plan files, logs and workflow ids, so they follow the plan-id rule
# (no separators or whitespace), with a shorter limit: they are typed by people.
AGENT_NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
AGENT_NAME_RULE: Final = "use 1-64 of A-Z a-z 0-9 _ . - and start with a letter or digit"

AGENT_FIELDS: Final[tuple[str, ...]] = (
    "system_prompt",
    "tools",
    "max_turns",
    "model",
    "fallback_models",
    "approval",
    "mcp",
    "run_command",
    "context_window",
    "check",
    "check_rounds",
)
"""The settings an agent entry may give (its name is its key)."""

# An agent's context_window below this could not hold a system prompt and a turn.
MIN_CONTEXT_WINDOW: Final = 256

TOP_LEVEL_KEYS: Final[tuple[str, ...]] = ("agents", "approval", "mcp_servers")
"""``agents``; ``approval``, the tool approval policy of every agent without its own; and
``mcp_servers``, the MCP servers the worker may start or reach."""

_FORMATS: Final[Mapping[str, str]] = {
    ".toml": "TOML",
    ".yaml": "YAML",
    ".yml": "YAML",
    ".json": "JSON",
}
_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")
_TOP_LEVEL_LISTING: Final = f"the file holds only {', '.join(map(repr, TOP_LEVEL_KEYS))}"


def is_valid_agent_name(value: str) -> bool:
    """Whether ``value`` may name an agent."""
    return AGENT_NAME_PATTERN.fullmatch(value) is not None


# --------------------------------------------------------------------------- files


def load_catalog(settings_agents_file: Path | None, *, sandboxed: bool = True) -> AgentCatalog:
    """The worker's agents: the built-ins, merged with ``DPLAN_AGENTS``'s file when set.

    ``sandboxed``: commands run in a sandbox (``DPLAN_SANDBOX`` is not ``none``), so an
    agent's ``run_command`` needs no approval unless its table says so."""
    if settings_agents_file is None:
        return BUILTIN_CATALOG
    return load_agents_file(settings_agents_file, sandboxed=sandboxed)


def load_agents_file(path: str | Path, *, sandboxed: bool = True) -> AgentCatalog:
    """Read an agents file (format by suffix) and return the built-ins merged with it.

    Raises AgentsFileError listing every problem, each line starting with ``path``.
    ``sandboxed`` as for :func:`load_catalog`.
    """
    name = str(path)
    p = Path(path)
    fmt = _FORMATS.get(p.suffix.lower())
    if fmt is None:
        got = f"{p.suffix!r}" if p.suffix else "no suffix"
        raise AgentsFileError(
            [f"{name}: unsupported agents file type ({got}); use .toml, .yaml, .yml or .json"]
        )
    try:
        text = read_text_file(
            p, noun="agents file", not_a="an agents file", limit=MAX_AGENTS_FILE_BYTES
        )
    except TextFormatError as err:
        raise AgentsFileError(err.problems) from None
    data = parse_agents_text(text, fmt=fmt, source=name)
    return parse_agents_data(data, source=name, sandboxed=sandboxed)


# --------------------------------------------------------------------------- parsing


def parse_agents_text(text: str, *, fmt: str, source: str) -> Any:
    """Decode agents-file text in ``fmt`` ("TOML", "YAML" or "JSON"); pure.

    Returns whatever the document holds (the shape is checked by parse_agents_data).
    """
    if not text.strip():
        raise AgentsFileError(
            [f"{source}: the file is empty (expected an 'agents' table keyed by agent name)"]
        )
    parsers: Mapping[str, Callable[[str, str], Any]] = {
        "TOML": _parse_toml,
        "YAML": _parse_yaml,
        "JSON": _parse_json,
    }
    try:
        parser = parsers[fmt]
    except KeyError:
        raise ValueError(f"unknown agents file format {fmt!r}") from None
    return parser(text, source)


# tomllib (3.11-3.13) puts the position only in the message: "... (at line 3, column 7)"
# or "... (at end of document)"; 3.14 also sets .msg/.lineno/.colno.
_TOML_POSITION: Final = re.compile(
    r"^(?P<msg>.*?)\s*\(at (?:line (?P<l>\d+), column (?P<c>\d+)|(?P<end>end of document))\)$"
)


def _parse_toml(text: str, source: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = one_line(str(exc))
        match = _TOML_POSITION.match(message)
        if match is None:
            raise AgentsFileError([f"{source}: invalid TOML: {message}"]) from None
        where = (
            "at end of document" if match["end"] else f"at line {match['l']}, column {match['c']}"
        )
        raise AgentsFileError([f"{source}: invalid TOML {where}: {match['msg']}"]) from None
    except RecursionError:
        raise AgentsFileError([f"{source}: invalid TOML: nested too deeply"]) from None


def _parse_json(text: str, source: str) -> Any:
    try:
        return parse_json(text, source)
    except TextFormatError as err:
        raise AgentsFileError(err.problems) from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return parse_yaml(text, source)
    except TextFormatError as err:
        raise AgentsFileError(err.problems) from None


# --------------------------------------------------------------------------- building


def parse_agents_data(
    data: Mapping[str, Any],
    *,
    source: str,
    base: AgentCatalog = BUILTIN_CATALOG,
    sandboxed: bool = True,
) -> AgentCatalog:
    """``base`` merged with the agents described by decoded file data; pure.

    With ``sandboxed`` (commands run in a sandbox: ``DPLAN_SANDBOX`` auto or bwrap), a
    ``run_command`` table without ``approval_required`` needs no approval and is marked
    ``require_sandbox`` (a worker without a sandbox refuses its commands instead of
    running them unconfined); without, it needs a person's approval, as it always did.

    An entry named like an agent of ``base`` overrides it, inheriting every field it does
    not give; any other entry is a new agent and must give ``system_prompt`` (its other
    fields default to no tools, 12 turns, the worker's model). Raises AgentsFileError
    listing every problem, each line prefixed by ``source``.
    """
    if not isinstance(data, Mapping):
        raise AgentsFileError(
            [f"{source}: must be a mapping with an 'agents' table, got {_describe(data)}"]
        )
    problems: list[str] = [
        unknown_field(key, TOP_LEVEL_KEYS, noun="key", listing=_TOP_LEVEL_LISTING)
        for key in data
        if key not in TOP_LEVEL_KEYS
    ]
    specs: list[AgentSpec] = []
    default_approval: ApprovalPolicy | None = None
    if "approval" in data:
        default_approval, approval_problems = _check_approval(data["approval"])
        problems.extend(f"approval{p}" for p in approval_problems)
    servers, server_problems = parse_mcp_servers(data.get("mcp_servers", {}))
    problems.extend(server_problems)
    agents = data.get("agents")
    if "agents" not in data:
        problems.append(
            "missing the 'agents' table (e.g. [agents.reviewer] in TOML, "
            "agents: {reviewer: ...} in YAML)"
        )
    elif not isinstance(agents, Mapping):
        problems.append(f"agents: must be a table keyed by agent name, got {_describe(agents)}")
    else:
        for name, body in agents.items():
            spec, agent_problems = _build_agent(name, body, base)
            problems.extend(agent_problems)
            if spec is not None:
                specs.append(spec)
    known_servers = {s.name for s in servers} | {s.name for s in base.mcp_servers}
    for spec in specs:
        problems.extend(_agent_tool_problems(spec, known_servers))
    if problems:
        raise AgentsFileError(f"{source}: {line}" for line in capped(problems))
    if sandboxed:
        specs = [_unattended(spec) for spec in specs]
    catalog = base.merged(specs)
    if default_approval is not None:
        # The file's top-level ``approval`` is every agent's unless the agent gives its own.
        own = {s.name for s in specs if s.approval is not None}
        catalog = catalog.merged(
            a.model_copy(update={"approval": default_approval})
            for a in catalog.agents
            if a.name not in own
        )
    if not servers:
        return catalog
    return catalog.model_copy(update={"mcp_servers": (*base.mcp_servers, *servers)})


def _unattended(spec: AgentSpec) -> AgentSpec:
    """The approval default with a sandbox in force: none, unless the file asked for it."""
    policy = spec.run_command
    if policy is None or "approval_required" in policy.model_fields_set:
        return spec
    lifted = policy.model_copy(update={"approval_required": False, "require_sandbox": True})
    return spec.model_copy(update={"run_command": lifted})


def _agent_tool_problems(spec: AgentSpec, servers: set[str]) -> list[str]:
    where = _where(spec.name)
    problems = [
        f"{where}: mcp: unknown MCP server {quote(entry.partition('/')[0])} "
        f"(declared: {', '.join(sorted(servers)) or 'none; add an [mcp_servers.NAME] table'})"
        for entry in spec.mcp
        if entry.partition("/")[0] not in servers
    ]
    if RUN_COMMAND_TOOL in spec.tools and (spec.run_command is None or not spec.run_command.allow):
        problems.append(
            f"{where}: tools lists run_command but no program may run; add "
            f'[{where}.run_command] allow = ["python", ...]'
        )
    return problems


def parse_mcp_servers(value: Any) -> tuple[tuple[McpServerConfig, ...], list[str]]:
    """The ``mcp_servers`` table: servers, and problems (``mcp_servers.NAME: ...``)."""
    if not isinstance(value, Mapping):
        return (), [f"mcp_servers: must be a table keyed by server name, got {_describe(value)}"]
    servers: list[McpServerConfig] = []
    problems: list[str] = []
    for name, body in value.items():
        valid = isinstance(name, str) and MCP_SERVER_NAME.fullmatch(name) is not None
        # An invalid name is quoted (escaped): a problem is always one printable line.
        where = f"mcp_servers.{name}" if valid else f"mcp_servers.{quote(name)}"
        if not valid:
            problems.append(f"{where}: invalid server name ({MCP_SERVER_NAME_RULE})")
            continue
        if not isinstance(body, Mapping):
            problems.append(f"{where}: must be a table (command or url), got {_describe(body)}")
            continue
        fields = dict(body)
        before = len(problems)
        for key in ("env",):
            names = fields.get(key, [])
            if not isinstance(names, list) or not all(
                isinstance(n, str) and ENV_NAME.fullmatch(n) for n in names
            ):
                problems.append(f"{where}: {key}: must be a list of environment variable names")
        headers = fields.get("headers", {})
        if not isinstance(headers, Mapping) or not all(
            isinstance(v, str) and ENV_NAME.fullmatch(v) for v in headers.values()
        ):
            problems.append(
                f"{where}: headers: must map header names to environment variable names "
                "(the values stay in the worker's environment)"
            )
        else:
            fields["headers"] = tuple((str(k), v) for k, v in headers.items())
        if len(problems) > before:
            continue
        try:
            servers.append(McpServerConfig.model_validate({**fields, "name": name}))
        except ValidationError as exc:
            problems.extend(
                f"{where}: {explain_error(err, nested=McpServerConfig)}" for err in exc.errors()
            )
    return tuple(servers), problems


def _build_agent(name: Any, body: Any, base: AgentCatalog) -> tuple[AgentSpec | None, list[str]]:
    """One entry of the ``agents`` table: its spec, or the problems (prefixed by where)."""
    if not isinstance(name, str):
        return None, [f"agents: agent name {quote(name)} must be a string"]
    where = _where(name)
    problems: list[str] = []
    if not is_valid_agent_name(name):
        problems.append(f"{where}: invalid agent name {quote(name)} ({AGENT_NAME_RULE})")
    if not isinstance(body, Mapping):
        problems.append(
            f"{where}: must be a table of settings ({', '.join(AGENT_FIELDS)}), "
            f"got {_describe(body)}"
        )
        return None, problems
    values: dict[str, Any] = {}
    for key, value in body.items():
        check = _FIELD_CHECKS.get(key) if isinstance(key, str) else None
        if check is None:
            problems.append(f"{where}: {_unknown_field(key)}")
            continue
        checked, field_problems = check(value)
        problems.extend(f"{where}: {key}{p}" for p in field_problems)
        if not field_problems:
            values[key] = checked
    inherited = base.get(name) if name in base else None
    if inherited is None and "system_prompt" not in body:
        problems.append(
            f"{where}: missing 'system_prompt' (required for a new agent; only "
            f"{', '.join(base.names())} inherit one)"
        )
    if problems:
        return None, problems
    fields = inherited.model_dump() if inherited is not None else {}
    try:
        return AgentSpec.model_validate({**fields, **values, "name": name}), []
    except ValidationError as exc:  # a model rule the checks above do not mirror
        return None, [f"{where}: {explain_error(err, nested=AgentSpec)}" for err in exc.errors()]


# Each check returns the value to use and problem suffixes: ": what is wrong" for the
# field itself, or "[i]: what is wrong" for one element of it.
_Check = Callable[[Any], tuple[Any, list[str]]]


def _suffixes(exc: ValidationError, key: str, model: type[BaseModel]) -> list[str]:
    """The validation errors of field ``key`` (a ``model``) as check suffixes, worded like
    every other problem: ``.timeout_s: must be ...`` or ``: unknown field ...``."""
    return [explain_error(err, key, model).removeprefix(key) for err in exc.errors()]


def _check_system_prompt(value: Any) -> tuple[Any, list[str]]:
    if not isinstance(value, str):
        return None, [f": must be a string, got {_describe(value)}"]
    if not value.strip():
        return None, [": must not be empty"]
    if why := lone_surrogate(value):
        return None, [f": {why}"]
    return value, []


def _check_tools(value: Any) -> tuple[Any, list[str]]:
    if not isinstance(value, list | tuple):
        return None, [f": must be a list of tool names, got {_describe(value)}"]
    problems: list[str] = []
    seen: set[str] = set()
    repeated: dict[str, None] = {}
    for i, tool in enumerate(value):
        if not isinstance(tool, str):
            problems.append(f"[{i}]: must be a string, got {_describe(tool)}")
        elif tool in seen:
            repeated[tool] = None
        elif tool not in KNOWN_TOOL_NAMES:
            problems.append(f": {unknown_name('tool', tool, KNOWN_TOOL_NAMES)}")
        if isinstance(tool, str):
            seen.add(tool)
    problems.extend(f": lists {quote(tool)} more than once" for tool in repeated)
    return tuple(value), problems


def _check_max_turns(value: Any) -> tuple[Any, list[str]]:
    # bool is an int in Python; TOML/YAML ``true`` is never a turn count.
    if isinstance(value, bool) or not isinstance(value, int):
        return None, [f": must be an integer, got {_describe(value)}"]
    if not MIN_TURNS <= value <= MAX_TURNS:
        return None, [f": must be between {MIN_TURNS} and {MAX_TURNS}, got {value}"]
    return value, []


def _check_context_window(value: Any) -> tuple[Any, list[str]]:
    if value is None:
        return None, []
    if isinstance(value, bool) or not isinstance(value, int):
        return None, [f": must be an integer (tokens), got {_describe(value)}"]
    if value < MIN_CONTEXT_WINDOW:
        return None, [f": must be at least {MIN_CONTEXT_WINDOW} tokens, got {value}"]
    return value, []


def _check_model(value: Any) -> tuple[Any, list[str]]:
    # null (YAML/JSON) says "the worker's DPLAN_MODEL", the same as leaving it out of a new
    # agent; it lets an override undo a model set elsewhere.
    if value is None:
        return None, []
    if not isinstance(value, str):
        return None, [f": must be a string (a litellm model name), got {_describe(value)}"]
    if not value.strip():
        return None, [": must not be empty (leave it out to use the worker's DPLAN_MODEL)"]
    if why := lone_surrogate(value):
        return None, [f": {why}"]
    return value, []


def _check_fallback_models(value: Any) -> tuple[Any, list[str]]:
    # null says "the worker's DPLAN_FALLBACK_MODELS"; [] says none, whatever the worker's.
    if value is None:
        return None, []
    if not isinstance(value, list | tuple):
        return None, [f": must be a list of litellm model names, got {_describe(value)}"]
    problems: list[str] = []
    for i, name in enumerate(value):
        if not isinstance(name, str):
            problems.append(
                f"[{i}]: must be a string (a litellm model name), got {_describe(name)}"
            )
        elif not name.strip():
            problems.append(f"[{i}]: must not be empty")
        elif why := lone_surrogate(name):
            problems.append(f"[{i}]: {why}")
    repeated = {n for n in value if isinstance(n, str) and value.count(n) > 1}
    problems.extend(f": lists {quote(n)} more than once" for n in sorted(repeated))
    return (tuple(value), []) if not problems else (None, problems)


def _check_approval(value: Any) -> tuple[Any, list[str]]:
    problems = policy_problems(value, APPROVABLE_TOOL_NAMES)
    if problems:
        return None, problems
    try:
        return ApprovalPolicy.model_validate(value), []
    except ValidationError as exc:  # a rule policy_problems does not mirror
        return None, _suffixes(exc, "approval", ApprovalPolicy)


def _check_mcp(value: Any) -> tuple[Any, list[str]]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return None, [f': must be a list of "server" or "server/tool", got {_describe(value)}']
    return tuple(value), []


def _check_run_command(value: Any) -> tuple[Any, list[str]]:
    if not isinstance(value, Mapping):
        return None, [f": must be a table (allow, timeout_s, ...), got {_describe(value)}"]
    try:
        policy = CommandPolicy.model_validate(dict(value))
    except ValidationError as exc:
        return None, _suffixes(exc, "run_command", CommandPolicy)
    bad = [p for p in policy.allow if not p or "/" in p or p in (".", "..")]
    if bad:
        return None, [f".allow: program names only, not paths: {', '.join(map(quote, bad))}"]
    return policy, []


def _check_check(value: Any) -> tuple[Any, list[str]]:
    checks, problems = check_problems(value)
    return checks, [p if p.startswith("[") else f": {p}" for p in problems]


def _check_check_rounds(value: Any) -> tuple[Any, list[str]]:
    return value, [f": {p}" for p in check_rounds_problems(value)]


_FIELD_CHECKS: Final[Mapping[str, _Check]] = {
    "check": _check_check,
    "check_rounds": _check_check_rounds,
    "mcp": _check_mcp,
    "run_command": _check_run_command,
    "system_prompt": _check_system_prompt,
    "tools": _check_tools,
    "max_turns": _check_max_turns,
    "context_window": _check_context_window,
    "model": _check_model,
    "fallback_models": _check_fallback_models,
    "approval": _check_approval,
}


# --------------------------------------------------------------------------- wording


def _where(name: str) -> str:
    """The entry's path as it would be written in TOML: agents.coder, agents."my agent"."""
    if _BARE_KEY.fullmatch(name):
        return f"agents.{name}"
    quoted = json.dumps(name[:QUOTE_LIMIT], ensure_ascii=False)
    # Keep the line one printable line: a lone surrogate, or a character such as U+0085 or
    # U+2028 that json leaves raw but splitlines() breaks on, is written escaped.
    if lone_surrogate(quoted) or not quoted.isprintable():
        quoted = json.dumps(name[:QUOTE_LIMIT])
    return f"agents.{quoted}"


def _unknown_field(key: Any) -> str:
    if key == "name":
        return "unknown field 'name' (an agent's name is its key, e.g. [agents.reviewer])"
    return unknown_field(key, AGENT_FIELDS)


def _describe(value: Any) -> str:
    """How a value reads in a problem line, in terms common to TOML, YAML and JSON."""
    return describe(value, mapping="a table")
