"""Reading JSON and YAML written by people and models, with problems a person can act on.

Plan files and agents files share this: a syntax error is one line with its position, a
key given twice is named rather than silently overwritten, and none of the parsers'
stranger failures (a bad value for an explicit YAML tag, a control character, an integer
too long to convert, absurd nesting) escapes as anything but a ``TextFormatError``.
Each loader turns that into its own error type. Reading the file a person named fails
alike too (a directory, no such file, too large, not UTF-8: :func:`read_text_file`, the
only function here that does I/O). PyYAML is imported only when YAML is actually parsed
(workflow code imports the loaders but never parses text).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Final

from durable_plans._errors import TextFormatError

QUOTE_LIMIT: Final = 60


def quote(value: object) -> str:
    """repr, shortened: values come from user files and one line must stay one line."""
    if isinstance(value, str):
        return repr(value[:QUOTE_LIMIT]) + ("…" if len(value) > QUOTE_LIMIT else "")
    text = repr(value)
    return text[:QUOTE_LIMIT] + "…" if len(text) > QUOTE_LIMIT else text


def one_line(text: str) -> str:
    return " ".join(text.split())


def read_text_file(path: str | Path, *, noun: str, not_a: str, limit: int) -> str:
    """The UTF-8 text of a file a person named (``limit`` bytes at most), BOM removed.

    Raises TextFormatError with one line starting with the path: ``is a directory, not
    {not_a}``, ``{noun} is too large (N bytes, limit L)``, ``no such file``, ``cannot read
    the file: why`` or ``not UTF-8 text (invalid byte at offset N)``.
    """
    name = str(path)
    p = Path(path)

    def too_large(size: int) -> TextFormatError:
        return TextFormatError([f"{name}: {noun} is too large ({size} bytes, limit {limit})"])

    try:
        if p.is_dir():
            raise TextFormatError([f"{name}: is a directory, not {not_a}"])
        if (size := p.stat().st_size) > limit:
            raise too_large(size)
        raw = p.read_bytes()
    except FileNotFoundError:
        raise TextFormatError([f"{name}: no such file"]) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TextFormatError([f"{name}: cannot read the file: {reason}"]) from None
    if len(raw) > limit:  # it grew between stat and read
        raise too_large(len(raw))
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise TextFormatError(
            [f"{name}: not UTF-8 text (invalid byte at offset {exc.start})"]
        ) from None


def parse_json(text: str, source: str) -> Any:
    """JSON, refusing duplicate keys (``json`` would keep only the last, silently)."""
    duplicates: dict[str, None] = {}

    def no_silent_overwrites(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                duplicates[key] = None
            obj[key] = value
        return obj

    try:
        data = json.loads(text, object_pairs_hook=no_silent_overwrites)
    except json.JSONDecodeError as exc:
        raise TextFormatError(
            [f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"]
        ) from None
    except RecursionError:
        raise TextFormatError([f"{source}: invalid JSON: nested too deeply"]) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise TextFormatError([f"{source}: invalid JSON: {one_line(str(exc))}"]) from None
    if duplicates:
        raise TextFormatError(
            [
                f"{source}: duplicate key {quote(key)} in one JSON object "
                "(only the last would count)"
                for key in duplicates
            ]
        )
    return data


def parse_yaml(text: str, source: str) -> Any:
    """One YAML document, refusing duplicate keys (YAML would keep only the last, silently)."""
    import yaml

    loader: Any = None
    try:
        loader = _loader()(text)  # its Reader already rejects control characters
        data = loader.get_single_data()
    except yaml.reader.ReaderError as exc:
        raise TextFormatError([f"{source}: invalid YAML{_unprintable(text, exc)}"]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = _yaml_problem(exc.context, exc.problem)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise TextFormatError([f"{source}: invalid YAML{where}: {what}"]) from None
    except yaml.YAMLError as exc:
        raise TextFormatError([f"{source}: invalid YAML: {one_line(str(exc))}"]) from None
    except RecursionError:
        raise TextFormatError([f"{source}: invalid YAML: nested too deeply"]) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise TextFormatError([f"{source}: invalid YAML: {one_line(str(exc))}"]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if loader.duplicates:
        raise TextFormatError(
            [
                f"{source}: duplicate key {quote(key)} at line {line} (only the last would count)"
                for key, line in loader.duplicates
            ]
        )
    return data


def _yaml_problem(context: str | None, problem: str | None) -> str:
    """PyYAML's message: a "while parsing ..." context is noise, any other completes it."""
    if context and problem and not context.startswith("while "):
        return f"{context}, {problem}"  # "expected a single document ..., but found another"
    return problem or context or "malformed document"


def _unprintable(text: str, exc: Any) -> str:
    """Where PyYAML's Reader found a character YAML forbids (it names no line itself)."""
    position: int = exc.position
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
    return f" at line {line}, column {column}: character U+{code:04X} is not allowed in YAML"


@cache
def _loader() -> Any:
    """A SafeLoader that records repeated mapping keys and whose every failure is a YAML
    error with a position.

    The duplicate check looks at the keys as written, before merge keys (``<<``) are
    expanded, so anchors still work. PyYAML's scalar constructors raise KeyError
    (``!!bool maybe``), IndexError (``!!int ""``) or AttributeError (``!!timestamp soon``)
    for a value that does not fit its explicit tag; those become constructor errors.
    """
    import yaml

    class Loader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.duplicates: list[tuple[str, int]] = []

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[tuple[str, str]] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    self.duplicates.append((key_node.value, key_node.start_mark.line + 1))
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep=deep)
            except (KeyError, IndexError, AttributeError, TypeError):
                tag = str(node.tag).removeprefix("tag:yaml.org,2002:")
                raise yaml.constructor.ConstructorError(
                    None, None, f"{quote(node.value)} is not a valid !!{tag}", node.start_mark
                ) from None

    return Loader
