"""Scenarios for the compaction tests, importable by a fake provider process."""

from __future__ import annotations

import re
from dataclasses import dataclass

from durable_plans.domain.compaction import SUMMARY_SYSTEM_PROMPT
from durable_plans.testing import AgentScenario, ChatRequest, Completion, Reply, ToolCallSpec

FILES = 40
# How long the first summary takes in ``SlowSummaries``: long enough to kill a worker
# while the summary is being written.
SLOW_SUMMARY_MS = 4_000


def is_summary_request(request: ChatRequest) -> bool:
    first = request.messages[0].get("content") if request.messages else None
    return first == SUMMARY_SYSTEM_PROMPT


class Reader(AgentScenario):
    """The fake's agent, but an agent told to read the big files reads them one per turn,
    counting what it read from the messages it is sent and the summaries among them; a
    summary request is answered with that count, as a real summary would carry it."""

    def __call__(self, request: ChatRequest) -> Reply:
        if is_summary_request(request):
            text = " ".join(str(m.get("content") or "") for m in request.messages)
            return Completion(content=f"Files read so far: {read_so_far(text)}.")
        if "big files" not in request.last_user_text:
            return super().__call__(request)
        seen = " ".join(
            str(m.get("content") or "") for m in request.messages if m.get("role") == "system"
        )
        done = summarised(seen) + sum(
            1 for m in request.messages if m.get("role") == "assistant" and m.get("tool_calls")
        )
        if done >= FILES:
            return Completion(content=f"Read all {FILES} files.")
        call = ToolCallSpec("read_file", f'{{"path": "big_{done:02}.txt"}}')
        return Completion(tool_calls=(call,))


@dataclass
class SlowSummaries(AgentScenario):
    """The fake's agent, with a summariser that takes ``SLOW_SUMMARY_MS`` to answer its
    first request (the compaction the test kills a worker in) and answers the later ones
    at once, as it answers everything else: they only have to happen, not to be slow."""

    summaries: int = 0  # summary requests answered so far

    def __call__(self, request: ChatRequest) -> Reply:
        if is_summary_request(request):
            self.summaries += 1
            delay_ms = SLOW_SUMMARY_MS if self.summaries == 1 else 0
            return Completion(content="The user wrote notes to keep.", delay_ms=delay_ms)
        return super().__call__(request)


def summarised(text: str) -> int:
    counts = [int(n) for n in re.findall(r"Files read so far: (\d+)", text)]
    return max(counts, default=0)


def read_so_far(transcript: str) -> int:
    return summarised(transcript) + transcript.count("[calls read_file")
