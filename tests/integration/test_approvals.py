"""Tool calls that wait for a person, on a real Temporal dev server: approve, reject,
replace the arguments, time out, two operators at once, and a worker SIGKILLed while a
call waits. The model is the fake provider, reached through litellm; the coder agent's
first call is ``list_dir(path=".")``, which the plans here make wait for approval."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from durable_plans import Client as DplanClient
from durable_plans import InvalidArgument, Refused
from durable_plans.cli.main import main
from durable_plans.client._approvals import PendingCall, decide, pending_calls
from durable_plans.domain.approval_rules import (
    QUERY_APPROVALS,
    TIMEOUT_WHO,
    UPDATE_APPROVE,
    ApprovalDecision,
    ApprovalPolicy,
    ApproveInput,
    WorkflowApprovals,
)
from durable_plans.domain.models import PlanStatus
from durable_plans.testing import (
    AgentScenario,
    ChatRequest,
    Completion,
    FakeProvider,
    FakeProviderProcess,
    Reply,
    ToolCallSpec,
)
from tests.integration.conftest import Harness, provider_settings, running_worker
from tests.integration.plans import by_id, make_plan, start_plan_workflow
from tests.integration.replay import assert_replays
from tests.integration.stored import opened_store, subtask_messages, tool_answers
from tests.integration.workers import WorkerProcess, forget_sticky_worker, new_workspace, worker_env
from tests.integration.workspace_files import result_text

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # a bound on waiting for the workflows to reach a state, never asserted


async def wait_pending(client: Client, plan_id: str, n: int) -> list[PendingCall]:
    """Until ``n`` calls of the plan wait (each subtask registers its own when it gets
    there); fails loudly, with what was seen, if they never do."""
    deadline = time.monotonic() + WAIT_S
    rows: list[PendingCall] = []
    while time.monotonic() < deadline:
        rows = await pending_calls(client, plan_id)
        if len(rows) >= n:
            return rows
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {n} waiting calls, saw {rows}")


async def test_approve_reject_edit_and_two_operators_at_once(harness: Harness) -> None:
    sub = harness.settings.workspace / "sub"
    sub.mkdir()
    (sub / "edited.txt").write_text("edited\n")
    steps: list[tuple[str, str, list[str]]] = [
        (sid, f"Look at the workspace ({sid})", []) for sid in ("ok", "no", "edit", "race")
    ]
    plan = make_plan(steps, prefix="approve").model_copy(
        update={"approval": ApprovalPolicy(tools=("list_dir",))}
    )
    handle = await harness.start(plan)

    rows = await wait_pending(harness.client, plan.id, 4)
    by_call = {r.subtask: r for r in rows}
    assert sorted(by_call) == ["edit", "no", "ok", "race"]
    assert all(r.tool == "list_dir" and r.agent == "coder" for r in rows)
    assert json.loads(by_call["ok"].arguments) == {"path": "."}
    assert by_call["ok"].call == "ok:0.0"

    # Unknown calls are refused by the validator, with what is waiting.
    with pytest.raises(Refused, match=r"no tool call '7\.0' is waiting.*waiting: 0\.0"):
        await decide(harness.client, plan.id, "ok:7.0", approve=True, who="alice")
    with pytest.raises(Refused, match=r"no workflow approve-.*/nope answers"):
        await decide(harness.client, plan.id, "nope:0.0", approve=True, who="alice")
    with pytest.raises(ValueError, match=r"SUBTASK:TURN\.INDEX"):
        await decide(harness.client, plan.id, "ok", approve=True, who="alice")

    approved = await decide(harness.client, plan.id, by_call["ok"].call, approve=True, who="alice")
    assert approved.approved and approved.who == "alice" and approved.tool == "list_dir"
    rejected = await decide(
        harness.client, plan.id, by_call["no"].call, approve=False, who="bob", reason="not now"
    )
    assert not rejected.approved and rejected.reason == "not now"
    edited = await decide(
        harness.client,
        plan.id,
        by_call["edit"].call,
        approve=True,
        who="carol",
        arguments='{"path": "sub"}',
    )
    assert edited.arguments == '{"path": "sub"}'

    # Two operators at once: exactly one decision wins; the other is told who won.
    outcomes = await asyncio.gather(
        decide(harness.client, plan.id, "race:0.0", approve=True, who="dave"),
        decide(harness.client, plan.id, "race:0.0", approve=False, who="erin", reason="mine"),
        return_exceptions=True,
    )
    won = [o for o in outcomes if isinstance(o, ApprovalDecision)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert isinstance(lost[0], Refused)
    assert f"already {'approved' if won[0].approved else 'rejected'} by {won[0].who}" in str(
        lost[0]
    )

    report = await handle.result()
    assert report.status is PlanStatus.COMPLETED  # a rejected call is an answer, not a failure
    # Its subtask has ended: a late decision is refused, naming who decided and when
    # (the closed workflow still answers its approvals query).
    with pytest.raises(
        Refused, match=r"not running: the call \(list_dir\) was already approved by alice at 20"
    ):
        await decide(harness.client, plan.id, "ok:0.0", approve=False, who="zoe", reason="late")
    ok_answers = tool_answers(await subtask_messages(harness.store, report, "ok"))
    assert len(ok_answers) == 1 and "README.md" in (ok_answers[0].content or "")
    no_branch = await subtask_messages(harness.store, report, "no")
    no_answers = tool_answers(no_branch)
    assert len(no_answers) == 1
    assert (no_answers[0].content or "").startswith("error: this list_dir call did not run; bob")
    assert "not now" in (no_answers[0].content or "")
    assert "not now" in (by_id(report)["no"].result or "")  # the model read it and went on
    edit_branch = await subtask_messages(harness.store, report, "edit")
    edit_answers = tool_answers(edit_branch)
    assert "edited.txt" in (edit_answers[0].content or "")
    assert "README.md" not in (edit_answers[0].content or "")
    notes = [
        m.content or ""
        for m in edit_branch
        if m.role == "system" and "[approval]" in (m.content or "")
    ]
    assert len(notes) == 1 and "carol" in notes[0] and '{"path": "sub"}' in notes[0]
    race_answer = (
        tool_answers(await subtask_messages(harness.store, report, "race"))[0].content or ""
    )
    assert ("README.md" in race_answer) is won[0].approved
    # The plan's log has each decision once, the winner's alone for the race.
    log = {e.call: e for e in report.log}
    assert sorted(log) == ["edit:0.0", "no:0.0", "ok:0.0", "race:0.0"], report.log
    assert [(log[c].kind, log[c].by, log[c].subtask) for c in ("ok:0.0", "no:0.0")] == [
        ("approved", "alice", "ok"),
        ("rejected", "bob", "no"),
    ]
    assert log["no:0.0"].detail == "list_dir: not now"
    assert (
        log["edit:0.0"].detail == "list_dir with replaced arguments"
        and log["edit:0.0"].by == "carol"
    )
    assert (log["race:0.0"].by, log["race:0.0"].kind == "approved") == (won[0].who, won[0].approved)

    # The workflow keeps who decided what and when; a decided call cannot be decided again.
    snap = await harness.client.get_workflow_handle(f"{plan.id}/no").query(
        QUERY_APPROVALS, result_type=WorkflowApprovals
    )
    assert snap.pending == ()
    assert [(d.call_id, d.approved, d.who, d.reason) for d in snap.decided] == [
        ("0.0", False, "bob", "not now")
    ]
    assert snap.decided[0].at
    await assert_replays(harness.client, [plan.id, *(f"{plan.id}/{s}" for s, _, _ in steps)])


async def test_no_decision_within_the_timeout_rejects_the_call(harness: Harness) -> None:
    plan = make_plan([("slow", "Look at the workspace", [])], prefix="timeout").model_copy(
        update={"approval": ApprovalPolicy(tools="all", timeout_s=0.5)}
    )
    handle = await harness.start(plan)
    report = await handle.result()

    assert report.status is PlanStatus.COMPLETED
    answers = tool_answers(await subtask_messages(harness.store, report, "slow"))
    assert len(answers) == 1
    assert "nobody approved it in time (no decision within 0.5 s (approval_timeout))" in (
        answers[0].content or ""
    )
    snap = await harness.client.get_workflow_handle(f"{plan.id}/slow").query(
        QUERY_APPROVALS, result_type=WorkflowApprovals
    )
    assert [(d.approved, d.who) for d in snap.decided] == [(False, TIMEOUT_WHO)]
    assert [(e.kind, e.by, e.call) for e in report.log] == [("rejected", TIMEOUT_WHO, "slow:0.0")]
    with pytest.raises(Refused):
        await decide(harness.client, plan.id, "slow:0.0", approve=True, who="late")
    await assert_replays(harness.client, [plan.id, f"{plan.id}/slow"])


async def test_a_waiting_call_survives_a_sigkilled_worker(
    temporal_env: WorkflowEnvironment, client: Client, tmp_path: Path
) -> None:
    new_workspace(tmp_path, "# approval crash test\n")
    tq = f"approval-crash-{uuid.uuid4().hex[:8]}"
    plan = make_plan([("w", "Look at the workspace", [])], prefix="approval-crash").model_copy(
        update={"approval": ApprovalPolicy(tools=("list_dir",))}
    )
    with FakeProviderProcess(tmp_path / "requests.jsonl", latency_ms=0) as provider:
        env = worker_env(client, tmp_path, provider, tq)
        first = WorkerProcess(env, tmp_path / "worker-1.log").start()
        second: WorkerProcess | None = None
        try:
            first.wait_ready()
            handle = await start_plan_workflow(client, plan, tq)
            rows = await wait_pending(client, plan.id, 1)
            first.kill()
            # The workflows' next tasks go to the task queue, not to the dead worker's
            # sticky queue (where a query waits out the SDK's 10 s first).
            await forget_sticky_worker(client, tq)
            second = WorkerProcess(env, tmp_path / "worker-2.log").start()
            # The new worker rebuilds the wait from the history and takes the decision. Only
            # it can answer; the queries are asked while it starts.
            after_kill = asyncio.ensure_future(wait_pending(client, plan.id, 1))
            try:
                await asyncio.to_thread(second.wait_ready)
                try:
                    rebuilt = await after_kill
                except RPCError:  # "no poller seen": it had not polled yet; ask it again
                    rebuilt = await wait_pending(client, plan.id, 1)
            finally:
                after_kill.cancel()
            assert [r.call for r in rebuilt] == [rows[0].call]
            await decide(client, plan.id, rows[0].call, approve=True, who="alice")
            report = await asyncio.wait_for(handle.result(), timeout=WAIT_S)
        finally:
            first.stop()
            if second is not None:
                second.stop()
    assert report.status is PlanStatus.COMPLETED
    async with opened_store(tmp_path / "sessions.db") as store:
        answers = tool_answers(await subtask_messages(store, report, "w"))
    assert len(answers) == 1 and "README.md" in (answers[0].content or "")


def _dplan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, client: Client, *args: str
) -> tuple[int, str, str]:
    """``dplan ARGS`` in process against ``client``'s server."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", client.namespace)
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def test_the_commands_list_scrubbed_arguments_and_record_the_operator(
    harness: Harness, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-proj-" + "a1B2c3D4" * 5
    plan = make_plan(
        [("peek", f"Read the key file [call:read_file] OPENAI_API_KEY={secret}", [])],
        prefix="approve-cli",
    ).model_copy(update={"approval": ApprovalPolicy(tools=("read_file",), timeout_s=3600)})
    handle = await harness.start(plan)
    await wait_pending(harness.client, plan.id, 1)

    def dplan(*args: str) -> Awaitable[tuple[int, str, str]]:
        # main() runs its own event loop (asyncio.run): give it a thread of its own.
        return asyncio.to_thread(_dplan, capsys, monkeypatch, harness.client, *args)

    code, out, err = await dplan("approvals", plan.id, "--json")
    assert code == 0, err
    [row] = json.loads(out)
    assert {k: row[k] for k in ("plan", "call", "subtask", "agent", "tool", "timeout_s")} == {
        "plan": plan.id,
        "call": "peek:0.0",
        "subtask": "peek",
        "agent": "coder",
        "tool": "read_file",
        "timeout_s": 3600,
    }
    assert secret not in out and "[REDACTED:openai]" in row["arguments"]
    assert row["since"] and row["workflow_id"] == f"{plan.id}/peek"
    code, out, _ = await dplan("approvals", plan.id)
    assert code == 0 and "peek:0.0  coder  read_file  waiting" in out and secret not in out
    # Without PLAN: every running plan (found through visibility, which may lag a little).
    deadline = time.monotonic() + WAIT_S
    while not any(
        r["plan"] == plan.id for r in json.loads((await dplan("approvals", "--json"))[1])
    ):
        assert time.monotonic() < deadline, "dplan approvals never listed the running plan"
        await asyncio.sleep(0.1)
    code, _, err = await dplan("approvals", "no-such-plan-x")
    assert code == 1 and "no plan with id 'no-such-plan-x'" in err

    code, _, err = await dplan("approve", plan.id, "peek")
    assert code == 2 and "SUBTASK:TURN.INDEX" in err
    code, _, err = await dplan("approve", plan.id, "peek:0.0", "--args", "[1]")
    assert code == 2 and "the edited arguments must be a JSON object" in err

    code, out, err = await dplan(
        "reject", plan.id, "peek:0.0", "--reason", "no keys", "--who", "ops@example"
    )
    assert code == 0, err
    assert f"rejected read_file call peek:0.0 of plan {plan.id} (by ops@example)" in out
    code, _, err = await dplan("approve", plan.id, "peek:0.0", "--who", "late@example")
    assert code == 1
    assert "already rejected by ops@example" in err or "no running workflow" in err, err

    report = await handle.result()
    assert report.status is PlanStatus.COMPLETED
    # Temporal Web shows the Update with the operator as its client identity.
    identities = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.meta.identity
        async for e in harness.client.get_workflow_handle(f"{plan.id}/peek").fetch_history_events()
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert identities == ["ops@example"]


KEY = "sk-live-" + "Zq9Xw8Vu7" * 4  # what a leaked OpenAI key looks like to the scrubber


class Deployer(AgentScenario):
    """The fake's agent, but told to write the deploy file it writes ``deploy.env`` with a
    key in it, then says it is done."""

    def __call__(self, request: ChatRequest) -> Reply:
        if "deploy file" not in request.last_user_text:
            return super().__call__(request)
        if any(m.get("role") == "tool" for m in request.messages):
            return Completion(content="Wrote deploy.env.")
        content = f"API_KEY={KEY}\nREGION=eu\n"
        arguments = json.dumps({"path": "deploy.env", "content": content})
        return Completion(tool_calls=(ToolCallSpec("write_file", arguments),))


async def test_an_edit_that_keeps_a_redacted_value_is_refused_and_never_written(
    client: Client,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model wrote a key into a file; it was scrubbed before the call was stored, so
    the call is shown (and would run) with ``[REDACTED:openai]``. An operator who changes
    only the region would write that placeholder over the key: the Client, the CLI and the
    workflow itself refuse the edit with one sentence; an edit without it runs."""
    async with FakeProvider(latency_ms=0, scenario=Deployer()) as provider:
        settings = provider_settings(client, provider, tmp_path)
        (settings.workspace / "README.md").write_text("# deploy\n")
        async with running_worker(client, settings):
            plan = make_plan([("deploy", "Write the deploy file", [])], prefix="redacted")
            plan = plan.model_copy(
                update={"approval": ApprovalPolicy(tools=("write_file",), timeout_s=3600)}
            )
            handle = await start_plan_workflow(client, plan, settings.task_queue)
            [row] = await wait_pending(client, plan.id, 1)
            shown = json.loads(row.arguments)
            assert shown["content"] == "API_KEY=[REDACTED:openai]\nREGION=eu\n"
            assert KEY not in row.arguments
            region_only = json.dumps(dict(shown, content=shown["content"].replace("eu", "us")))
            sentence = r"the edited arguments still hold \[REDACTED:openai\], which stands for"

            with pytest.raises(InvalidArgument, match=sentence):
                await DplanClient(client, settings).approve(
                    plan.id, row.call, arguments=region_only
                )
            code, _, err = await asyncio.to_thread(
                _dplan, capsys, monkeypatch, client,
                "approve", plan.id, row.call, "--args", region_only,
            )  # fmt: skip
            assert code == 2 and re.search(sentence, err), err
            # The workflow's own validator says the same to a caller that skips the checks.
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await client.get_workflow_handle(f"{plan.id}/deploy").execute_update(
                    UPDATE_APPROVE,
                    ApproveInput(call_id=row.call.split(":")[1], who="eve", arguments=region_only),
                )
            assert re.search(sentence, str(refused.value.cause)), refused.value.cause

            without = json.dumps(dict(shown, content="REGION=us\n"))
            code, out, err = await asyncio.to_thread(
                _dplan, capsys, monkeypatch, client,
                "approve", plan.id, row.call, "--args", without,
            )  # fmt: skip
            assert code == 0 and "with the given arguments" in out, err
            report = await asyncio.wait_for(handle.result(), timeout=WAIT_S)
    assert report.status is PlanStatus.COMPLETED, report
    assert result_text(settings.workspace, plan.id, "deploy.env") == "REGION=us\n"
    history = (await client.get_workflow_handle(f"{plan.id}/deploy").fetch_history()).to_json()
    assert KEY not in history
    await assert_replays(client, [plan.id, f"{plan.id}/deploy"])
