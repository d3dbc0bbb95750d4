"""Secret scrubbing for everything that is stored or logged.

Keys live only in the worker's environment, but they leak sideways: a tool echoes an
``.env`` file, a provider error quotes the ``Authorization`` header, a model repeats a
key the user pasted. Session rows, reports, Temporal payloads and logs outlive the
process, so text bound for them passes through ``scrub_secrets`` first.

The patterns want realistic key lengths and word boundaries, so ordinary words that
merely contain ``sk-`` ("task-sketch", "risk-based") are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "PLACEHOLDER",
    "StreamScrubber",
    "contains_secret",
    "is_secret_label",
    "scrub_secrets",
    "scrub_value",
]

_NOT_KEY_BEFORE = r"(?<![A-Za-z0-9])"

# Labels whose value is a secret whatever it looks like. A value starting with "[" is
# never taken, so an already redacted value is not redacted again.
_LABEL = (
    r"[A-Za-z0-9_\-]*(?:api[_\-]?key|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token"
    r"|secret[_\-]?key|client[_\-]?secret|password|passwd)"
)
_LABEL_RE = re.compile(rf"(?i){_LABEL}")


def _keep_prefix(kind: str) -> Callable[[re.Match[str]], str]:
    """Keep the label (group ``keep``), redact the value: the log still says what was set."""

    def replace(match: re.Match[str]) -> str:
        return f"{match.group('keep')}[REDACTED:{kind}]"

    return replace


# Order matters: specific key formats first, so ``OPENAI_API_KEY=sk-...`` reports
# ``openai`` rather than the generic ``api_key``.
_RULES: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (re.compile(_NOT_KEY_BEFORE + r"sk-ant-[A-Za-z0-9_\-]{20,}"), "[REDACTED:anthropic]"),
    (re.compile(_NOT_KEY_BEFORE + r"sk-or-v1-[A-Za-z0-9_\-]{20,}"), "[REDACTED:openrouter]"),
    (
        re.compile(_NOT_KEY_BEFORE + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
        "[REDACTED:openai]",
    ),
    (
        re.compile(_NOT_KEY_BEFORE + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        "[REDACTED:aws_access_key_id]",
    ),
    (
        re.compile(
            r"(?i)(?P<keep>(?<![A-Za-z0-9])aws[_\-]?secret[_\-]?access[_\-]?key"
            r"[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{20,}"
        ),
        _keep_prefix("aws_secret_access_key"),
    ),
    (
        re.compile(r"(?i)(?P<keep>(?<![A-Za-z0-9])bearer\s+)[A-Za-z0-9\-._~+/]{16,}=*"),
        _keep_prefix("bearer"),
    ),
    (
        re.compile(
            rf"(?i)(?P<keep>(?<![A-Za-z0-9_\-]){_LABEL}[\"']?\s*[:=]\s*[\"']?)"
            r"[^\s\"'\[\],;{}()<>]{6,}"
        ),
        _keep_prefix("api_key"),
    ),
)

# Replacing one match cannot create another (the replacement holds "[", which no value
# pattern accepts), but a pass is cheap and the loop makes idempotence unconditional.
_MAX_PASSES = 4


def _one_pass(text: str) -> str:
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def scrub_secrets(text: str) -> str:
    """``text`` with every recognised secret replaced by ``[REDACTED:<kind>]``.

    Idempotent, and its output never ``contains_secret``.
    """
    for _ in range(_MAX_PASSES):
        scrubbed = _one_pass(text)
        if scrubbed == text:
            return text
        text = scrubbed
    return text


# What every rule puts in place of a secret: ``[REDACTED:<kind>]``.
PLACEHOLDER = re.compile(r"\[REDACTED:[a-z_]+\]")


def contains_secret(text: str) -> bool:
    """True when ``scrub_secrets`` would change ``text``."""
    return any(pattern.search(text) for pattern, _ in _RULES)


def is_secret_label(key: str) -> bool:
    """A mapping key such as ``api_key`` or ``OPENAI_API_KEY`` names a secret value."""
    return _LABEL_RE.fullmatch(key) is not None


def scrub_value(obj: Any) -> Any:
    """``obj`` with secrets scrubbed from every string inside dicts, lists and tuples.

    Made for structured log events (a structlog processor): besides scrubbing text, a
    string value stored under a secret-looking key (``api_key=...``) is redacted whole,
    since a short or unusual key would escape the text patterns. Other objects are
    returned as they are; the input is never mutated.
    """
    return _scrub(obj, frozenset())


def _scrub(obj: Any, path: frozenset[int]) -> Any:
    if isinstance(obj, str):
        return scrub_secrets(obj)
    if not isinstance(obj, Mapping | list | tuple):
        return obj
    if id(obj) in path:
        return "[REDACTED:cycle]"  # a self-containing structure; never recurse forever
    inner = path | {id(obj)}
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            if isinstance(key, str) and isinstance(value, str) and value and is_secret_label(key):
                out[key] = "[REDACTED:api_key]"
            else:
                out[key] = _scrub(value, inner)
        return out
    items = [_scrub(item, inner) for item in obj]
    return items if isinstance(obj, list) else tuple(items)


# A settled piece of streamed text must not end where a secret's label has been written
# and its value may still come ("api_key = ", "Bearer ", "password:").
_UNFINISHED_LABEL = re.compile(
    r"(?i)(?:(?<![A-Za-z0-9])bearer"
    r"|(?<![A-Za-z0-9])aws[_\-]?secret[_\-]?access[_\-]?key"
    rf"|(?<![A-Za-z0-9_\-]){_LABEL})"
    r"[\"']?\s*(?:[:=]\s*[\"']?)?$"
)


class StreamScrubber:
    """Scrubs text that arrives in pieces (a streamed answer) before any of it is shown.

    A secret cannot be recognised from its first characters, so text is released only up
    to the last whitespace, and never right after a secret's label: every value the rules
    redact is one run of non-space characters, so a released piece never ends inside one.
    Each released piece is scrubbed on its own, which gives what scrubbing the whole text
    would give; the held-back tail is released, scrubbed, by ``finish``.
    """

    def __init__(self) -> None:
        self._tail = ""

    def feed(self, piece: str) -> str:
        """The scrubbed text that ``piece`` lets through (often ``""``)."""
        self._tail += piece
        if not any(c.isspace() for c in piece):
            return ""
        tail = self._tail
        cut = len(tail)
        while cut and not tail[cut - 1].isspace():
            cut -= 1
        held = _UNFINISHED_LABEL.search(tail, 0, cut)
        if held is not None:
            cut = held.start()
        if cut <= 0:
            return ""
        self._tail = tail[cut:]
        return scrub_secrets(tail[:cut])

    def finish(self) -> str:
        """The rest, scrubbed: the stream ended."""
        rest, self._tail = self._tail, ""
        return scrub_secrets(rest)
