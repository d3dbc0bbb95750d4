"""The offline model: deterministic agent turns served through litellm, with no network.

``make demo`` and the default configuration must run on a fresh machine without keys, yet
exercise the same path a real model takes (``litellm.acompletion`` → tool calls → tool
results → final answer). So the scripted model is a litellm custom provider, not a
shortcut around litellm: the activity code cannot tell it from a real provider.

The turn logic (``plan_turn``) is pure and shared with the test-suite's fake HTTP
provider, so the demo and the tests play the same agent. Like a careless real model it
gives every tool call the id ``call_abc123``; the orchestrator must make ids unique
before they reach a provider, and the scripted model keeps that path honest.

litellm is imported only inside functions (its import is slow and the workflow sandbox
rejects it), with ``LITELLM_LOCAL_MODEL_COST_MAP`` set first so importing needs no network.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CARELESS_TOOL_CALL_ID",
    "LATENCY_ENV",
    "SCRIPTED_MODEL",
    "SCRIPTED_PROVIDER",
    "PlannedCall",
    "PlannedTurn",
    "estimate_tokens",
    "last_user_index",
    "plan_turn",
    "register_scripted_provider",
    "scripted_latency_s",
    "scripted_plan",
    "scripted_steps",
    "text_of",
    "tool_name",
]

SCRIPTED_PROVIDER = "scripted"
SCRIPTED_MODEL = f"{SCRIPTED_PROVIDER}/demo"
LATENCY_ENV = "DPLAN_SCRIPTED_LATENCY_MS"
DEFAULT_LATENCY_MS = 150.0
CARELESS_TOOL_CALL_ID = "call_abc123"
DELEGATE_TOOL_NAME = "delegate_to_sub_agent"
SPAWN_TOOL_NAME = "spawn_subagent"
CREATE_PLAN_TOOL_NAME = "create_plan"

# Tools a coding agent reaches for first; the first offered one wins, so a run with the
# workspace tools behaves like an agent that looks around before answering.
PREFERRED_TOOLS: tuple[str, ...] = ("list_dir", "read_file")
_DEFAULT_ARGS: Mapping[str, Mapping[str, Any]] = {
    "list_dir": {"path": "."},
    "read_file": {"path": "README.md"},
}
QUOTE_CHARS = 200


@dataclass(frozen=True)
class PlannedCall:
    name: str
    arguments: str  # JSON text, as providers send it


@dataclass(frozen=True)
class PlannedTurn:
    """One assistant turn: either tool calls or a final text answer."""

    content: str | None
    calls: tuple[PlannedCall, ...] = ()

    @property
    def is_final(self) -> bool:
        return not self.calls


# --------------------------------------------------------------------------- pure turn logic


def text_of(content: Any) -> str:
    """Message content as plain text; OpenAI also allows a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def last_user_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """Index of the last user message, or -1; everything after it is the current task."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return str(function["name"])
    return str(tool.get("name", ""))


def _arguments_for(tool: Mapping[str, Any], task: str) -> str:
    """Plausible arguments: fixed ones for the workspace tools, else the task for every
    required string parameter (so e.g. ``delegate_to_sub_agent(task=...)`` is valid)."""
    name = tool_name(tool)
    if name in _DEFAULT_ARGS:
        return json.dumps(_DEFAULT_ARGS[name])
    function = tool.get("function")
    params = function.get("parameters") if isinstance(function, Mapping) else None
    args: dict[str, Any] = {}
    if isinstance(params, Mapping):
        props = params.get("properties")
        props = props if isinstance(props, Mapping) else {}
        for key in params.get("required") or ():
            spec = props.get(key)
            if isinstance(spec, Mapping) and spec.get("type", "string") == "string":
                args[str(key)] = task[:QUOTE_CHARS]
    return json.dumps(args)


def _tool_order(tools: Sequence[Mapping[str, Any]], task: str = "") -> list[Mapping[str, Any]]:
    """Tools in the order the agent reaches for them: a tool the task names explicitly
    (e.g. "use delegate_to_sub_agent to ...") first, then the preferred ones."""
    by_name = {tool_name(t): t for t in tools}
    named = [t for n, t in by_name.items() if n and re.search(rf"\b{re.escape(n)}\b", task)]
    preferred = [by_name[n] for n in PREFERRED_TOOLS if n in by_name]
    rest = [t for t in tools if t not in named and t not in preferred]
    return named + [t for t in preferred if t not in named] + rest


def scripted_plan(goal: str) -> dict[str, Any]:
    """The plan the scripted orchestrator proposes for any goal: design, build, review."""
    return {
        "goal": goal,
        "subtasks": [
            {
                "id": "design",
                "description": f"Design the approach for: {goal}",
                "agent": "architect",
            },
            {
                "id": "build",
                "description": f"Implement the design for: {goal}",
                "agent": "coder",
                "depends_on": ["design"],
            },
            {
                "id": "review",
                "description": f"Review the implementation of: {goal}",
                "agent": "architect",
                "depends_on": ["build"],
            },
        ],
    }


def _orchestration_arguments(name: str, task: str) -> str | None:
    """Arguments for the sub-agent tools: the task without the tool's name (so a spawned
    agent does not spawn again), and for ``spawn_subagent`` the agent the task names."""
    if name == CREATE_PLAN_TOOL_NAME:
        goal = task.rsplit(": ", 1)[-1].strip() or task
        return json.dumps(scripted_plan(goal))
    if name not in (DELEGATE_TOOL_NAME, SPAWN_TOOL_NAME):
        return None
    cleaned = re.sub(rf"\b(use\s+)?{name}\b(\s+to)?", " ", task, flags=re.IGNORECASE)
    rest = " ".join(cleaned.split()) or task
    if name == DELEGATE_TOOL_NAME:
        return json.dumps({"task": rest})
    found = re.search(r"\b(orchestrator|architect|coder|debug|ask)\b", task)
    return json.dumps({"agent": found.group(1) if found else "coder", "task": rest})


# A scripted run of tool calls in the task text: ``<<run_command {"argv": ["python"]}>>``,
# one call per turn, in order, then the final answer. It lets the offline example and the
# tests drive any tool (run_command, an MCP server's) deterministically.
_STEP = re.compile(r"<<\s*([A-Za-z0-9_-]{1,64})\s*(\{.*?\})?\s*>>", re.DOTALL)


def scripted_steps(task: str) -> list[PlannedCall]:
    """The ``<<tool {json}>>`` steps written in a task, in order."""
    return [PlannedCall(m.group(1), m.group(2) or "{}") for m in _STEP.finditer(task)]


def plan_turn(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    *,
    tool_turns: int = 1,
    task: str | None = None,
) -> PlannedTurn:
    """The next assistant turn for ``messages``, as a deterministic agent would play it.

    With tools offered, the agent makes ``tool_turns`` single-call turns after the last
    user message (walking the preferred tools in order), then answers; the answer names
    the task and quotes the last tool result so a reader can see the result was used.
    ``task`` overrides the last user message's text (the fake strips its directives).
    """
    start = last_user_index(messages)
    if task is None:
        task = text_of(messages[start].get("content")).strip() if start >= 0 else ""
    since = messages[start + 1 :] if start >= 0 else messages
    turns_done = sum(1 for m in since if m.get("role") == "assistant" and m.get("tool_calls"))
    steps = scripted_steps(task)
    if steps:
        if turns_done < len(steps):
            return PlannedTurn(None, (steps[turns_done],))
        task = " ".join(_STEP.sub(" ", task).split())
    order = _tool_order(tools, task) if not steps else []
    if order and turns_done < tool_turns:
        tool = order[turns_done % len(order)]
        name = tool_name(tool)
        args = _orchestration_arguments(name, task) or _arguments_for(tool, task)
        return PlannedTurn(None, (PlannedCall(name, args),))
    results = [m for m in since if m.get("role") == "tool"]
    task = task.rstrip(". ")  # "Done: <task>." must not end in ".." (nor "?.")
    stop = "" if task.endswith(("?", "!")) else "."
    if results:
        quoted = text_of(results[-1].get("content"))[:QUOTE_CHARS]
        return PlannedTurn(f"Done: {task}{stop} Based on the tool result: {quoted}")
    return PlannedTurn(f"Done: {task}{stop}")


def estimate_tokens(text: str) -> int:
    """About four characters per token: good enough for budgets and progress output."""
    return max(1, (len(text) + 3) // 4)


def scripted_latency_s() -> float:
    """Simulated thinking time, so the demo's progress display is watchable."""
    raw = os.environ.get(LATENCY_ENV, "")
    try:
        ms = float(raw) if raw.strip() else DEFAULT_LATENCY_MS
    except ValueError:
        ms = DEFAULT_LATENCY_MS
    return max(0.0, ms) / 1000.0


# --------------------------------------------------------------------------- litellm glue


def _model_response(
    messages: Sequence[Mapping[str, Any]], optional_params: Mapping[str, Any]
) -> Any:
    from litellm.types.utils import (
        ChatCompletionMessageToolCall,
        Choices,
        Function,
        Message,
        ModelResponse,
        Usage,
    )

    tools = optional_params.get("tools") or ()
    turn = plan_turn(messages, tools)
    tool_calls = [
        ChatCompletionMessageToolCall(
            id=CARELESS_TOOL_CALL_ID,
            type="function",
            function=Function(name=c.name, arguments=c.arguments),
        )
        for c in turn.calls
    ]
    prompt_tokens = estimate_tokens(json.dumps(list(messages), default=str))
    completion_text = (turn.content or "") + "".join(c.name + c.arguments for c in turn.calls)
    completion_tokens = estimate_tokens(completion_text)
    return ModelResponse(
        model=SCRIPTED_MODEL,
        choices=[
            Choices(
                index=0,
                finish_reason="stop" if turn.is_final else "tool_calls",
                message=Message(
                    role="assistant", content=turn.content, tool_calls=tool_calls or None
                ),
            )
        ],
        usage=Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        ),
    )


_handler: Any = None


def _make_handler() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm.llms.custom_llm import CustomLLM

    # Typed as Any: the overrides take litellm's many provider arguments generically
    # instead of restating CustomLLM's long, loosely typed signatures.
    base: Any = CustomLLM

    class ScriptedLLM(base):  # type: ignore[misc]
        """litellm calls these with many provider arguments; only two matter here."""

        def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            time.sleep(scripted_latency_s())
            return _model_response(messages, _optional_params(args, kwargs))

        async def acompletion(
            self, model: str, messages: list[Any], *args: Any, **kwargs: Any
        ) -> Any:
            await asyncio.sleep(scripted_latency_s())
            return _model_response(messages, _optional_params(args, kwargs))

    return ScriptedLLM()


def _optional_params(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    # litellm passes everything by keyword today; the positional fallback follows
    # CustomLLM's signature (api_base, custom_prompt_dict, model_response, print_verbose,
    # encoding, api_key, logging_obj, optional_params, ...) in case that changes.
    params = kwargs.get("optional_params")
    if params is None and len(args) > 7:
        params = args[7]
    return params if isinstance(params, Mapping) else {}


def register_scripted_provider() -> None:
    """Make ``scripted/demo`` callable through litellm; calling it again changes nothing.

    The model is also registered in litellm's cost map at zero cost, so cost tracking
    reports 0.0 for it instead of failing to price an unknown model.
    """
    global _handler
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    if _handler is None:
        _handler = _make_handler()
    if not any(item.get("provider") == SCRIPTED_PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": SCRIPTED_PROVIDER, "custom_handler": _handler},
        ]
    if SCRIPTED_MODEL not in litellm.model_cost:
        litellm.register_model(
            {
                SCRIPTED_MODEL: {
                    "litellm_provider": SCRIPTED_PROVIDER,
                    "mode": "chat",
                    "input_cost_per_token": 0.0,
                    "output_cost_per_token": 0.0,
                    "cache_creation_input_token_cost": 0.0,
                    "cache_read_input_token_cost": 0.0,
                    "max_tokens": 8192,
                    "max_input_tokens": 128000,
                    "max_output_tokens": 8192,
                    "supports_function_calling": True,
                }
            }
        )
