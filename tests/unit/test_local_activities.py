"""Every local activity of ours passes ``policies.LOCAL_RETRY_THRESHOLD``, read from source.

Retried inside the worker, a local activity keeps its previous attempt's start-to-close
timer running in temporalio 1.35's core, which times out the next attempt early and,
after the worker shuts down, panics (docs/known-issues.md). The threshold sends every
retry through a workflow timer instead; a call that leaves it out would bring the SDK's
one-minute default back.
tests/integration/test_local_activity_retry.py runs the retry itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import durable_plans
from tests.python_source import parse

ROOT = Path(durable_plans.__file__).resolve().parent
LOCAL_ACTIVITY_CALLS = frozenset({"execute_local_activity", "start_local_activity"})
THRESHOLD = "policies.LOCAL_RETRY_THRESHOLD"


def local_activity_calls(source: str, filename: str = "<source>") -> list[ast.Call]:
    return [
        node
        for node in ast.walk(parse(source, filename=filename))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LOCAL_ACTIVITY_CALLS
    ]


def missing_threshold(source: str, filename: str = "<source>") -> list[int]:
    """The lines of the local-activity calls in ``source`` that do not pass the threshold."""
    return [
        call.lineno
        for call in local_activity_calls(source, filename)
        if not any(
            keyword.arg == "local_retry_threshold" and ast.unparse(keyword.value) == THRESHOLD
            for keyword in call.keywords
        )
    ]


def test_every_local_activity_passes_the_threshold() -> None:
    found = 0
    problems: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        found += len(local_activity_calls(source, str(path)))
        problems += [f"{path.relative_to(ROOT)}:{line}" for line in missing_threshold(source)]
    assert problems == []
    # The calls of llm_call, store_ops and agent_loop (two; the approval desk's store write
    # goes through store_ops): the scan sees them
    assert found >= 4


def test_the_scan_flags_a_call_without_the_threshold() -> None:
    source = (
        "async def f():\n"
        "    await workflow.execute_local_activity('a', start_to_close_timeout=t)\n"
        "    await workflow.execute_local_activity(\n"
        "        'a', start_to_close_timeout=t, local_retry_threshold=timedelta(seconds=1)\n"
        "    )\n"
        "    await workflow.start_local_activity(\n"
        "        'a', local_retry_threshold=policies.LOCAL_RETRY_THRESHOLD\n"
        "    )\n"
    )
    assert missing_threshold(source) == [2, 3]
