"""Session-store CPU per subtask: one subtask's store traffic, as the activities make it.

    python -m bench.store_cpu [--short] [--plans N]

``bench.cpu`` measures a whole worker; this isolates the store's share of it. Each plan
is 4 layers of 5 subtasks, every subtask depending on the whole layer before (the DAG of
``bench.cpu``), and each subtask makes exactly the store calls of the worker's hot path,
through the activities' own helpers: ``begin_branch`` (snapshot of the base, reading
the 5 dependencies' results, building the branch), then per LLM call a history read,
the budget read, the paid ledger (``record_paid``) and the stored answer, one tool
answer, ``close_branch``, and the merge into the base. The five subtasks of a layer run
concurrently, as in a worker.

Printed per backend: CPU ms per subtask (process CPU, every thread: the event loop and
whatever the backend runs elsewhere) and wall ms per subtask. PostgreSQL is skipped,
saying so, when unreachable (as in ``bench.sessions``). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence

from bench.sessions import bench_pg_dsn, postgres_store, postgres_unreachable, sqlite_store
from durable_plans.activities.sessions import begin_branch, branch_result, close_branch
from durable_plans.activities.spend import record_paid
from durable_plans.domain.contracts import BeginSubtaskInput, EndSubtaskInput
from durable_plans.domain.models import Message, Subtask, Usage
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import describe_store_target

LAYERS, WIDTH = 4, 5
USAGE = Usage(prompt_tokens=120, completion_tokens=40, cost_usd=0.0004)


async def one_subtask(store: SessionStore, plan: str, i: int, deps: Sequence[int]) -> None:
    base, branch, snap = f"{plan}-base", f"{plan}-b{i}", f"{plan}-s{i}"
    await begin_branch(
        store,
        BeginSubtaskInput(
            plan_run_id=plan,
            subtask=Subtask(id=f"t{i}", description="Write the module.", agent="coder"),
            base_session_id=base,
            branch_session_id=branch,
            snapshot_id=snap,
            dependency_branches=tuple((f"t{d}", f"{plan}-b{d}") for d in deps),
            dependency_descriptions=tuple(f"dependency {d}" for d in deps),
            system_prompt="You are a careful engineer.",
            root_session_id=base,
        ),
    )
    for turn in range(2):  # an LLM call asking for a tool, then the answering one
        await store.read(branch)
        await store.total_usage(base)
        answer_id = f"{branch}-a{turn}"
        await record_paid(store, base, answer_id, USAGE)
        text = "I will list the files." if turn == 0 else "Done: the module is written. " * 8
        await store.append(branch, [Message(id=answer_id, role="assistant", content=text)])
        if turn == 0:
            await store.read(branch)
            tool = Message(
                id=f"{branch}-t0", role="tool", content="README.md\nsrc/\n" * 10,
                tool_call_id="call_1", name="list_dir",
            )  # fmt: skip
            await store.append(branch, [tool])
    await close_branch(
        store,
        EndSubtaskInput(
            base_session_id=base, branch_session_id=branch, snapshot_id=snap, succeeded=True
        ),
    )
    result = await branch_result(store, branch) or ""
    await store.append(base, [Message(id=f"{plan}-m{i}", role="assistant", content=result)])


async def one_plan(store: SessionStore) -> None:
    plan = uuid.uuid4().hex[:12]
    previous: list[int] = []
    for layer in range(LAYERS):
        ids = [layer * WIDTH + k for k in range(WIDTH)]
        await asyncio.gather(*(one_subtask(store, plan, i, previous) for i in ids))
        previous = ids


async def measure(store: SessionStore, plans: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per subtask over ``plans`` plans, after one plan of warm-up."""
    await one_plan(store)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(plans):
        await one_plan(store)
    subtasks = plans * LAYERS * WIDTH
    return (
        (time.process_time() - cpu) * 1000 / subtasks,
        (time.perf_counter() - wall) * 1000 / subtasks,
    )


async def run(plans: int) -> None:
    print(
        f"one subtask's store traffic ({LAYERS} layers x {WIDTH}, 5 dependencies each after "
        f"the first layer), {plans} plans after one of warm-up"
    )
    print(f"{'backend':<12}{'CPU ms/subtask':>16}{'wall ms/subtask':>17}")
    async with sqlite_store() as sqlite:
        cpu, wall = await measure(sqlite, plans)
    print(f"{'sqlite':<12}{cpu:>16.2f}{wall:>17.2f}")
    dsn = bench_pg_dsn()
    problem = await postgres_unreachable(dsn)
    if problem is not None:
        where = describe_store_target(dsn)
        print(f"{'postgres':<12}  skipped, not reachable at {where}: {problem}")
        return
    async with postgres_store(dsn) as pg:
        cpu, wall = await measure(pg, plans)
    print(f"{'postgres':<12}{cpu:>16.2f}{wall:>17.2f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_cpu", description=__doc__)
    parser.add_argument("--short", action="store_true", help="2 plans (CI)")
    parser.add_argument("--plans", type=int, help="plans measured (default 10)")
    args = parser.parse_args(argv)
    plans = args.plans or (2 if args.short else 10)
    if plans < 1:
        parser.error("--plans must be positive")
    asyncio.run(run(plans))


if __name__ == "__main__":
    main()
