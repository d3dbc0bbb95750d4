"""A local OpenAI-compatible chat server that behaves like a strict, fallible provider.

The test-suite and the benchmarks reach it through litellm with ``api_base``, so the real
request path (litellm → HTTP → provider → exception mapping) is exercised without network.
It validates like a strict provider (``domain.tool_ids.strict_violations``: orphaned tool
message, unanswered call, reused ``tool_call_id`` → HTTP 400, recorded in ``rejections``),
answers through a pluggable scenario (``_fake_scenario``), and records every request so
tests can assert what the orchestrator sent and how often. Users get it, and the scenario
types, from :mod:`durable_plans.testing` (the ``testing`` extra brings its HTTP server).

In process::

    async with FakeProvider(latency_ms=0) as p:
        await litellm.acompletion(model="openai/fake", api_base=p.base_url, ...)

With ``log_path`` every answered request is also one JSONL line, so another process can
count them (``read_request_log``); ``_provider_process`` runs the server as a process of
its own that way (``FakeProviderProcess``, ``python -m durable_plans.testing``).

With ``context_window`` it refuses, as real providers do, every request whose prompt (its
messages and tools, at about four characters per token) is longer than that many tokens:
400 ``context_length_exceeded`` worded as OpenAI words it, kept in ``over_window``.

With ``prompt_cache=True`` it caches prompt prefixes as OpenAI does by itself: a
request whose leading messages (same model, same tools) were already part of an answered
request reports them as ``usage.prompt_tokens_details.cached_tokens``
(``RecordedRequest.cached_tokens``).

With ``requests_per_s`` and/or ``tokens_per_minute`` it enforces a rate limit as a real
provider does (``_fake_rate_limit``): a request over it is answered 429 with
``retry-after-ms`` and ``retry-after``, before the scenario sees it, and is kept in
``refused`` (in a log: ``refused_count``).

A request with ``"stream": true`` is answered as OpenAI streams: server-sent events of
``chat.completion.chunk`` objects, the usage last when ``stream_options.include_usage``
asks for it, then ``data: [DONE]`` (``chunk_delay_ms`` paces the events like tokens).

Directive grammar (``AgentScenario``)
-------------------------------------
Directives are bracketed words in the LAST user message, so a plan's subtask description
can steer the model. Several may be combined; unknown bracketed words are plain text.
"This conversation" is keyed by the system messages plus the first and last user
message, which stay the same across retries and across the turns of one agent loop.

    [fail:KIND(:OPT)*]     every request of the conversation gets the fault KIND
    [flaky:KINDxN(:OPT)*]  the first N requests of the conversation get it, later ones
                           are answered normally (retries recover)
        KIND := an HTTP status (400, 401, 403, 404, 409, 422, 429, 500, 502, 503, ...)
              | drop           close the connection without answering
              | empty-choices  200 with "choices": []
              | bad-json       200 with a truncated JSON body
        OPT  := context        400 worded as context_length_exceeded
              | content-policy 400 worded as content_policy_violation
              | retry-after=S | retry-after-ms=MS   headers (a bare 429 says retry-after: 1)
    [drop] [empty-choices] [bad-json]   shorthands for [fail:drop] etc.
    [slow:MS]              wait MS milliseconds before every answer (timeouts)
    [slow:MSxN]            ... before the first N answers only
    [turns:N]              N tool-call turns before the final answer (default 1)
    [dup-ids]              the tool-call turn returns two calls sharing one id
    [bad-args]             the tool call's arguments are invalid JSON
    [unknown-tool]         the tool call names a tool that was not offered
    [call:TOOL]            the tool-call turn calls TOOL with {"task": <the whole last user
                           message>} (plus "agent" for spawn_subagent, see [agent:NAME])
    [agent:NAME]           the agent a [call:spawn_subagent] asks for (default coder)
    [revise:N:ID]          call revise_plan adding N subtasks ID-0.. that depend on ID,
                           then answer; [bad-revise]: first with one of every mistake;
                           [remove:ID] (repeatable): the call also removes ID
    [stream-hold]          a streamed answer stops after its first text until
                           ``POST /control/release-streams`` (``release_streams()``);
                           ``POST /control/hold-streams`` (``hold_streams()``) makes
                           later ones stop again, as on a fresh provider
    [stream-cut]           the conversation's first streamed answer with text is cut off
                           (connection closed) right after its first text
    [no-stream]            a streamed request is answered with one plain JSON completion,
                           as a gateway that ignores ``stream`` does
    [fail:KIND:tool=NAME]  the fault hits only requests that offer tool NAME
    [fail:KIND:model=NAME] (also [flaky:...]) the fault hits only requests for model NAME
                           (as the provider receives it: "primary" for "openai/primary"),
                           so one model is down while another answers

Examples: ``Fix the build [flaky:500x2]``, ``Summarise [fail:400:context]``,
``Look around [flaky:429x1:retry-after-ms=1500]``.

Without directives the agent is realistic and deterministic: offered tools and no tool
call yet since the last user message → ONE call (``list_dir {"path": "."}``, else
``read_file``, else the first tool) with the id ``call_abc123`` every time, as a careless
model gives every call the same id; after the tool result → ``Done: <task>. Based on the
tool result: <first 200 chars>``; without tools → ``Done: <task>.``
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

try:
    from aiohttp import web
except ImportError as e:  # pragma: no cover - depends on the environment
    # litellm happens to pull aiohttp in today, but the fake provider uses it directly, so
    # it is declared in the `testing` extra; say so instead of a bare ModuleNotFoundError.
    raise ImportError(
        "durable_plans.testing needs aiohttp for its fake provider: "
        "pip install 'durable-plans[testing]'"
    ) from e

from durable_plans.activities.scripted_model import CARELESS_TOOL_CALL_ID, estimate_tokens
from durable_plans.domain.tool_ids import strict_violations
from durable_plans.testing._fake_rate_limit import ProviderRateLimit, retry_after_headers
from durable_plans.testing._fake_scenario import (
    AgentScenario,
    ChatRequest,
    Completion,
    DropConnection,
    HttpError,
    RawBody,
    Reply,
    Scenario,
    conversation_key,
    usage_for,
)

__all__ = [
    "FakeProvider",
    "RecordedRequest",
    "identical_counts",
    "read_request_log",
    "refused_count",
]

Kind = Literal["pending", "completion", "http_error", "raw", "dropped", "rejected"]


@dataclass
class RecordedRequest:
    """What arrived and what the fake did about it; mutable only until it is answered."""

    seq: int
    arrived: float  # time.time(), comparable across processes
    path: str
    body_hash: str  # sha256 of the canonical JSON body (or of the raw bytes if not JSON)
    model: str | None = None
    conversation: str | None = None
    n_messages: int = 0
    status: int | None = None  # HTTP status sent; None while pending or when dropped
    kind: Kind = "pending"
    reason: str | None = None  # why it was rejected, for rejections
    delivered: bool = False  # the client was still connected when the answer went out
    finished: float | None = None
    # When the first chunk carrying answer text went out (streamed answers; time.time()).
    first_text: float | None = None
    # What a completion served: its token counts (``prompt_tokens``, ``completion_tokens``)
    # and the tools it called, so tests can hold the orchestrator's own accounting (its
    # report, its metrics) against what the provider gave out.
    usage: dict[str, int] | None = None
    tool_calls: list[str] | None = None
    # Prompt tokens the answer reported as read from the prompt cache (``prompt_cache``).
    cached_tokens: int = 0
    # The parsed JSON body, so tests can inspect exactly what the orchestrator sent.
    body: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def completed(self) -> bool:
        """A successful completion the client received: repeating one wastes a paid call."""
        return self.kind == "completion" and self.delivered

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = (self.body or {}).get("messages")
        return messages if isinstance(messages, list) else []

    def to_json(self, *, with_body: bool = False) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name) for f in fields(self) if with_body or f.name != "body"
        }


def prompt_tokens_of(messages: list[Any], tools: list[Any]) -> int:
    """A prompt's length as ``context_window`` counts it: about four characters per token
    of its messages and tools as JSON (the answers' ``prompt_tokens`` count messages only)."""
    chars = len(json.dumps(messages, default=str))
    if tools:
        chars += len(json.dumps(tools, default=str))
    return max(1, (chars + 3) // 4)


def body_hash(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def identical_counts(
    records: Iterable[Mapping[str, Any]] | Iterable[RecordedRequest],
    *,
    completed_only: bool = False,
) -> dict[str, int]:
    """How many times each identical body arrived (body hash → count).

    ``completed_only`` counts only delivered completions: a crash test asserts every count
    is 1, i.e. no LLM call that finished was made again after a worker was killed.
    """
    counts: Counter[str] = Counter()
    for r in records:
        if isinstance(r, RecordedRequest):
            completed, digest = r.completed, r.body_hash
        else:
            completed = r.get("kind") == "completion" and bool(r.get("delivered"))
            digest = str(r["body_hash"])
        if completed or not completed_only:
            counts[digest] += 1
    return dict(counts)


def read_request_log(path: Path | str) -> list[dict[str, Any]]:
    """The JSONL log a provider process writes; a half-written last line is skipped."""
    entries: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return entries
    for line in p.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            entries.append(json.loads(line))
    return entries


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class _Invalid:
    message: str
    code: str


def _validate(raw: bytes) -> tuple[dict[str, Any] | None, _Invalid | None]:
    """Parse and check a request body the way a strict provider does."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, _Invalid(
            f"We could not parse the JSON body of your request: {e}", "invalid_json"
        )
    if not isinstance(body, dict):
        return None, _Invalid("The request body must be a JSON object.", "invalid_json")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return body, _Invalid("you must provide a model parameter", "missing_required_parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return body, _Invalid("'messages' must be a non-empty array", "missing_required_parameter")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return body, _Invalid("every message must be an object with a 'role'", "invalid_value")
    problems = strict_violations(messages)
    if problems:
        return body, _Invalid("Invalid 'messages': " + "; ".join(problems), "invalid_tool_messages")
    return body, None


# --------------------------------------------------------------------------- the server


class FakeProvider:
    """The in-process server; ``async with`` binds a free port on 127.0.0.1.

    All bookkeeping happens on the server's event loop without awaits in between, so
    concurrent requests cannot interleave their updates.
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        latency_ms: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: Path | str | None = None,
        log_bodies: bool = False,
        context_window: int | None = None,
        prompt_cache: bool = False,
        chunk_delay_ms: float = 0.0,
        requests_per_s: float | None = None,
        tokens_per_minute: float | None = None,
        rate_window_s: float = 1.0,
    ) -> None:
        self.scenario: Scenario = scenario if scenario is not None else AgentScenario()
        # The model's window in tokens: longer prompts are refused (``_over_window``).
        self.context_window = context_window
        self.over_window: list[RecordedRequest] = []
        # A real provider's rate limit (``_fake_rate_limit``): what exceeds it is refused
        # with 429 and Retry-After before the scenario sees it, and kept in ``refused``.
        self.rate_limit = (
            ProviderRateLimit(requests_per_s, tokens_per_minute, rate_window_s)
            if requests_per_s is not None or tokens_per_minute is not None
            else None
        )
        self.refused: list[RecordedRequest] = []
        self.latency_ms = latency_ms
        # Between the events of a streamed answer (``"stream": true``), as tokens come.
        self.chunk_delay_ms = chunk_delay_ms
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self.rejections: list[RecordedRequest] = []
        self._seen: Counter[str] = Counter()
        self._log_path = Path(log_path) if log_path is not None else None
        self._log_bodies = log_bodies
        self._log: IO[str] | None = None
        self._runner: web.AppRunner | None = None
        self._released = asyncio.Event()  # [stream-hold] answers go on once set
        self._cut: set[str] = set()  # conversations whose [stream-cut] happened
        # Prompt prefixes answered before (``prompt_cache``): a digest per leading run of
        # messages, keyed by model and tools.
        self.prompt_cache = prompt_cache
        self._prefixes: set[str] = set()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        """Between ``start`` and ``stop``: whoever started it also stops it."""
        return self._runner is not None

    def identical_request_counts(self, *, completed_only: bool = False) -> dict[str, int]:
        return identical_counts(self.requests, completed_only=completed_only)

    def completions(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.completed]

    # -- lifecycle

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for path in ("/v1/chat/completions", "/chat/completions"):
            app.router.add_post(path, self._handle)
        app.router.add_post("/control/release-streams", self._release_streams)
        app.router.add_post("/control/hold-streams", self._hold_streams)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        # Not cancelling handlers when a client goes away mirrors real providers: the
        # call still runs (and is billed), which is what crash tests must account for.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=False, shutdown_timeout=0.5
        )
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        if self._log_path is not None:
            self._log = self._log_path.open("a", encoding="utf-8")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._log is not None:
            self._log.close()
            self._log = None

    async def __aenter__(self) -> FakeProvider:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- request handling

    def _over_window(
        self, record: RecordedRequest, messages: list[Any], tools: list[Any]
    ) -> HttpError | None:
        """The refusal of a prompt longer than ``context_window``, or None."""
        if self.context_window is None:
            return None
        tokens = prompt_tokens_of(messages, tools)
        if tokens <= self.context_window:
            return None
        record.reason = f"prompt of {tokens} tokens over the {self.context_window}-token window"
        self.over_window.append(record)
        return HttpError(
            status=400,
            message=(
                f"This model's maximum context length is {self.context_window} tokens. "
                f"However, your messages resulted in {tokens} tokens. Please reduce the "
                "length of the messages."
            ),
            error_type="invalid_request_error",
            code="context_length_exceeded",
        )

    async def _release_streams(self, request: web.Request) -> web.Response:
        self._released.set()
        return web.Response(text="released\n")

    async def _hold_streams(self, request: web.Request) -> web.Response:
        """``[stream-hold]`` answers stop again until the next release (a provider shared
        by several tests: each holds and releases its own)."""
        self._released.clear()
        return web.Response(text="holding\n")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body, invalid = _validate(raw)
        record = RecordedRequest(
            seq=len(self.requests),
            arrived=time.time(),
            path=request.path,
            body_hash=body_hash(body) if body is not None else hashlib.sha256(raw).hexdigest(),
            body=body,
        )
        self.requests.append(record)
        try:
            reply, chat = self._over_rate_limit(record, body, invalid) or self._decide(
                record, body, invalid
            )
            await asyncio.sleep((self.latency_ms + reply.delay_ms) / 1000.0)
            if (
                isinstance(reply, Completion)
                and chat is not None
                and body
                and body.get("stream")
                and "[no-stream]" not in chat.last_user_text
            ):
                return await self._stream(request, record, reply, chat)
            return self._send(request, record, reply, chat)
        finally:
            record.finished = time.time()
            if self.rate_limit is not None and record.usage:
                self.rate_limit.charge(record.usage["completion_tokens"])
            self._write_log(record)

    def _over_rate_limit(
        self, record: RecordedRequest, body: dict[str, Any] | None, invalid: _Invalid | None
    ) -> tuple[Reply, None] | None:
        """A 429 with Retry-After when this request exceeds the rate limit, else None."""
        if self.rate_limit is None or body is None or invalid is not None:
            return None
        wait = self.rate_limit.admit(estimate_tokens(json.dumps(body["messages"], default=str)))
        if wait is None:
            return None
        record.model = body["model"]
        record.n_messages = len(body["messages"])
        record.kind, record.reason = "http_error", RATE_LIMITED
        self.refused.append(record)
        message = f"Rate limit reached; please try again in {wait:.3f}s."
        headers = retry_after_headers(wait)
        return HttpError(
            status=429, message=message, code="rate_limit_exceeded", headers=headers
        ), None

    def _decide(
        self, record: RecordedRequest, body: dict[str, Any] | None, invalid: _Invalid | None
    ) -> tuple[Reply, ChatRequest | None]:
        if body is not None:
            record.model = body.get("model") if isinstance(body.get("model"), str) else None
            messages = body.get("messages")
            record.n_messages = len(messages) if isinstance(messages, list) else 0
        if invalid is not None or body is None:
            assert invalid is not None
            record.kind, record.reason = "rejected", invalid.message
            self.rejections.append(record)
            reply = HttpError(
                status=400,
                message=invalid.message,
                error_type="invalid_request_error",
                code=invalid.code,
            )
            return reply, None
        messages = body["messages"]
        key = conversation_key(messages)
        record.conversation = key
        tools = body.get("tools") if isinstance(body.get("tools"), list) else []
        chat = ChatRequest(body["model"], messages, tools or [], body, key, self._seen[key])
        self._seen[key] += 1
        too_long = self._over_window(record, messages, tools or [])
        if too_long is not None:
            return too_long, chat
        try:
            answer = self.scenario(chat)
            if (
                isinstance(answer, Completion)
                and self.prompt_cache
                and answer.cached_tokens is None
            ):
                answer = replace(answer, cached_tokens=self._cached_prefix(chat))
            if isinstance(answer, Completion) and answer.cached_tokens:
                record.cached_tokens = answer.cached_tokens
            return answer, chat
        except Exception as e:  # a broken scenario or directive must fail loudly, not retry
            message = f"fake provider scenario error: {type(e).__name__}: {e}"
            record.reason = message
            return HttpError(status=400, message=message, code="scenario_error"), chat

    def _cached_prefix(self, chat: ChatRequest) -> int:
        """Tokens of the longest run of leading messages an earlier answered request of
        this model and tools began with (what a caching provider reads from its cache);
        this request's own prefixes are remembered for the next."""
        digest = hashlib.sha256(
            json.dumps([chat.model, chat.tools], sort_keys=True, default=str).encode()
        )
        longest = 0
        for n, message in enumerate(chat.messages, start=1):
            digest.update(json.dumps(message, sort_keys=True, default=str).encode())
            key = digest.hexdigest()
            if key in self._prefixes and n < len(chat.messages):
                longest = n
            self._prefixes.add(key)
        if not longest:
            return 0
        prompt, _ = usage_for(chat, Completion())
        cached, _ = usage_for(replace(chat, messages=chat.messages[:longest]), Completion())
        return min(prompt, cached)

    def _send(
        self,
        request: web.Request,
        record: RecordedRequest,
        reply: Reply,
        chat: ChatRequest | None,
    ) -> web.StreamResponse:
        transport = request.transport
        record.delivered = transport is not None and not transport.is_closing()
        if record.kind != "rejected":
            record.kind = _kind_of(reply)
        if isinstance(reply, DropConnection):
            record.delivered = False
            if transport is not None:
                transport.abort()
            # Nothing can be written any more; aiohttp discards this response.
            return web.Response(status=500)
        response: web.StreamResponse
        if isinstance(reply, Completion):
            assert chat is not None
            body = _completion_body(chat, reply, record.body_hash)
            record.usage = {k: body["usage"][k] for k in ("prompt_tokens", "completion_tokens")}
            record.tool_calls = [spec.name for spec in reply.tool_calls]
            response = web.json_response(body)
        elif isinstance(reply, HttpError):
            response = web.json_response(reply.body(), status=reply.status, headers=reply.headers)
        else:
            response = web.Response(
                text=reply.text, status=reply.status, content_type=reply.content_type
            )
        record.status = response.status
        return response

    async def _stream(
        self, request: web.Request, record: RecordedRequest, reply: Completion, chat: ChatRequest
    ) -> web.StreamResponse:
        """The completion as OpenAI streams it: server-sent events of ``chat.completion.chunk``
        (the text a few characters at a time, each tool call's id and name, then its
        arguments), the finish reason, the usage when ``stream_options.include_usage``
        asks for it, then ``data: [DONE]``. ``delivered`` means every event was written."""
        body = _completion_body(chat, reply, record.body_hash)
        record.kind = "completion"
        record.usage = {k: body["usage"][k] for k in ("prompt_tokens", "completion_tokens")}
        record.tool_calls = [spec.name for spec in reply.tool_calls]
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        record.status = 200
        options = (chat.body or {}).get("stream_options")
        with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        directives = chat.last_user_text
        hold = "[stream-hold]" in directives
        cut = "[stream-cut]" in directives and chat.conversation not in self._cut
        try:
            await response.prepare(request)
            for chunk in _stream_chunks(body, with_usage):
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
                if record.first_text is None and _has_text(chunk):
                    record.first_text = time.time()
                    if cut:
                        self._cut.add(chat.conversation)
                        record.reason = "cut off mid-stream ([stream-cut])"
                        if request.transport is not None:
                            request.transport.close()
                        return response
                    if hold:
                        await asyncio.wait_for(self._released.wait(), HOLD_LIMIT_S)
                if self.chunk_delay_ms:
                    await asyncio.sleep(self.chunk_delay_ms / 1000.0)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            record.delivered = True
        except (ConnectionError, RuntimeError):
            record.delivered = False  # the client went away mid-stream
        return response

    def _write_log(self, record: RecordedRequest) -> None:
        if self._log is not None:
            # One write per line plus flush: a reader in another process sees whole lines.
            line = json.dumps(record.to_json(with_body=self._log_bodies))
            self._log.write(line + "\n")
            self._log.flush()


RATE_LIMITED = "rate limit exceeded"  # the reason of a request refused by ``rate_limit``


def refused_count(records: Iterable[Mapping[str, Any]] | Iterable[RecordedRequest]) -> int:
    """How many requests the provider's rate limit refused (records or log entries)."""
    return sum(
        1
        for r in records
        if (r.reason if isinstance(r, RecordedRequest) else r.get("reason")) == RATE_LIMITED
    )


HOLD_LIMIT_S = 120.0  # a [stream-hold] answer goes on by itself after this long


def _has_text(chunk: dict[str, Any]) -> bool:
    return any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ())


STREAM_TEXT_CHARS = 8  # characters of answer text per streamed chunk
STREAM_ARGUMENT_CHARS = 32  # characters of a tool call's arguments per streamed chunk


def _stream_chunks(body: dict[str, Any], with_usage: bool) -> list[dict[str, Any]]:
    """``body`` (a chat.completion) as the chat.completion.chunk objects OpenAI sends."""
    base = {k: body[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    chunks += [
        chunk({"content": text[i : i + STREAM_TEXT_CHARS]})
        for i in range(0, len(text), STREAM_TEXT_CHARS)
    ]
    for index, call in enumerate(message.get("tool_calls") or []):
        start = {"index": index, "id": call["id"], "type": "function"}
        start["function"] = {"name": call["function"]["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [start]}))
        arguments = call["function"]["arguments"]
        for i in range(0, len(arguments), STREAM_ARGUMENT_CHARS):
            part = arguments[i : i + STREAM_ARGUMENT_CHARS]
            piece = {"index": index, "function": {"arguments": part}}
            chunks.append(chunk({"tool_calls": [piece]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if with_usage:
        chunks.append({**base, "choices": [], "usage": body["usage"]})
    return chunks


def _kind_of(reply: Reply) -> Kind:
    if isinstance(reply, Completion):
        return "completion"
    if isinstance(reply, HttpError):
        return "http_error"
    if isinstance(reply, RawBody):
        return "raw"
    return "dropped"


def _completion_body(chat: ChatRequest, reply: Completion, digest: str) -> dict[str, Any]:
    calls = []
    for k, spec in enumerate(reply.tool_calls):
        if spec.id is not None:
            call_id = spec.id
        elif reply.id_policy == "careless":
            call_id = CARELESS_TOOL_CALL_ID
        else:
            call_id = f"call_{digest[:12]}_{k}"
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": spec.name, "arguments": spec.arguments},
            }
        )
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if calls:
        message["tool_calls"] = calls
    prompt, completion = usage_for(chat, reply)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": min(reply.cached_tokens, prompt)}
    return {
        "id": f"chatcmpl-{digest[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": chat.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": usage,
    }
