"""Private payloads on a real dev server: an encrypting client and worker run a plan, and
what the server stores (fetched by a client without the key) holds none of its text.

The plan's text and the model's answer are unique per test, so finding them anywhere in
the serialized history (where payload data are raw bytes) means a plaintext leak.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf.message import Message as ProtoMessage
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory

from durable_plans._errors import PayloadKeyError
from durable_plans.cli.replay_command import replay_command
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, Subtask
from durable_plans.payload_codec import ENCODING, EncryptionCodec, PayloadKeyring, key_ids_in
from durable_plans.plugin import DurablePlansPlugin, client_carrying
from durable_plans.sandbox_runner import ContextFreeSandboxedRunner
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider
from durable_plans.testing._fake_scenario import Completion, ScriptedScenario
from tests.integration.conftest import provider_settings, running_worker
from tests.integration.plans import start_plan_workflow

pytestmark = pytest.mark.integration

OLD_KEY = ("2025-01", bytes(range(32)))
NEW_KEY = ("2025-06", bytes(range(64, 96)))


@dataclass
class Secrets:
    """Text that must never reach the server in the clear."""

    goal: str
    description: str
    answer: str

    @classmethod
    def fresh(cls) -> Secrets:
        tag = uuid.uuid4().hex[:12]
        return cls(
            goal=f"GOAL-merger-with-acme-{tag}",
            description=f"DESC-draft-the-term-sheet-{tag}",
            answer=f"ANSWER-price-is-42-million-{tag}",
        )

    def texts(self) -> tuple[str, ...]:
        return (self.goal, self.description, self.answer)


def payloads_in(message: ProtoMessage, path: str = "") -> Iterator[tuple[str, Payload]]:
    """Every Payload inside a protobuf message, with the field path that holds it."""
    if isinstance(message, Payload):
        yield path, message
        return
    for field, value in message.ListFields():
        where = f"{path}.{field.name}"
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(item, ProtoMessage):
                    yield from payloads_in(item, f"{where}[{key}]")
        elif isinstance(value, ProtoMessage):
            yield from payloads_in(value, where)
        else:  # a repeated message field
            for item in value:
                yield from payloads_in(item, where)


def leaks(history: WorkflowHistory, texts: tuple[str, ...]) -> list[str]:
    """Texts found in the history as the server stores it, and where.

    Search attributes included: a codec cannot cover them (the server indexes them), so an
    encrypting worker leaves the goal out of them, and a leak there is a leak.
    """
    found = []
    for event in history.events:
        for where, payload in payloads_in(event):
            raw = payload.SerializeToString()
            for text in texts:
                if text.encode() in raw:
                    found.append(f"{text!r} in event {event.event_id} {where}")
    # Nothing outside payloads either (failure messages, names, ids...).
    bytes_of_history = b"".join(e.SerializeToString() for e in history.events)
    for text in texts:
        if text.encode() in bytes_of_history and not any(text in f for f in found):
            found.append(f"{text!r} outside payloads in the history")
    return found


def codec_for(*keys: tuple[str, bytes]) -> EncryptionCodec:
    return PayloadKeyring.from_entries(list(keys)).codec()


def settings_for(
    client: Client, tmp_path: Path, provider: FakeProvider, *keys: tuple[str, bytes]
) -> Settings:
    keyring = PayloadKeyring.from_entries(list(keys)) if keys else None
    return provider_settings(client, provider, tmp_path, prefix="enc", payload_keys=keyring)


@pytest.fixture
def secrets() -> Secrets:
    return Secrets.fresh()


@pytest.fixture
async def provider(secrets: Secrets) -> AsyncIterator[FakeProvider]:
    """A model that answers every request with the secret answer at once."""
    scenario = ScriptedScenario([Completion(content=f"Final: {secrets.answer}")])
    async with FakeProvider(scenario=scenario, latency_ms=0) as p:
        yield p


@contextlib.asynccontextmanager
async def keyed_worker(client: Client, settings: Settings) -> AsyncIterator[Client]:
    """A worker with ``settings`` (and their keys) on the dev server; yields a client that
    encodes as that worker does (the plugin derives the codec from the settings)."""
    settings.workspace.mkdir(parents=True, exist_ok=True)
    async with running_worker(client, settings) as (worker, _):
        # Our codec ignores the serialization context, so the worker skips the sandbox's
        # per-payload context trips (sandbox_runner.py); these tests show the encoding holds.
        runner = worker.config(active_config=True)["workflow_runner"]
        assert type(runner) is ContextFreeSandboxedRunner
        yield client_carrying(client, DurablePlansPlugin(settings=settings))


def secret_plan(secrets: Secrets) -> Plan:
    return Plan(
        id=f"enc-{uuid.uuid4().hex[:10]}",
        goal=secrets.goal,
        subtasks=(Subtask(id="terms", description=secrets.description, agent="coder"),),
    )


async def histories(client: Client, plan: Plan) -> list[WorkflowHistory]:
    ids = [plan.id, *(f"{plan.id}/{s.id}" for s in plan.subtasks)]
    return [await client.get_workflow_handle(i).fetch_history() for i in ids]


async def test_the_server_stores_no_plaintext_and_the_key_reads_it_back(
    client: Client, provider: FakeProvider, secrets: Secrets, tmp_path: Path
) -> None:
    settings = settings_for(client, tmp_path, provider, OLD_KEY)
    plan = secret_plan(secrets)
    async with keyed_worker(client, settings) as encrypting:
        report = await encrypting.execute_workflow(
            "PlanWorkflow",
            PlanInput(plan=plan),
            id=plan.id,
            task_queue=settings.task_queue,
            result_type=PlanReport,
        )
    # The encrypting client reads the report in the clear.
    assert report.status is PlanStatus.COMPLETED, report
    assert secrets.answer in (report.subtasks[0].result or "")

    # A client without the key (the test server's plain one) sees only ciphertext.
    stored = await histories(client, plan)
    for history in stored:
        assert leaks(history, secrets.texts()) == [], history.workflow_id
    encrypted = [
        p
        for h in stored
        for e in h.events
        for _, p in payloads_in(e)
        if p.metadata.get("encoding") == ENCODING
    ]
    assert encrypted, "no encrypted payload in the history"
    assert {p.metadata["encryption-key-id"] for p in encrypted} == {b"2025-01"}

    # With the key, every text is back: decode every payload of the histories.
    codec = codec_for(OLD_KEY)
    decoded = b"".join(p.SerializeToString() for p in await codec.decode(encrypted))
    for text in secrets.texts():
        assert text.encode() in decoded, text

    # A wrong key fails, naming the key id the payloads need.
    with pytest.raises(PayloadKeyError, match="key id '2025-01', which is not among"):
        await codec_for(NEW_KEY).decode(encrypted[:1])
    with pytest.raises(PayloadKeyError, match="does not decrypt"):
        await codec_for(("2025-01", NEW_KEY[1])).decode(encrypted[:1])

    # `dplan replay` replays the encrypted histories with the worker's keys, and cannot
    # without them (the workflow input does not decode).
    assert await replay_command(plan.id, children=True, settings=settings, out=io.StringIO()) == 0
    err = io.StringIO()
    rotated_away = settings_for(client, tmp_path, provider, NEW_KEY)
    assert await replay_command(plan.id, settings=rotated_away, err=err) == 1
    assert "encrypted with key id(s) '2025-01'" in err.getvalue()


async def test_the_leak_check_finds_the_plaintext_of_a_plan_run_without_a_key(
    client: Client, provider: FakeProvider, secrets: Secrets, tmp_path: Path
) -> None:
    """The control: the same run, unencrypted, is caught by ``leaks`` (the check above is
    not vacuous)."""
    settings = settings_for(client, tmp_path, provider)
    plan = secret_plan(secrets)
    async with keyed_worker(client, settings) as plain:
        await plain.execute_workflow(
            "PlanWorkflow", PlanInput(plan=plan), id=plan.id, task_queue=settings.task_queue
        )
    stored = await histories(client, plan)
    found = "\n".join(line for h in stored for line in leaks(h, secrets.texts()))
    for text in (secrets.description, secrets.answer):
        assert text in found


async def test_rotation_a_plan_written_under_the_old_key_is_read_after_a_new_one_is_added(
    client: Client, provider: FakeProvider, secrets: Secrets, tmp_path: Path
) -> None:
    """Start under the old key (no worker yet), then a worker whose current key is new and
    which still lists the old one finishes the plan: both kinds of payload decode."""
    old = settings_for(client, tmp_path, provider, OLD_KEY)
    plan = secret_plan(secrets)
    starter = client_carrying(client, DurablePlansPlugin(settings=old))
    handle = await start_plan_workflow(starter, plan, old.task_queue)
    rotated = dataclasses.replace(old, payload_keys=PayloadKeyring.from_entries([NEW_KEY, OLD_KEY]))
    async with keyed_worker(client, rotated) as encrypting:
        report = await encrypting.get_workflow_handle(plan.id, result_type=PlanReport).result()
    assert report.status is PlanStatus.COMPLETED
    assert handle.id == plan.id
    stored = await histories(client, plan)
    assert key_ids_in(e for h in stored for e in h.events) == {"2025-01", "2025-06"}
    for history in stored:
        assert leaks(history, secrets.texts()) == []
