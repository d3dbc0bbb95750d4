"""What the fake provider answers: parsed requests, replies, and the default agent.

A scenario is any callable ``ChatRequest -> Reply``; the server (``FakeProvider``) does
the HTTP, validation, latency and bookkeeping, so a scenario only decides *what* to say.
``AgentScenario`` plays realistic agent turns and obeys the fault directives documented
in :mod:`durable_plans.testing._fake_provider`. Public names are re-exported by
:mod:`durable_plans.testing`; import them from there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from durable_plans.activities.scripted_model import (
    CARELESS_TOOL_CALL_ID,
    estimate_tokens,
    last_user_index,
    plan_turn,
    scripted_plan,
    text_of,
    tool_name,
)
from durable_plans.domain.ids import stable_id

IdPolicy = Literal["careless", "unique"]


@dataclass(frozen=True)
class ChatRequest:
    """One validated chat-completion request as a scenario sees it."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    body: dict[str, Any]
    # Stable across retries of the same request and across the turns of one agent loop.
    conversation: str
    # How many earlier requests of this conversation reached the scenario (0 = first).
    seen_before: int = 0

    @property
    def last_user_text(self) -> str:
        i = last_user_index(self.messages)
        return text_of(self.messages[i].get("content")) if i >= 0 else ""

    @property
    def tool_names(self) -> list[str]:
        return [tool_name(t) for t in self.tools]


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True, kw_only=True)
class _Reply:
    # Extra wait before answering, on top of the server's global latency.
    delay_ms: float = 0.0


@dataclass(frozen=True)
class ToolCallSpec:
    name: str
    arguments: str = "{}"  # JSON text; deliberately unchecked so a fault can send garbage
    id: str | None = None  # None: the Completion's id policy decides


@dataclass(frozen=True, kw_only=True)
class Completion(_Reply):
    """A 200 chat completion: text, tool calls, or both."""

    content: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    # "careless" gives every call the same id, as some real models do, so the orchestrator's
    # own call ids (domain/tool_ids.py) are exercised by default; "unique" numbers them.
    id_policy: IdPolicy = "careless"
    prompt_tokens: int | None = None  # None: estimated from the request
    completion_tokens: int | None = None
    # Of the prompt tokens, those read from the provider's prompt cache, reported as
    # ``usage.prompt_tokens_details.cached_tokens``; None: not reported (the server fills
    # it in for a repeated prefix when made with ``prompt_cache=True``).
    cached_tokens: int | None = None


# Wording and error types as OpenAI uses them: litellm maps errors partly by these strings
# (an "invalid_request_error" is a bad request whatever the status), so they must match.
_ERROR_TYPES: Mapping[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request (injected by the fake provider)."),
    401: ("authentication_error", "Incorrect API key provided (injected)."),
    403: ("permission_error", "You are not allowed to use this model (injected)."),
    404: ("not_found_error", "The model does not exist or you do not have access (injected)."),
    408: ("timeout_error", "Request timed out (injected)."),
    409: ("conflict_error", "Conflicting concurrent request (injected)."),
    422: ("invalid_request_error", "Unprocessable request (injected)."),
    429: ("rate_limit_error", "Rate limit reached for requests (injected)."),
    500: ("server_error", "The server had an error while processing your request (injected)."),
    502: ("server_error", "Bad gateway (injected)."),
    503: ("server_error", "The engine is currently overloaded (injected)."),
    504: ("server_error", "Gateway timeout (injected)."),
}


@dataclass(frozen=True, kw_only=True)
class HttpError(_Reply):
    """A non-2xx answer with an OpenAI-style error body and optional headers.

    ``message`` and ``error_type`` default to what a real provider says for ``status``.
    """

    status: int
    message: str | None = None
    error_type: str | None = None
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        default_type, default_message = _ERROR_TYPES.get(
            self.status, ("api_error", f"HTTP {self.status} (injected).")
        )
        return {
            "error": {
                "message": self.message or default_message,
                "type": self.error_type or default_type,
                "param": None,
                "code": self.code,
            }
        }


@dataclass(frozen=True, kw_only=True)
class RawBody(_Reply):
    """Exactly these bytes, e.g. truncated JSON or ``choices: []`` (invalid responses)."""

    text: str
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True, kw_only=True)
class DropConnection(_Reply):
    """Close the socket without answering, as a crashing proxy would."""


Reply = Completion | HttpError | RawBody | DropConnection
Scenario = Callable[[ChatRequest], Reply]


# --------------------------------------------------------------------------- conversation key


def conversation_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """System messages + first and last user message.

    These do not change between retries of one request, nor between the turns of one
    agent loop (tool traffic is neither), so per-conversation counters survive both. The
    last user message is included as well as the first because subtasks of one plan
    share the session's opening but each ends with its own description.
    """
    systems = [text_of(m.get("content")) for m in messages if m.get("role") == "system"]
    users = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    first, last = (users[0], users[-1]) if users else ("", "")
    return "conv-" + stable_id(json.dumps([systems, first, last]), length=16)


# --------------------------------------------------------------------------- canned faults


CONTEXT_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted "
    "in 9001 tokens. Please reduce the length of the messages."
)
CONTENT_POLICY_MESSAGE = (
    "Your request was rejected as a result of our safety system (content_policy_violation)."
)
TRUNCATED_JSON = '{"id": "chatcmpl-fake", "object": "chat.completion", "choices": [{"index": 0, '


def http_fault(status: int, options: Sequence[str] = ()) -> HttpError:
    """An HTTP error as a real provider words it, so litellm maps it like the real thing.

    Options: ``context`` (context window exceeded), ``content-policy``,
    ``retry-after=SECONDS``, ``retry-after-ms=MS``. A 429 without a retry option says
    ``retry-after: 1``, as real rate limiters do.
    """
    message: str | None = None
    code: str | None = None
    headers: dict[str, str] = {}
    for opt in options:
        key, _, value = opt.partition("=")
        if key == "context":
            message, code = CONTEXT_MESSAGE, "context_length_exceeded"
        elif key == "content-policy":
            message, code = CONTENT_POLICY_MESSAGE, "content_policy_violation"
        elif key in ("retry-after", "retry-after-ms"):
            headers[key] = value
        else:
            raise ValueError(f"unknown fault option {opt!r}")
    if status == 429:
        code = code or "rate_limit_exceeded"
        if not headers:
            headers["retry-after"] = "1"
    return HttpError(status=status, message=message, code=code, headers=headers)


def named_fault(kind: str, options: Sequence[str] = ()) -> Reply:
    """``kind`` is an HTTP status or one of ``drop``, ``empty-choices``, ``bad-json``."""
    if kind.isdigit():
        return http_fault(int(kind), options)
    if kind == "drop":
        return DropConnection()
    if kind == "empty-choices":
        body = {"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake", "choices": []}
        return RawBody(text=json.dumps(body))
    if kind == "bad-json":
        return RawBody(text=TRUNCATED_JSON)
    raise ValueError(f"unknown fault kind {kind!r}")


# --------------------------------------------------------------------------- directives

DIRECTIVE_RE = re.compile(r"\[(?P<name>[a-z][a-z-]*)(?::(?P<arg>[^\]\s]*))?\]")
_COUNTED_RE = re.compile(r"^(?P<what>[^x:]+)x(?P<n>\d+)$")
_FAULT_SHORTHANDS = ("drop", "empty-choices", "bad-json")
_FLAGS = ("dup-ids", "bad-args", "unknown-tool", "plan", "bad-plan", "bad-revise")


@dataclass(frozen=True)
class Directives:
    """The steering parsed from one user message (see the grammar in ``_fake_provider``)."""

    fault: Reply | None = None  # answered instead of a normal turn ...
    fault_requests: int | None = None  # ... for this many requests (None: always)
    slow_ms: float = 0.0
    slow_requests: int | None = None
    tool_turns: int = 1
    flags: frozenset[str] = frozenset()
    call: str | None = None  # [call:TOOL]: the tool-call turn calls this tool
    agent: str | None = None  # [agent:NAME]: the agent a spawn_subagent call asks for
    # [fail:KIND:model=NAME]: the fault hits only requests for this model (the name the
    # provider receives, e.g. "primary" for "openai/primary"); others are answered.
    fault_model: str | None = None
    # [revise:N:ID]: the subtask (ID) adds N subtasks that depend on it (revise_plan).
    revise: tuple[int, str] | None = None
    # [fail:KIND:tool=NAME]: the fault hits only requests that offer tool NAME (an agent
    # that may write files fails; the orchestrator replanning around it, quoting the
    # failed task, does not).
    fault_tool: str | None = None
    # [remove:ID] (repeatable): the revise_plan call of [revise:...] also removes ID.
    drop: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Directives:
        fault: Reply | None = None
        fault_requests: int | None = None
        slow_ms, slow_requests, tool_turns = 0.0, None, 1
        flags: set[str] = set()
        call: str | None = None
        agent: str | None = None
        fault_model: str | None = None
        revise: tuple[int, str] | None = None
        fault_tool: str | None = None
        drop: list[str] = []
        for m in DIRECTIVE_RE.finditer(text):
            name, arg = m["name"], m["arg"] or ""
            if name in ("fail", "flaky"):
                head, *options = arg.split(":")
                scoped = [o for o in options if o.startswith("model=")]
                tooled = [o for o in options if o.startswith("tool=")]
                options = [o for o in options if not o.startswith(("model=", "tool="))]
                fault_model = scoped[-1].removeprefix("model=") if scoped else None
                fault_tool = tooled[-1].removeprefix("tool=") if tooled else None
                count: int | None = None
                if name == "flaky":
                    counted = _COUNTED_RE.match(head)
                    if counted is None:
                        raise ValueError(f"[flaky:{arg}] needs KINDxN, e.g. [flaky:500x2]")
                    head, count = counted["what"], int(counted["n"])
                fault, fault_requests = named_fault(head, options), count
            elif name in _FAULT_SHORTHANDS:
                fault, fault_requests = named_fault(name), None
            elif name == "slow":
                counted = _COUNTED_RE.match(arg)
                if counted is not None:
                    slow_ms, slow_requests = float(counted["what"]), int(counted["n"])
                else:
                    slow_ms, slow_requests = float(arg), None
            elif name == "turns":
                tool_turns = int(arg)
            elif name in _FLAGS:
                flags.add(name)
            elif name == "call":
                call = arg
            elif name == "agent":
                agent = arg
            elif name == "revise":
                count_text, _, caller = arg.partition(":")
                if not count_text.isdigit() or not caller:
                    raise ValueError(f"[revise:{arg}] needs N:ID, e.g. [revise:10:lead]")
                revise = (int(count_text), caller)
            elif name == "remove" and arg:
                drop.append(arg)
            # Anything else in brackets is ordinary text (e.g. "[WIP]"), not a directive.
        return cls(
            fault,
            fault_requests,
            slow_ms,
            slow_requests,
            tool_turns,
            frozenset(flags),
            call,
            agent,
            fault_model,
            revise,
            fault_tool,
            tuple(drop),
        )


def strip_directives(text: str) -> str:
    return " ".join(DIRECTIVE_RE.sub(" ", text).split())


# --------------------------------------------------------------------------- the default agent


@dataclass
class AgentScenario:
    """Realistic, deterministic agent turns, steerable by directives in the task text."""

    id_policy: IdPolicy = "careless"

    def __call__(self, request: ChatRequest) -> Reply:
        text = request.last_user_text
        directives = Directives.parse(text)
        delay = 0.0
        if directives.slow_requests is None or request.seen_before < directives.slow_requests:
            delay = directives.slow_ms
        fault = directives.fault
        if directives.fault_model is not None and request.model != directives.fault_model:
            fault = None  # the fault is another model's: this one answers
        if directives.fault_tool is not None and directives.fault_tool not in {
            tool_name(t) for t in request.tools
        }:
            fault = None  # the fault is an agent's with that tool: this one answers
        if fault is not None and (
            directives.fault_requests is None or request.seen_before < directives.fault_requests
        ):
            return _with_delay(fault, delay)
        return self._turn(request, directives, strip_directives(text), delay)

    def _turn(
        self, request: ChatRequest, directives: Directives, task: str, delay: float
    ) -> Completion:
        planning = _plan_turn(request, directives, task) or _revise_turn(request, directives)
        if planning is not None:
            return replace(planning, delay_ms=delay, id_policy=self.id_policy)
        turn = plan_turn(
            request.messages, request.tools, tool_turns=directives.tool_turns, task=task
        )
        if turn.is_final:
            return Completion(content=turn.content, delay_ms=delay, id_policy=self.id_policy)
        calls = [ToolCallSpec(turn.calls[0].name, turn.calls[0].arguments)]
        if directives.call is not None:
            # The whole task text, directives included, is handed on: a sub-agent given
            # "[call:spawn_subagent]" spawns again, which is how nesting depth is tested.
            args: dict[str, str] = {"task": request.last_user_text}
            if directives.call == "spawn_subagent":
                args["agent"] = directives.agent or "coder"
            if directives.call == "switch_agent":
                args = {"agent": directives.agent or "coder", "reason": "the task needs code"}
            calls = [ToolCallSpec(directives.call, json.dumps(args))]
        if "unknown-tool" in directives.flags:
            calls = [ToolCallSpec("no_such_tool", "{}")]
        if "bad-args" in directives.flags:
            calls = [ToolCallSpec(calls[0].name, '{"path": ".", ')]
        if "dup-ids" in directives.flags:
            # Two calls sharing one id in one response, whatever the id policy says.
            calls = [ToolCallSpec(calls[0].name, calls[0].arguments, CARELESS_TOOL_CALL_ID)] * 2
        return Completion(tool_calls=tuple(calls), delay_ms=delay, id_policy=self.id_policy)


def _revise_turn(request: ChatRequest, directives: Directives) -> Completion | None:
    """[revise:N:ID] (and [bad-revise]): call revise_plan adding N subtasks after ID
    (first with one of every mistake for [bad-revise], then right once the error came
    back), then answer with what the tool said."""
    if directives.revise is None or "revise_plan" not in {tool_name(t) for t in request.tools}:
        return None
    count, caller = directives.revise
    since = request.messages[last_user_index(request.messages) + 1 :]
    results = [m for m in since if m.get("role") == "tool" and m.get("name") == "revise_plan"]
    good = {
        "add": [
            {
                "id": f"{caller}-{i}",
                "description": f"Module {i} found by {caller}",
                "depends_on": [caller],
            }
            for i in range(count)
        ],
        "reason": f"{caller} found {count} modules",
    }
    if directives.drop:
        good["remove"] = list(directives.drop)
    if not results and "bad-revise" in directives.flags:
        bad = {
            "add": [
                {"id": caller, "description": "again"},
                {"id": "x", "description": "x", "agent": "wizard"},
                {"id": "y", "description": "y", "depends_on": ["z"]},
                {"id": "z", "description": "z", "depends_on": ["y"]},
            ],
            "remove": [caller],
        }
        return Completion(tool_calls=(ToolCallSpec("revise_plan", json.dumps(bad)),))
    if not results or text_of(results[-1].get("content")).startswith("error:"):
        return Completion(tool_calls=(ToolCallSpec("revise_plan", json.dumps(good)),))
    return Completion(content=f"Revised: {text_of(results[-1].get('content'))[:200]}")


def _plan_turn(request: ChatRequest, directives: Directives, task: str) -> Completion | None:
    """[plan] / [bad-plan]: call create_plan (first with a cycle for [bad-plan], then a
    valid plan once the error came back), then answer."""
    if not {"plan", "bad-plan"} & directives.flags:
        return None
    if "create_plan" not in {tool_name(t) for t in request.tools}:
        return None
    start = last_user_index(request.messages)
    since = request.messages[start + 1 :]
    results = [m for m in since if m.get("role") == "tool" and m.get("name") == "create_plan"]
    plan = scripted_plan(task)
    if not results and "bad-plan" in directives.flags:
        bad = dict(plan)
        bad["subtasks"] = [
            {"id": "a", "description": "first", "depends_on": ["b"]},
            {"id": "b", "description": "second", "depends_on": ["a"]},
        ]
        return Completion(tool_calls=(ToolCallSpec("create_plan", json.dumps(bad)),))
    if not results or text_of(results[-1].get("content")).startswith("error:"):
        return Completion(tool_calls=(ToolCallSpec("create_plan", json.dumps(plan)),))
    quoted = text_of(results[-1].get("content"))[:200]
    return Completion(content=f"Planned: {task}. {quoted}")


@dataclass
class ScriptedScenario:
    """Replies in a fixed order (the last one repeats): for tests that need exact control."""

    replies: Sequence[Reply]
    calls: int = 0

    def __call__(self, request: ChatRequest) -> Reply:
        reply = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        return reply


def _with_delay(reply: Reply, delay_ms: float) -> Reply:
    if not delay_ms:
        return reply
    return replace(reply, delay_ms=reply.delay_ms + delay_ms)


def usage_for(request: ChatRequest, reply: Completion) -> tuple[int, int]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = estimate_tokens(json.dumps(request.messages, default=str))
    completion = reply.completion_tokens
    if completion is None:
        text = (reply.content or "") + "".join(c.name + c.arguments for c in reply.tool_calls)
        completion = estimate_tokens(text)
    return prompt, completion
