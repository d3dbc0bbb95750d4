"""An LLM call that streams: chunks from litellm, text to the workflow's stream as it comes.

The answer is still built whole (litellm's ``stream_chunk_builder``) and stored by the
activity exactly as an unstreamed one is; the stream is only what watchers see meanwhile.
So nothing about the stream may fail the call: a publish that cannot reach the workflow
is logged once and the rest of the call's events are dropped.

Text is scrubbed of secrets before it is published (it becomes signal payloads in the
workflow's history): ``StreamScrubber`` holds back the last word until it is complete.

Batches, not tokens, cross to the workflow (each batch is one signal, a history event):
the first text of an attempt is sent at once (that is the latency a person notices),
then whatever accumulated every ``interval``.

A provider that ignores ``stream`` and answers with one plain JSON completion (some
gateways do) is read as that whole answer (``plain_json_answer``), never as an empty one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from types import TracebackType
from typing import Any

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from durable_plans.domain.secrets import StreamScrubber, scrub_secrets
from durable_plans.domain.streaming import LLM_TOPIC, StreamEvent, StreamKind

__all__ = ["LivePublisher", "streamed_completion"]

_log = logging.getLogger("durable_plans.streaming")
_CLOSE_TIMEOUT_S = 5.0  # the last batch; a call never waits longer than this for watchers


class LivePublisher:
    """Publishes one attempt of one call to the calling workflow's stream."""

    def __init__(self, call: str, agent: str, *, interval: timedelta) -> None:
        info = activity.info()
        self.call, self.agent, self.attempt = call, agent, info.attempt
        self._client = WorkflowStreamClient.from_within_activity(
            batch_interval=interval, max_retry_duration=timedelta(seconds=30)
        )
        self._topic = self._client.topic(LLM_TOPIC, type=StreamEvent)
        self._open = False
        self._broken = False
        self._scrubber = StreamScrubber()
        self._started = False

    async def __aenter__(self) -> LivePublisher:
        try:
            await self._client.__aenter__()
            self._open = True
        except Exception as exc:  # pragma: no cover - only a broken event loop gets here
            self._drop(exc)
        return self

    def _drop(self, exc: BaseException) -> None:
        if not self._broken:
            _log.warning("stream for %s dropped: %s: %s", self.call, type(exc).__name__, exc)
        self._broken = True

    def _publish(self, kind: StreamKind, text: str = "", *, now: bool = False) -> None:
        if self._broken or not self._open:
            return
        event = StreamEvent(
            kind=kind,
            call=self.call,
            attempt=self.attempt,
            agent=self.agent,
            text=text,
        )
        try:
            self._topic.publish(event, force_flush=now)
        except Exception as exc:
            self._drop(exc)

    def _start(self) -> None:
        if not self._started:
            self._started = True
            self._publish("start")

    def text(self, delta: str) -> None:
        piece = self._scrubber.feed(delta)
        if piece:
            first = not self._started
            self._start()
            self._publish("text", piece, now=first)

    def tool(self, name: str) -> None:
        first = not self._started
        self._start()
        self._publish("tool", scrub_secrets(name), now=first)

    async def close(self, kind: StreamKind, text: str = "") -> None:
        """Publish ``end`` or ``failed`` and send what is left, waiting a bounded time."""
        self._start()
        rest = self._scrubber.finish()
        if rest:
            self._publish("text", rest)
        self._publish(kind, text)
        if not self._open:
            return
        self._open = False
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                # Send the rest first, then stop the flusher: while the flush's signal is
                # on its way the background flusher wakes from a ``force_flush`` it was
                # given and goes idle. Stopped at the moment that wake-up is due, it never
                # stops on Python 3.11 (``asyncio.wait_for`` swallows the cancellation
                # when its inner wait is already done) and the exit waits out the whole
                # timeout: what an answer published at once and closed at once (a plain
                # JSON completion) did on every call.
                await self._client.flush()
                await self._client.__aexit__(None, None, None)
        except Exception as exc:
            self._drop(exc)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._open:
            await self.close("failed", exc_type.__name__ if exc_type else "")


async def streamed_completion(
    litellm: Any, acompletion: Any, kwargs: dict[str, Any], live: LivePublisher
) -> Any:
    """The whole response of a streamed call, publishing its text and tool starts."""
    stream = await acompletion(**kwargs, stream=True, stream_options={"include_usage": True})
    whole = await plain_json_answer(litellm, stream, str(kwargs.get("model")))
    if whole is not None:
        _publish_whole(whole, live)
        return whole
    chunks: list[Any] = []
    finished = False
    async for chunk in stream:
        chunks.append(chunk)
        for choice in getattr(chunk, "choices", None) or ():
            finished = finished or bool(getattr(choice, "finish_reason", None))
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            content = getattr(delta, "content", None)
            if content:
                live.text(content)
            for call in getattr(delta, "tool_calls", None) or ():
                name = getattr(getattr(call, "function", None), "name", None)
                if name:
                    live.tool(name)
    if chunks and not finished:
        # A stream that stops without a finish reason is a broken answer, not a short one:
        # storing it would make a truncated text the record. Retried like a dropped call.
        raise litellm.APIConnectionError(
            message="the provider's stream ended before the answer was finished",
            llm_provider="",
            model=str(kwargs.get("model")),
        )
    response = litellm.stream_chunk_builder(chunks, messages=kwargs.get("messages"))
    if response is None:
        return _empty(litellm)
    return response


async def plain_json_answer(litellm: Any, stream: Any, model: str) -> Any | None:
    """The whole answer when the provider ignored ``stream`` and sent one JSON completion.

    Some gateways answer a streamed request with a plain ``application/json`` chat
    completion. Read as server-sent events it holds no event, and litellm's stream then
    makes up an empty finished answer: a tool call or a text the model did give would be
    reported as ``EmptyAnswer``. So before reading the stream, the HTTP response under it
    (where litellm keeps one: OpenAI-compatible providers) is looked at: a JSON body is
    the answer, read whole; JSON that is not a chat completion fails as an invalid
    response that says what came back. None: a real stream (or no response to look at).
    """
    raw = getattr(getattr(stream, "completion_stream", None), "response", None)
    headers = getattr(raw, "headers", None)
    if raw is None or headers is None or not hasattr(raw, "aread"):
        return None
    content_type = str(headers.get("content-type") or "").lower()
    if "json" not in content_type or "event-stream" in content_type:
        return None
    body = await raw.aread()
    try:
        data = json.loads(body)
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise ValueError("no 'choices'")
        response = litellm.ModelResponse(**data)
    except Exception as exc:
        raise litellm.APIError(
            status_code=500,
            message="the provider answered a streamed request with plain JSON that is not a "
            f"chat completion ({type(exc).__name__}: {exc}): {body[:200]!r}",
            llm_provider="",
            model=model,
        ) from None
    return response


def _publish_whole(response: Any, live: LivePublisher) -> None:
    """What watchers would have seen streamed: the answer's text and tool calls at once."""
    for choice in getattr(response, "choices", None) or ():
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None)
        if isinstance(content, str) and content:
            live.text(content)
        for call in getattr(message, "tool_calls", None) or ():
            name = getattr(getattr(call, "function", None), "name", None)
            if name:
                live.tool(name)


def _empty(litellm: Any) -> Any:
    """A stream with no chunks: a response without choices (the activity reports it)."""
    response = litellm.ModelResponse()
    response.choices = []
    return response
