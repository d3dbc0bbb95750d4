"""Tenants' daily caps: the file, the rule, the ledger the real stores keep, and the
check before a call (``domain/tenants.py``, ``activities/tenant_caps.py``)."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from durable_plans._errors import SettingsError
from durable_plans.activities.llm import LlmActivities
from durable_plans.activities.spend import record_paid
from durable_plans.activities.tenant_caps import TenantCapsFile, TenantGate, today
from durable_plans.domain.models import Usage
from durable_plans.domain.tenants import (
    DEFAULT_RECHECK_S,
    TenantCap,
    TenantsConfigError,
    ledger_of,
    no_room,
    parse_tenants,
    read_tenants,
    refusal,
)
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

TOML = """
recheck_s = 60
[tenants.team-a]
tokens = 1_000
usd = 2.5
[tenants."team b"]
usd = 1
"""


def test_the_file_in_toml_and_in_json_gives_the_same_caps(tmp_path: Path) -> None:
    as_toml = tmp_path / "tenants.toml"
    as_toml.write_text(TOML)
    as_json = tmp_path / "tenants.json"
    as_json.write_text(
        '{"recheck_s": 60, "tenants": {"team-a": {"tokens": 1000, "usd": 2.5},'
        ' "team b": {"usd": 1}}}'
    )
    caps = read_tenants(as_toml)
    assert caps == read_tenants(as_json)
    assert caps.cap_of("team-a") == TenantCap(tokens=1000, usd=2.5)
    assert caps.cap_of("team b") == TenantCap(usd=1)
    assert caps.cap_of("nobody") is None and caps.cap_of(None) is None
    assert caps.recheck_s == 60
    assert parse_tenants("", source="x", as_json=False).recheck_s == DEFAULT_RECHECK_S


@pytest.mark.parametrize(
    ("text", "as_json", "problems"),
    [
        ("[tenants.a]\ntokens = -1\n", False, ["f: tenants.a.tokens: Input should be greater"]),
        ("[tenants.a]\n", False, ["f: tenants.a: Value error, sets no limit"]),
        (
            "[tenants.a]\ntoken = 5\n[tenants.b]\nusd = 'x'\n",
            False,
            ["f: tenants.a.token: Extra inputs", "f: tenants.b.usd: Input should be a valid"],
        ),
        ("recheck_s = 0\n", False, ["f: recheck_s: Input should be greater than or equal to 0.1"]),
        ("[tenants.a\n", False, ["f: not valid TOML"]),
        ("[1, 2]", True, ["f: expected a table of tenants, got list"]),
        ("{", True, ["f: not valid JSON"]),
    ],
)
def test_a_bad_file_names_every_problem(text: str, as_json: bool, problems: list[str]) -> None:
    with pytest.raises(TenantsConfigError) as caught:
        parse_tenants(text, source="f", as_json=as_json)
    lines = str(caught.value).splitlines()
    assert len(lines) == len(problems), lines
    for line, expected in zip(lines, problems, strict=True):
        assert line.startswith(expected), line


def test_a_call_is_refused_when_it_would_pass_the_cap() -> None:
    day = date(2026, 11, 28)
    cap = TenantCap(tokens=1000, usd=2.0)
    spent = Usage(prompt_tokens=700, completion_tokens=200, cost_usd=1.5)
    assert refusal("t", cap, spent, day=day, tokens=100, usd=0.5) is None  # exactly at it
    why = refusal("t", cap, spent, day=day, tokens=101)
    assert why == (
        "tenant 't' has used 900 of its 1,000 tokens today (2026-11-28 UTC); "
        "this call needs about 101 more"
    )
    why = refusal("t", cap, spent, day=day, tokens=1, usd=0.6)
    assert why is not None and why.startswith("tenant 't' has spent $1.5000 of its $2")


def test_a_spend_exactly_at_a_cap_leaves_no_room_in_tokens_or_dollars() -> None:
    day = date(2026, 11, 28)
    assert no_room("t", TenantCap(usd=2.0), Usage(cost_usd=1.99), day=day) is None
    assert no_room("t", TenantCap(usd=2.0), Usage(cost_usd=2.0), day=day) is not None
    assert no_room("t", TenantCap(tokens=10), Usage(prompt_tokens=9), day=day) is None
    assert no_room("t", TenantCap(tokens=10), Usage(prompt_tokens=10), day=day) is not None


async def test_the_ledger_counts_each_answer_once_per_attempt(store: SessionStore) -> None:
    usage = Usage(prompt_tokens=30, completion_tokens=12)
    await record_paid(store, "root", "call-1", usage, tenant="t")
    await record_paid(store, "root", "call-1", usage, tenant="t")  # the same attempt again
    await record_paid(store, "root", "call-2", usage, tenant="t")
    await record_paid(store, "root", "call-3", usage)  # a plan without a tenant
    assert await store.total_usage(ledger_of("t", today())) == usage + usage
    assert await store.total_usage("root") == usage + usage + usage


async def test_the_gate_reads_the_shared_ledger_and_the_file_as_it_changes(
    store: SessionStore, tmp_path: Path
) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text("[tenants.t]\ntokens = 100\n")
    gate = TenantGate(store, TenantCapsFile.load(path))
    request = {"model": "openai/fake", "messages": [{"role": "user", "content": "x" * 200}]}
    await gate.check("t", request)  # about 60 tokens of 100
    await gate.check("other", request)  # no cap
    await gate.check(None, request)
    await store.charge(ledger_of("t", today()), "earlier", Usage(prompt_tokens=60))
    with pytest.raises(ApplicationError) as caught:
        await gate.check("t", request)
    assert caught.value.type == "TenantBudgetExceeded" and caught.value.non_retryable
    assert "tenant 't' has used 60 of its 100 tokens today" in caught.value.message
    assert "(cap: 100 tokens a day)" in caught.value.message
    assert (await gate.room("t")).room  # 60 of 100: room for a small call

    # A broken edit keeps the caps in force; a good one replaces them.
    path.write_text("[tenants.t]\ntokens = 'many'\n")
    os.utime(path, ns=(1, 1))
    with pytest.raises(ApplicationError):
        await gate.check("t", request)
    path.write_text("recheck_s = 2\n[tenants.t]\ntokens = 1000\n")
    await gate.check("t", request)
    room = await gate.room("t")
    assert room.room and room.recheck_s == 2


async def test_a_full_tenant_has_no_room_until_the_cap_is_raised(
    store: SessionStore, tmp_path: Path
) -> None:
    path = tmp_path / "tenants.json"
    path.write_text('{"tenants": {"t": {"tokens": 50}}}')
    gate = TenantGate(store, TenantCapsFile.load(path))
    await store.charge(ledger_of("t", today()), "all of it", Usage(prompt_tokens=50))
    room = await gate.room("t")
    assert not room.room and room.why.startswith("tenant 't' has used 50 of its 50 tokens")
    path.write_text('{"tenants": {"t": {"tokens": 51}}}')
    os.utime(path, ns=(2, 2))
    assert (await gate.room("t")).room


async def test_a_worker_with_a_bad_tenants_file_does_not_start(
    store: SessionStore, tmp_path: Path
) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text("[tenants.t]\nusd = -2\n")
    with pytest.raises(SettingsError, match=r"DPLAN_TENANTS: .*tenants.t.usd: Input should be"):
        LlmActivities(store, Settings(tenants_file=path))
    with pytest.raises(SettingsError, match="cannot be read"):
        LlmActivities(store, Settings(tenants_file=tmp_path / "missing.toml"))
