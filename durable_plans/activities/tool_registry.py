"""Declaring tools (JSON schemas for the model) and running a model's calls of them.

A tool call is written by a model, so everything about it may be wrong: the name, the
JSON, the field names and types. None of that is our failure, and none of it may crash
the activity or be retried by Temporal (a retry would fail the same way): every such
problem comes back as a ``ToolResult`` whose content starts with ``error:`` and says
exactly what to fix, so the model can correct itself on the next turn. Only bugs in a
handler (anything other than ``ToolRefused`` or ``OSError``) propagate.

Each tool's JSON schema is generated from the pydantic model that validates its
arguments, so what the model is told and what is enforced cannot drift apart. Which
tools exist, and which an agent may call, is :mod:`activities.tool_catalog`'s business:
a registry only knows its own tools.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from durable_plans.activities.file_jail import ToolRefused

ContextT = TypeVar("ContextT")
ArgsT = TypeVar("ArgsT", bound=BaseModel)

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-style providers accept


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool; ``parameters`` is a JSON schema object.

    ``read_only``: the tool only reads the workspace (never told to the model; the
    catalogue says which tools change things).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool = False


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


def clip(text: str, limit: int = 80) -> str:
    """Text from a model, shown in an answer: printable, and cut when it is long."""
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

    The context is whatever the handlers need (a ``FileJail`` for the file tools; later
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
        *,
        read_only: bool = False,
    ) -> ToolSpec:
        if not _TOOL_NAME.fullmatch(name):
            raise ValueError(f"tool name {name!r} must match {_TOOL_NAME.pattern}")
        if name in self._entries:
            raise ValueError(f"tool {name!r} is already registered")
        spec = ToolSpec(
            name=name,
            description=description,
            parameters=schema_for(args_model),
            read_only=read_only,
        )
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

    async def execute(self, name: str, arguments: str, context: ContextT) -> ToolResult:
        """Run one tool call; never raises for anything the model can cause.

        Whether the agent may call ``name`` at all was decided before (the catalogue's
        ``refuse_call``); a name this registry does not hold is answered as unknown.
        """
        prepared = self._prepare(name, arguments)
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

    def parse(self, name: str, arguments: str) -> ToolResult | BaseModel:
        """Validate a call without running it, for tools the workflow carries out itself
        (sub-agents): the model gets the same ``error:`` answers as for any tool."""
        prepared = self._prepare(name, arguments)
        return prepared if isinstance(prepared, ToolResult) else prepared[1]

    def execute_sync(self, name: str, arguments: str, context: ContextT) -> ToolResult:
        """``execute`` for sync handlers, callable from a thread without an event loop."""
        prepared = self._prepare(name, arguments)
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

    def _prepare(self, name: str, arguments: str) -> ToolResult | tuple[_Entry, BaseModel]:
        entry = self._entries.get(name)
        if entry is None:
            return unknown_tool(name, self.names)
        parsed = _parse_arguments(entry.spec, arguments)
        if isinstance(parsed, ToolResult):
            return parsed
        try:
            return entry, entry.args_model.model_validate(parsed)
        except ValidationError as exc:
            return ToolResult.error(_describe_validation(entry.spec, exc))


def unknown_tool(name: str, available: Iterable[str]) -> ToolResult:
    """The answer to a call of a tool that does not exist, listing those that do."""
    listed = ", ".join(available) or "none"
    return ToolResult.error(f"unknown tool '{clip(name)}'; available tools: {listed}")


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
            problems.append(f"unknown field '{clip(field, 40)}'")
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
