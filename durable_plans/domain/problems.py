"""How a rejected input is worded: one line per problem, naming where and what.

Plan files, agents files and the workflow inputs other programs send are read by people
who want the whole list of what is wrong at once, each line with a path they can find
(``subtasks[1].depends_on[0]: must be a string, got 1``) and, for a typo, the name they
probably meant. Every loader words its problems through this module, so a mistake reads
the same wherever it is made; each loader keeps only its own rules.

Pure and deterministic (standard library and pydantic): the loaders run inside workflow
code too.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import cache
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from durable_plans._errors import ProblemsError
from durable_plans.domain.text_formats import one_line, quote

__all__ = [
    "MAX_REPORTED_PROBLEMS",
    "ProblemsError",
    "capped",
    "check_fields",
    "closest",
    "describe",
    "explain_error",
    "field_path",
    "lone_surrogate",
    "prefixed",
    "unknown_field",
    "unknown_name",
]

# Past this, more lines would only bury the first ones, and a problem list also travels
# in a Temporal failure whose payload must stay small.
MAX_REPORTED_PROBLEMS: Final = 100

# How alike a typo and a name must be for the name to be suggested (difflib's ratio).
_SUGGESTION_CUTOFF: Final = 0.6


# --------------------------------------------------------------------------- lines


def prefixed(prefix: str | None, line: str) -> str:
    """``prefix: line``, or the line alone when there is no prefix (a file, a path)."""
    return f"{prefix}: {line}" if prefix else line


def capped(lines: Sequence[str], limit: int = MAX_REPORTED_PROBLEMS) -> list[str]:
    """The first ``limit`` lines, and one saying how many more were left out."""
    if len(lines) <= limit:
        return list(lines)
    return [*lines[:limit], f"... and {len(lines) - limit} more problems not listed"]


def field_path(loc: Sequence[int | str], field: str = "") -> str:
    """A pydantic location as it is written in the file: ``agents[0].name``."""
    path = field + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    return path.lstrip(".")


# --------------------------------------------------------------------------- values


def describe(value: Any, *, mapping: str = "an object") -> str:
    """How a value reads after "got" in a problem line, in the file's terms, not Python's.

    ``mapping`` names a mapping: "an object" in JSON, "a table" for files that may be TOML.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return quote(value)
    if isinstance(value, str):
        return f"a string ({quote(value)})"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return mapping
    return f"a {type(value).__name__}"


def lone_surrogate(text: str) -> str | None:
    """Why ``text`` is not valid Unicode, or None when it is.

    JSON's and YAML's ``\\ud83d`` escape (half an emoji, e.g. from truncated LLM output)
    decodes to a lone surrogate: Python keeps it in a str, but it cannot be encoded as
    UTF-8, so the input would pass validation and then break the first request or
    workflow input that carries it.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate ({text[exc.start]!r} at character {exc.start}), "
            "which is not valid Unicode text"
        )
    return None


# --------------------------------------------------------------------------- names


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``word`` is most likely a typo of, if any is close enough."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=_SUGGESTION_CUTOFF)
    return close[0] if close else None


def unknown_field(
    key: Any, known: Collection[str], *, noun: str = "field", listing: str | None = None
) -> str:
    """``unknown field 'x' (did you mean 'y'?)``, or the known names when none is close.

    ``listing`` replaces the default ``known fields: a, b`` list.
    """
    if not isinstance(key, str):
        names = "field names" if noun == "field" else f"{noun}s"
        return f"unknown {noun} {quote(key)} ({names} are strings)"
    match = closest(key, known)
    if match is not None:
        return f"unknown {noun} {quote(key)} (did you mean {match!r}?)"
    return f"unknown {noun} {quote(key)} ({listing or f'known {noun}s: ' + ', '.join(known)})"


def unknown_name(kind: str, name: str, known: Sequence[str]) -> str:
    """``unknown agent 'codr' (did you mean 'coder'? known agents: ...)``: a reference to
    something (an agent, a tool) that does not exist, with every name that does."""
    match = closest(name, known)
    hint = f"did you mean {match!r}? " if match is not None else ""
    return f"unknown {kind} {quote(name)} ({hint}known {kind}s: {', '.join(known)})"


# --------------------------------------------------------------------------- pydantic errors

_TYPE_PHRASES: Final[Mapping[str, str]] = {
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "model_attributes_type": "must be an object",
}


def explain_error(err: ErrorDetails, field: str = "", nested: type[BaseModel] | None = None) -> str:
    """One readable line for one pydantic error: ``path: what is wrong, got what``.

    ``field`` is the path of the value that was validated, ``nested`` the model it is
    (whose fields an unknown-field line suggests from).
    """
    loc = err["loc"]
    path = field_path(loc, field)
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden" and loc:
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        known = nested.model_fields if nested is not None else ()
        return prefixed(parent, unknown_field(loc[-1], known))
    if kind == "missing" and loc:
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        return prefixed(parent, f"missing required field {loc[-1]!r}")
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        # A model's own rule: its message says what is wrong with the whole value.
        return prefixed(path, one_line(str(ctx["error"])))
    value = err["input"]
    if kind in _TYPE_PHRASES:
        phrase = _TYPE_PHRASES[kind]
    elif isinstance(value, float) and math.isnan(value):  # NaN fails every bound: say why
        phrase = _TYPE_PHRASES["finite_number"]
    elif kind == "greater_than_equal":
        ge = ctx.get("ge")
        phrase = "must not be negative" if ge == 0 else f"must be at least {_number(ge)}"
    elif kind == "greater_than":
        phrase = f"must be greater than {_number(ctx.get('gt'))}"
    elif kind == "less_than_equal":
        phrase = f"must be at most {_number(ctx.get('le'))}"
    elif kind == "string_too_short":
        phrase = "must not be empty"
    elif kind == "string_too_long":
        phrase = f"must be at most {ctx['max_length']} characters"
    else:
        message = one_line(err["msg"])
        phrase = message[:1].lower() + message[1:]
    return prefixed(path, f"{phrase}, got {describe(value)}")


def _number(bound: Any) -> str:
    """A model's bound as a person would write it: 0, not 0.0."""
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


def check_fields(
    raw: Mapping[Any, Any],
    model: type[BaseModel],
    *,
    handled: Collection[str] = (),
    optional: Collection[str] = (),
    strict: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """Type-check each field of ``raw`` against ``model`` on its own.

    Returns the values that passed (defaults filled in for absent optional fields) and one
    problem line per failure, so a bad field neither hides the others nor makes a
    loader's own rules report it a second time; range rules are left to those rules.
    Fields in ``handled`` are neither checked nor required; fields in ``optional`` may be
    absent without a default (the caller fills them in).

    Strict for files people write ("4" is not 4, true is not 1); lax for the objects
    programs send (PlanInput, SessionInput), which pydantic has always decoded leniently.
    """
    fields = model.model_fields
    problems = [unknown_field(key, fields) for key in raw if key not in fields]
    values: dict[str, Any] = {}
    for name, info in fields.items():
        if name in handled:
            continue
        if name not in raw:
            if not info.is_required():
                values[name] = info.get_default(call_default_factory=True)
            elif name not in optional:
                problems.append(f"missing required field {name!r}")
            continue
        value = raw[name]
        # Strict mode would refuse a list for a tuple field; JSON lists arrive as lists.
        if isinstance(value, list):
            value = tuple(value)
        try:
            values[name] = _field_adapter(model, name).validate_python(value, strict=strict)
        except ValidationError as exc:
            nested = _nested_model(info.annotation)
            problems.extend(explain_error(err, name, nested) for err in exc.errors())
    return values, problems


@cache
def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    annotation = model.model_fields[name].annotation
    if annotation is None:  # pydantic always resolves it for a defined model
        raise TypeError(f"{model.__name__}.{name} has no type annotation")
    return TypeAdapter(annotation)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    candidates = (annotation, *getattr(annotation, "__args__", ()))
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
