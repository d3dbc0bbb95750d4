"""activities/observe.py outside a worker: nothing to count, nothing in the way."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from durable_plans.activities import observe
from durable_plans.domain.models import Message, SessionMeta, Usage
from durable_plans.session_store.sqlite import SqliteSessionStore


async def test_the_timed_store_is_the_store(tmp_path: Path) -> None:
    inner = await SqliteSessionStore.open(tmp_path / "s.db")
    store = observe.timed_store(inner)
    try:
        await store.create_session(SessionMeta(session_id="s"))
        assert await store.append("s", [Message(id="m1", role="user", content="hi")]) == 1
        assert [m.id for m in await store.read("s")] == ["m1"]
        assert await store.charge("root", "c1", Usage(prompt_tokens=3)) == Usage(prompt_tokens=3)
        # Not an operation of the store's interface: handed through untouched.
        assert observe.TimedStore(inner).__getattr__("path") == inner.path
    finally:
        await store.close()


def test_error_types_are_the_classified_ones() -> None:
    assert observe.error_type_of(ApplicationError("x", type="RateLimit")) == "RateLimit"
    assert observe.error_type_of(ValueError("x")) == "ValueError"


def test_an_llm_request_outside_an_activity_records_nothing_and_reraises() -> None:
    with pytest.raises(ApplicationError), observe.llm_request("m", "coder") as request:
        request.answered(Usage(prompt_tokens=1))
        raise ApplicationError("boom", type="ServerError")


def test_a_taken_metrics_port_is_named() -> None:
    import socket

    from durable_plans import telemetry
    from durable_plans.settings import Settings

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(telemetry.TelemetryError, match=f"DPLAN_METRICS_PORT={port}"):
            telemetry.install(Settings(metrics_port=port))
