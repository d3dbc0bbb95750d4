"""Tool declarations (JSON schemas for the model) and the one entry point that runs them.

A tool call is written by a model, so everything about it may be wrong: the name, the
JSON, the field names and types. None of that is our failure, and none of it may crash
the activity or be retried by Temporal (a retry would fail the same way): every such
problem comes back as a ``ToolResult`` whose content starts with ``error:`` and says
exactly what to fix, so the model can correct itself on the next turn. Only bugs in a
handler (anything other than ``ToolRefused`` or ``OSError``) propagate.

Each tool's JSON schema is generated from the pydantic model that validates its
arguments, so what the model is told and what is enforced cannot drift apart.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from durable_plans.activities.workspace import MAX_PATH_CHARS, ToolRefused, Workspace

ContextT = TypeVar("ContextT")
ArgsT = TypeVar("ArgsT", bound=BaseModel)

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-style providers accept


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool; ``parameters`` is a JSON schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    """The text that goes back to the model as the tool message, and whether it worked."""

    ok: bool
    content: str

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(False, f"error: {message}")


Handler: TypeAlias = Callable[[ArgsT, ContextT], ToolResult | Awaitable[ToolResult]]


class ToolArgs(BaseModel):
    """Base for argument models: unknown fields are an error the model gets to see."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def openai_tool_schemas(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The ``tools=[...]`` list of an OpenAI-compatible chat request (copies, not views)."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": copy.deepcopy(spec.parameters),
            },
        }
        for spec in specs
    ]


# --------------------------------------------------------------------------- schemas


def schema_for(model: type[BaseModel]) -> dict[str, Any]:
    """A compact JSON schema for a tool's arguments.

    Pydantic's titles are noise in a prompt, and ``X | None = None`` is shown as plain
    ``X``: for the model, leaving the field out is how to say "none".
    """
    cleaned = _clean_schema(model.model_json_schema())
    assert isinstance(cleaned, dict)
    return cleaned


def _clean_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_clean_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: _clean_schema(sub) for name, sub in value.items()}
        elif key in ("default", "enum", "const", "examples"):
            out[key] = value
        else:
            out[key] = _clean_schema(value)
    any_of = out.get("anyOf")
    null = {"type": "null"}
    if (
        isinstance(any_of, list)
        and len(any_of) == 2
        and null in any_of
        and "default" in out
        and out["default"] is None
    ):
        (other,) = [s for s in any_of if s != null]
        del out["anyOf"], out["default"]
        out = {**other, **out}
    return out


def _expected(prop: dict[str, Any]) -> str:
    """A field's schema in words, for error messages: 'an integer ≥ 1'."""
    kind = prop.get("type")
    words = {
        "string": "a string",
        "integer": "an integer",
        "number": "a number",
        "boolean": "true or false",
        "array": "an array",
        "object": "an object",
    }.get(kind if isinstance(kind, str) else "", "a value matching its schema")
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None:
        words += f" from {low} to {high}"
    elif low is not None:
        words += f" ≥ {low}"
    elif high is not None:
        words += f" ≤ {high}"
    if prop.get("minLength") == 1:
        words = "a non-empty string"
    return words


def _got(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        text = json.dumps(value if len(value) <= 40 else value[:40] + "…", ensure_ascii=False)
        return f"the string {text}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _clip(text: str, limit: int = 80) -> str:
    shown = text if text.isprintable() else repr(text)[1:-1]
    return shown if len(shown) <= limit else shown[:limit] + "…"


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class _Entry:
    spec: ToolSpec
    args_model: type[BaseModel]
    handler: Callable[[Any, Any], ToolResult | Awaitable[ToolResult]]


class ToolRegistry(Generic[ContextT]):
    """Tools by name: spec, argument model and handler, run against a context.

    The context is whatever the handlers need (a ``Workspace`` for the file tools; later
    a richer object for sub-agents). Handlers may be sync or async: ``execute`` awaits
    what needs awaiting, ``execute_sync`` serves registries of sync handlers from a
    worker thread.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def register(
        self,
        name: str,
        description: str,
        args_model: type[ArgsT],
        handler: Handler[ArgsT, ContextT],
    ) -> ToolSpec:
        if not _TOOL_NAME.fullmatch(name):
            raise ValueError(f"tool name {name!r} must match {_TOOL_NAME.pattern}")
        if name in self._entries:
            raise ValueError(f"tool {name!r} is already registered")
        spec = ToolSpec(name=name, description=description, parameters=schema_for(args_model))
        self._entries[name] = _Entry(spec=spec, args_model=args_model, handler=handler)
        return spec

    @property
    def names(self) -> list[str]:
        return sorted(self._entries)

    def specs(self, names: Iterable[str] | None = None) -> list[ToolSpec]:
        """Specs in the order asked for (all, in registration order, by default).

        Unknown names are configuration errors (an agent file), not model errors: raise.
        """
        if names is None:
            return [entry.spec for entry in self._entries.values()]
        wanted = list(names)
        unknown = [n for n in wanted if n not in self._entries]
        if unknown:
            raise KeyError(
                f"unknown tools {', '.join(unknown)}; registered: {', '.join(self.names)}"
            )
        return [self._entries[n].spec for n in wanted]

    async def execute(
        self,
        name: str,
        arguments: str,
        context: ContextT,
        *,
        allowed: Collection[str] | None = None,
    ) -> ToolResult:
        """Run one tool call; never raises for anything the model can cause."""
        prepared = self._prepare(name, arguments, allowed)
        if isinstance(prepared, ToolResult):
            return prepared
        entry, args = prepared
        try:
            result = entry.handler(args, context)
            if isinstance(result, ToolResult):
                return result
            return await result
        except (ToolRefused, OSError) as exc:
            return _refusal(exc)

    def parse(
        self, name: str, arguments: str, *, allowed: Collection[str] | None = None
    ) -> ToolResult | BaseModel:
        """Validate a call without running it, for tools the workflow carries out itself
        (sub-agents): the model gets the same ``error:`` answers as for any tool."""
        prepared = self._prepare(name, arguments, allowed)
        return prepared if isinstance(prepared, ToolResult) else prepared[1]

    def execute_sync(
        self,
        name: str,
        arguments: str,
        context: ContextT,
        *,
        allowed: Collection[str] | None = None,
    ) -> ToolResult:
        """``execute`` for sync handlers, callable from a thread without an event loop."""
        prepared = self._prepare(name, arguments, allowed)
        if isinstance(prepared, ToolResult):
            return prepared
        entry, args = prepared
        try:
            result = entry.handler(args, context)
        except (ToolRefused, OSError) as exc:
            return _refusal(exc)
        if isinstance(result, ToolResult):
            return result
        if inspect.iscoroutine(result):
            result.close()  # never awaited: close it so it does not warn at collection
        raise TypeError(f"tool {name!r} has an async handler; call ToolRegistry.execute")

    def _prepare(
        self, name: str, arguments: str, allowed: Collection[str] | None
    ) -> ToolResult | tuple[_Entry, BaseModel]:
        available = [n for n in self.names if allowed is None or n in allowed]
        entry = self._entries.get(name)
        if entry is None or name not in available:
            listed = ", ".join(available) or "none"
            if entry is None:
                return ToolResult.error(f"unknown tool '{_clip(name)}'; available tools: {listed}")
            return ToolResult.error(
                f"tool '{name}' is not available to this agent; available tools: {listed}"
            )
        parsed = _parse_arguments(entry.spec, arguments)
        if isinstance(parsed, ToolResult):
            return parsed
        try:
            return entry, entry.args_model.model_validate(parsed)
        except ValidationError as exc:
            return ToolResult.error(_describe_validation(entry.spec, exc))


def _refusal(exc: ToolRefused | OSError) -> ToolResult:
    if isinstance(exc, ToolRefused):
        return ToolResult.error(str(exc))
    return ToolResult.error(f"{type(exc).__name__}: {exc}")


def _parse_arguments(spec: ToolSpec, arguments: str) -> dict[str, Any] | ToolResult:
    name = spec.name
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        return ToolResult.error(
            f"arguments for {name} are not valid JSON (line {exc.lineno}, column "
            f"{exc.colno}): {exc.msg}; send one JSON object, e.g. {_example(spec)}"
        )
    except (ValueError, RecursionError) as exc:  # e.g. a 5000-digit number, deep nesting
        return ToolResult.error(f"arguments for {name} could not be read as JSON: {exc}")
    if not isinstance(value, dict):
        return ToolResult.error(
            f"arguments for {name} must be a JSON object, got {_json_kind(value)}; "
            f"e.g. {_example(spec)}"
        )
    return value


def _example(spec: ToolSpec) -> str:
    """A minimal call showing the shape: the required fields with placeholder values."""
    props: dict[str, Any] = spec.parameters.get("properties", {})
    placeholders = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    example = {
        field: placeholders.get(props.get(field, {}).get("type", ""), "...")
        for field in spec.parameters.get("required", [])
    }
    return json.dumps(example)


def _describe_validation(spec: ToolSpec, exc: ValidationError) -> str:
    props: dict[str, Any] = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", []))
    problems: list[str] = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err["loc"]) or "(arguments)"
        top = str(err["loc"][0]) if err["loc"] else ""
        prop = props.get(top, {})
        if err["type"] == "missing":
            problems.append(f"missing required field '{field}' ({_expected(prop)})")
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown field '{_clip(field, 40)}'")
        else:
            problems.append(
                f"field '{field}' must be {_expected(prop)}, got {_got(err['input'])} "
                f"({err['msg']})"
            )
    fields = ", ".join(
        f"{n} ({_expected(p)}{', required' if n in required else ''})" for n, p in props.items()
    )
    return (
        f"invalid arguments for {spec.name}: {'; '.join(problems)}. "
        f"Expected fields: {fields or 'none'}"
    )


# --------------------------------------------------------------------------- workspace tools


_PATH_HELP = "Path relative to the workspace root, e.g. 'src/main.py'. No absolute paths."


class ReadFileArgs(ToolArgs):
    path: str = Field(description=_PATH_HELP, max_length=MAX_PATH_CHARS)
    offset_line: int = Field(default=1, ge=1, description="First line to return (1-based).")
    max_lines: int | None = Field(
        default=None, ge=1, description="How many lines to return; omit for the rest."
    )


class WriteFileArgs(ToolArgs):
    path: str = Field(description=_PATH_HELP, min_length=1, max_length=MAX_PATH_CHARS)
    content: str = Field(description="The complete new text of the file (UTF-8).")


class ListDirArgs(ToolArgs):
    path: str = Field(
        default=".",
        max_length=MAX_PATH_CHARS,
        description="Directory relative to the workspace root; '.' is the root.",
    )


class SearchFilesArgs(ToolArgs):
    pattern: str = Field(
        min_length=1, max_length=1000, description="Text to find (or a regex if regex=true)."
    )
    path: str = Field(
        default=".", max_length=MAX_PATH_CHARS, description="Directory or file to search in."
    )
    glob: str = Field(
        default="*",
        max_length=200,
        description="Only files whose relative path or name matches, e.g. '*.py'.",
    )
    regex: bool = Field(default=False, description="Treat pattern as a Python regex.")
    max_results: int = Field(default=200, ge=1, le=1000, description="Most matches returned.")


_READ_FILE_DOC = (
    "Read a UTF-8 text file from the workspace. Files over 1 MiB must be read in parts "
    "with offset_line and max_lines; output is capped at 256 KiB with a note saying where "
    "to continue. Binary files are refused."
)
_WRITE_FILE_DOC = (
    "Create or completely replace a text file in the workspace (at most 1 MiB); missing "
    "parent directories are created. Returns the number of bytes written."
)
_LIST_DIR_DOC = (
    "List a workspace directory: subdirectories first (ending in '/'), then files with "
    "their sizes in bytes; hidden entries included; at most 500 entries."
)
_SEARCH_FILES_DOC = (
    "Search text files under a workspace path for a literal string (or a regex) and "
    "return matching lines as 'path:line: text'. Skips .git, binary files and files over "
    "1 MiB."
)


def register_workspace_tools(
    registry: ToolRegistry[ContextT], workspace_of: Callable[[ContextT], Workspace]
) -> None:
    """Add the four file tools to ``registry``, whose context must lead to a Workspace.

    Registries with a richer context (sub-agent tools) reuse the file tools this way.
    """

    def read_file(args: ReadFileArgs, ctx: ContextT) -> ToolResult:
        ws = workspace_of(ctx)
        return ToolResult(True, ws.read_file(args.path, args.offset_line, args.max_lines))

    def write_file(args: WriteFileArgs, ctx: ContextT) -> ToolResult:
        return ToolResult(True, workspace_of(ctx).write_file(args.path, args.content))

    def list_dir(args: ListDirArgs, ctx: ContextT) -> ToolResult:
        return ToolResult(True, workspace_of(ctx).list_dir(args.path))

    def search_files(args: SearchFilesArgs, ctx: ContextT) -> ToolResult:
        ws = workspace_of(ctx)
        text = ws.search_files(args.pattern, args.path, args.glob, args.regex, args.max_results)
        return ToolResult(True, text)

    registry.register("read_file", _READ_FILE_DOC, ReadFileArgs, read_file)
    registry.register("write_file", _WRITE_FILE_DOC, WriteFileArgs, write_file)
    registry.register("list_dir", _LIST_DIR_DOC, ListDirArgs, list_dir)
    registry.register("search_files", _SEARCH_FILES_DOC, SearchFilesArgs, search_files)


def _workspace_itself(workspace: Workspace) -> Workspace:
    return workspace


_WORKSPACE_REGISTRY: ToolRegistry[Workspace] = ToolRegistry()
register_workspace_tools(_WORKSPACE_REGISTRY, _workspace_itself)

WORKSPACE_TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in _WORKSPACE_REGISTRY.specs()}


def execute_workspace_tool(name: str, arguments: str, workspace: Workspace) -> ToolResult:
    """Run one file-tool call from a model against ``workspace``; never raises for input."""
    return _WORKSPACE_REGISTRY.execute_sync(name, arguments, workspace)
