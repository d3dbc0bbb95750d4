"""Compaction as an activity: the cheap model folds the older history into a summary.

``compact_history`` reads the session, decides the fold (``domain/compaction.plan_fold``),
asks the cheap sub-agent model (``DPLAN_SUBAGENT_MODEL``) for a summary of the folded
messages and appends a compaction record under a deterministic id. Nothing is deleted:
the session keeps every original message, and from the record on the LLM call sends the
summary instead of what it folded (``sent_messages``). The summary is paid for like any
answer (``activities/spend.py``: per attempt, charged to the root's budget) and its cost is
returned, so it counts in the report's usage. An attempt run again after a crash finds the
record the first one stored and asks nothing; one killed before storing asks again.

The LLM call's side is ``activities/context_window.py``.
"""

from __future__ import annotations

import logging

from temporalio import activity

from durable_plans.activities import observe
from durable_plans.activities.budget import ensure_within_budget
from durable_plans.activities.context_window import context_window_of, tool_chars_of
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.llm import (
    LlmActivities,
    import_litellm,
    message_from_response,
    usage_of,
    waited,
)
from durable_plans.activities.llm_errors import classify_llm_error, to_application_error
from durable_plans.activities.llm_patience import CallPatience
from durable_plans.activities.spend import paid_for, record_paid
from durable_plans.domain.compaction import (
    ACT_COMPACT_HISTORY,
    REASON_EXCEEDED,
    CompactInput,
    CompactOutput,
    compaction_record_id,
    estimate_tokens,
    keep_budget,
    plan_fold,
    record_message,
    sent_messages,
    summary_budget,
    summary_request,
    transcript,
    visible_history,
)
from durable_plans.domain.models import Message, Usage
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

__all__ = ["CompactionActivities"]

log = logging.getLogger(__name__)

# The agent name summary requests are counted under (metrics, spans).
COMPACTION_AGENT = "compaction"
# Of the summariser's own window, the share its request may fill (the transcript, its
# instructions, and room for the answer): the estimate is rough, so a margin.
_SUMMARY_REQUEST_SHARE = 0.7
EXCERPT_CHARS = 300


def _output(record: Message, usage: Usage, *, replayed: bool) -> CompactOutput:
    info = record.compaction
    assert info is not None
    text = record.content or ""
    summary = text.partition("\n")[2]
    return CompactOutput(
        record_id=record.id,
        compacted=True,
        folded_messages=info.folded,
        kept_messages=len(info.kept),
        tokens_before=info.tokens_before,
        tokens_after=info.tokens_after,
        summary_chars=len(summary),
        summary_excerpt=summary[:EXCERPT_CHARS],
        model=info.model,
        usage=usage,
        replayed=replayed,
    )


class CompactionActivities:
    def __init__(self, store: SessionStore, settings: Settings, llm: LlmActivities) -> None:
        self._store = store
        self._settings = settings
        self._llm = llm  # the summary is asked as an agent's call is (client, limits)

    @activity.defn(name=ACT_COMPACT_HISTORY)
    async def compact_history(self, inp: CompactInput) -> CompactOutput:
        """The fold; its summary request's rate limits are waited out as an agent's
        call's are (``llm_patience``), the wait in its usage."""
        record_id = compaction_record_id(inp.scope, inp.turn, inp.index)
        async with heartbeating():
            out, waited_s = await self._llm.patiently(
                record_id, lambda patience: self._compact(inp, record_id, patience)
            )
        return out.model_copy(update={"usage": waited(out.usage, waited_s)}) if waited_s else out

    async def _compact(
        self, inp: CompactInput, record_id: str, patience: CallPatience
    ) -> CompactOutput:
        history = await self._store.read(inp.session_id)
        for m in history:
            if m.id == record_id and m.compaction is not None:
                # Stored by an earlier attempt: report it again, ask nothing new.
                paid = await paid_for(self._store, record_id, m.usage or Usage())
                return _output(m, paid, replayed=True)

        s = self._settings
        litellm = import_litellm()
        tool_chars = tool_chars_of(inp.tools, inp.extra_tools)
        before = sent_messages(history, inp.system_prompt)
        tokens_before = estimate_tokens(before, tool_chars)
        model = inp.model or s.model
        window = context_window_of(litellm, model, inp.context_window, s) or tokens_before
        if inp.reason == REASON_EXCEEDED:
            # Refused: whatever the window is said to be, this prompt (as estimated) was
            # over it; the fold is sized from the prompt, so it leaves most of it out.
            window = min(window, tokens_before)
        threshold = int(window * s.compact_at)
        prompt = [Message(id="system", role="system", content=inp.system_prompt)]
        overhead = estimate_tokens(prompt if inp.system_prompt else [], tool_chars)
        fold = plan_fold(visible_history(history), keep_budget(threshold, overhead))
        if fold is None:
            return CompactOutput(
                record_id=record_id,
                compacted=False,
                tokens_before=tokens_before,
                tokens_after=tokens_before,
            )

        await ensure_within_budget(self._store, inp.root_session_id, inp.budget)
        summarizer = self._llm.side_model().model  # a fallback once its errors persist
        own_window = context_window_of(litellm, summarizer, None, s) or window
        answer_tokens = summary_budget(threshold, overhead)
        room = int(own_window * _SUMMARY_REQUEST_SHARE) - answer_tokens - 200
        text = transcript(fold.folded, max(2_000, room * 4))
        request_messages = summary_request(text)
        await self._llm.tenants.check(
            inp.tenant, {"model": summarizer, "messages": request_messages}
        )
        with observe.llm_request(summarizer, COMPACTION_AGENT, call_id=record_id) as request:
            try:
                response = await self._llm.side_request(
                    summarizer, request_messages, max_tokens=answer_tokens, patience=patience
                )
            except Exception as exc:
                raise to_application_error(classify_llm_error(exc)) from None
            usage = usage_of(litellm, response)
            request.answered(usage)
            # Paid for now, whatever happens next (``activities/spend.py``).
            paid = await record_paid(
                self._store, inp.root_session_id, record_id, usage, tenant=inp.tenant
            )
            answer, finish_reason = message_from_response(response, msg_id=record_id)
            request.finished(finish_reason)
        summary = scrub_secrets((answer.content or "").strip())[: answer_tokens * 4]
        if not summary:
            # Better the folded messages' own excerpts than nothing at all.
            summary = transcript(fold.folded, answer_tokens * 4)

        def record(after: int) -> Message:
            return record_message(
                record_id,
                summary,
                fold,
                tokens_before=tokens_before,
                tokens_after=after,
                reason=inp.reason,
                model=summarizer,
                usage=usage,
            )

        after = sent_messages([*history, record(tokens_before)], inp.system_prompt)
        stored = record(estimate_tokens(after, tool_chars))
        if await self._store.append(inp.session_id, [stored]) == 0:
            # Another attempt of this compaction stored its record first: that one counts.
            found = next(m for m in await self._store.read(inp.session_id) if m.id == record_id)
            return _output(found, await paid_for(self._store, record_id, paid), replayed=True)
        log.info(
            "compacted session %s: %d messages folded, ~%d -> ~%d tokens (%s)",
            inp.session_id,
            len(fold.folded),
            tokens_before,
            stored.compaction.tokens_after if stored.compaction else 0,
            inp.reason,
        )
        return _output(stored, paid, replayed=False)
