"""The no-durability floor: a plan's DAG run by plain asyncio in one process.

``bench.overhead`` compares the durable path (Temporal server, PlanWorkflow, one
SubtaskWorkflow per subtask, every step an activity) against this runner on the same
DAG and the same fake provider. Everything that is not orchestration is kept equal, so
the difference between the two is what durability costs:

* the same scheduling rule (a subtask starts once all its dependencies completed, at most
  ``max_parallel`` at once, ready subtasks in declaration order);
* the same agent loop (LLM call → tool calls → LLM call … until a plain answer) through
  the same ``litellm.acompletion`` with ``api_base``, so the HTTP path is identical;
* the same request contents (agent system prompt, dependency results as one system
  message, the task as the user message, the agent's tool schemas) and the same tool
  implementations run against a workspace directory.

What it leaves out is exactly what the durable path adds: no history, no session store,
no retries, no recovery. A crash loses everything, which is why it is only a floor.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_plans.domain.history import DependencyResult, format_dependency_context
from durable_plans.domain.models import Plan, Subtask, SubtaskStatus
from durable_plans.domain.scheduling import ready_subtasks


@dataclass(frozen=True)
class StepOutcome:
    """What one subtask produced: its final answer and how many LLM calls it took."""

    result: str
    llm_calls: int


@dataclass(frozen=True)
class SubtaskRun:
    id: str
    started_s: float  # seconds since the run started
    finished_s: float
    result: str
    llm_calls: int


@dataclass(frozen=True)
class DagRunResult:
    """The runs keyed by id, plus the order they finished in (what the smoke test checks)."""

    runs: dict[str, SubtaskRun]
    order: tuple[str, ...]
    duration_s: float

    @property
    def llm_calls(self) -> int:
        return sum(r.llm_calls for r in self.runs.values())


Step = Callable[[Subtask, Sequence[DependencyResult]], Coroutine[Any, Any, StepOutcome]]


async def run_dag(plan: Plan, step: Step, *, max_parallel: int | None = None) -> DagRunResult:
    """Run every subtask of ``plan`` with ``step``, dependencies first.

    The first failing step cancels the running ones and its exception propagates: the
    floor measures the happy path only, and a silent partial run would fake a fast time.
    """
    limit = max_parallel if max_parallel is not None else plan.max_parallel
    if limit < 1:
        raise ValueError("max_parallel must be at least 1")
    statuses: dict[str, SubtaskStatus] = {}
    results: dict[str, str] = {}
    runs: dict[str, SubtaskRun] = {}
    order: list[str] = []
    running: dict[asyncio.Task[StepOutcome], tuple[str, float]] = {}
    t0 = time.perf_counter()

    def start_ready() -> None:
        for sid in ready_subtasks(plan, statuses):
            if len(running) >= limit:
                return
            sub = plan.subtask(sid)
            deps = [
                DependencyResult(
                    subtask_id=d, description=plan.subtask(d).description, result=results[d]
                )
                for d in sub.depends_on
            ]
            statuses[sid] = SubtaskStatus.RUNNING
            task = asyncio.create_task(step(sub, deps), name=f"fake-dag:{sid}")
            running[task] = (sid, time.perf_counter() - t0)

    try:
        start_ready()
        while running:
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            # Finished tasks are handled in declaration order so that ties are deterministic.
            for task in sorted(done, key=lambda t: _position(plan, running[t][0])):
                sid, started = running.pop(task)
                outcome = task.result()  # re-raises the step's failure
                statuses[sid] = SubtaskStatus.COMPLETED
                results[sid] = outcome.result
                order.append(sid)
                runs[sid] = SubtaskRun(
                    sid, started, time.perf_counter() - t0, outcome.result, outcome.llm_calls
                )
            start_ready()
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    missing = [s.id for s in plan.subtasks if s.id not in runs]
    if missing:
        raise RuntimeError(f"fake DAG stalled; never ran: {', '.join(missing)}")
    return DagRunResult(runs=runs, order=tuple(order), duration_s=time.perf_counter() - t0)


def _position(plan: Plan, sid: str) -> int:
    return next(i for i, s in enumerate(plan.subtasks) if s.id == sid)


@dataclass
class LitellmAgent:
    """A ``Step`` that runs the agent loop against an OpenAI-compatible endpoint.

    The request is built as the durable path builds it (system prompt, dependency
    context, task; the agent's tool schemas; ``num_retries=0``), so per-request cost on
    both sides is the same and only the orchestration around it differs.
    """

    model: str
    api_base: str
    api_key: str
    workspace: Path
    timeout_s: float = 30.0
    calls: int = field(default=0, init=False)

    async def __call__(self, subtask: Subtask, deps: Sequence[DependencyResult]) -> StepOutcome:
        # Imported here, like the activities do: litellm's import is slow and this module
        # must stay importable (and testable) without paying it up front.
        from durable_plans.activities.file_jail import FileJail
        from durable_plans.activities.file_tools import (
            WORKSPACE_TOOLS,
            execute_workspace_tool,
        )
        from durable_plans.activities.llm import import_litellm
        from durable_plans.activities.tool_registry import openai_tool_schemas
        from durable_plans.domain.agents import agent_spec

        litellm = import_litellm()
        spec = agent_spec(subtask.agent)
        messages: list[dict[str, Any]] = [{"role": "system", "content": spec.system_prompt}]
        if deps:
            messages.append({"role": "system", "content": format_dependency_context(deps)})
        messages.append({"role": "user", "content": subtask.description})
        tools = openai_tool_schemas(WORKSPACE_TOOLS[n] for n in spec.tools if n in WORKSPACE_TOOLS)
        workspace = FileJail(self.workspace)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "api_base": self.api_base,
            "api_key": self.api_key,
            "num_retries": 0,
            "timeout": self.timeout_s,
        }
        if tools:
            kwargs["tools"] = tools
        for turn in range(spec.max_turns):
            response = await litellm.acompletion(messages=messages, **kwargs)
            self.calls += 1
            message = response.choices[0].message
            tool_calls = list(getattr(message, "tool_calls", None) or [])
            if not tool_calls:
                content = message.content or ""
                if not content.strip():
                    raise RuntimeError(f"{subtask.id}: the model ended without an answer")
                return StepOutcome(result=content, llm_calls=turn + 1)
            # Ids are made unique per conversation, as the durable path does, whatever the
            # model returned (the fake repeats one id, like a careless model).
            calls = [
                (f"call_{subtask.id}_{turn}_{i}", c.function.name, c.function.arguments or "")
                for i, c in enumerate(tool_calls)
            ]
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    "tool_calls": [
                        {"id": cid, "type": "function", "function": {"name": n, "arguments": a}}
                        for cid, n, a in calls
                    ],
                }
            )
            outputs = await asyncio.gather(
                *(asyncio.to_thread(execute_workspace_tool, n, a, workspace) for _, n, a in calls)
            )
            for (cid, n, _), out in zip(calls, outputs, strict=True):
                messages.append(
                    {"role": "tool", "tool_call_id": cid, "name": n, "content": out.content}
                )
        raise RuntimeError(
            f"{subtask.id}: no final answer after {spec.max_turns} turns "
            f"(last messages: {json.dumps(messages[-2:], default=str)[:200]})"
        )
