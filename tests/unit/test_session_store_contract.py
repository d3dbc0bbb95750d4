"""The session-store contract, run against every backend.

Each test takes the ``store`` (or ``open_store``) fixture, which is parametrized over
SQLite and PostgreSQL: the backends must be interchangeable, so they answer to one suite.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durable_plans.domain.models import Budget, FunctionCall, Message, SessionMeta, ToolCall
from durable_plans.session_store import (
    MessageIdRequired,
    SessionNotFound,
    SessionStore,
    SessionStoreError,
    SnapshotNotFound,
    SnapshotSessionMismatch,
    _codec,
)
from durable_plans.session_store.factory import (
    describe_store_target,
    open_session_store,
    split_postgres_target,
)
from durable_plans.session_store.postgres import quote_identifier
from durable_plans.session_store.sqlite import SqliteSessionStore

OpenStore = Callable[[], Awaitable[SessionStore]]  # the ``open_store`` fixture

# --------------------------------------------------------------------------- helpers


def user(id: str, content: str = "hi") -> Message:
    return Message(id=id, role="user", content=content)


def answer(id: str, content: str) -> Message:
    return Message(id=id, role="assistant", content=content)


def call(id: str, call_id: str, tool: str = "read_file") -> Message:
    fn = FunctionCall(name=tool, arguments='{"path": "a.txt"}')
    return Message(id=id, role="assistant", tool_calls=(ToolCall(id=call_id, function=fn),))


def result(id: str, call_id: str, content: str = "ok") -> Message:
    return Message(id=id, role="tool", content=content, tool_call_id=call_id, name="read_file")


async def new_session(store: SessionStore, session_id: str = "s1") -> str:
    await store.create_session(SessionMeta(session_id=session_id))
    return session_id


def base_history() -> list[Message]:
    return [
        Message(id="b0", role="system", content="You are the orchestrator."),
        user("b1", "Build a weather app"),
        call("b2", "call_1"),
        result("b3", "call_1", "pubspec.yaml contents"),
        answer("b4", "Plan ready."),
    ]


def long_conversation(n: int) -> list[Message]:
    """User question, tool call, tool result, answer, repeated."""
    makers: list[Callable[[int], Message]] = [
        lambda i: user(f"m{i}", f"question {i} " + "q" * 200),
        lambda i: call(f"m{i}", f"call_{i}"),
        lambda i: result(f"m{i}", f"call_{i - 1}", "r" * 200),
        lambda i: answer(f"m{i}", f"answer {i}"),
    ]
    return [makers[i % 4](i) for i in range(n)]


def subtask_turns(prefix: str, final: str) -> list[Message]:
    return [
        Message(id=f"{prefix}-sys", role="system", content="Dependency results: ..."),
        call(f"{prefix}-c1", f"{prefix}_call_1"),
        result(f"{prefix}-r1", f"{prefix}_call_1"),
        answer(f"{prefix}-draft", "draft answer"),
        call(f"{prefix}-c2", f"{prefix}_call_2"),
        result(f"{prefix}-r2", f"{prefix}_call_2"),
        answer(f"{prefix}-final", final),
    ]


# --------------------------------------------------------------------------- sessions


async def test_create_session_is_idempotent_and_keeps_first_meta(store: SessionStore) -> None:
    first = SessionMeta(session_id="s1", agent="coder", budget=Budget(max_tokens=1000), depth=1)
    assert await store.create_session(first) == first
    second = SessionMeta(session_id="s1", agent="architect")
    assert await store.create_session(second) == first
    assert await store.get_session("s1") == first


async def test_update_session_overwrites_metadata(store: SessionStore) -> None:
    await new_session(store)
    updated = SessionMeta(session_id="s1", agent="debug", ended=True, parent_session_id="p")
    await store.update_session(updated)
    assert await store.get_session("s1") == updated


_UNKNOWN_SESSION_CALLS: dict[str, Callable[[SessionStore], Awaitable[object]]] = {
    "get_session": lambda s: s.get_session("nope"),
    "update_session": lambda s: s.update_session(SessionMeta(session_id="nope")),
    "append": lambda s: s.append("nope", [user("m1")]),
    "append_empty": lambda s: s.append("nope", []),
    "read": lambda s: s.read("nope"),
    "count": lambda s: s.count("nope"),
    "replace": lambda s: s.replace("nope", [user("m1")]),
    "snapshot": lambda s: s.snapshot("nope", "snap"),
    "restore": lambda s: s.restore("nope", "snap"),
}


@pytest.mark.parametrize("operation", sorted(_UNKNOWN_SESSION_CALLS))
async def test_unknown_session_raises_session_not_found(
    store: SessionStore, operation: str
) -> None:
    with pytest.raises(SessionNotFound) as caught:
        await _UNKNOWN_SESSION_CALLS[operation](store)
    assert caught.value.session_id == "nope"
    assert await store.has_snapshot("snap") is False


# --------------------------------------------------------------------------- append / read


async def test_append_without_id_writes_nothing(store: SessionStore) -> None:
    sid = await new_session(store)
    with pytest.raises(MessageIdRequired):
        await store.append(sid, [user("m1"), Message(role="user", content="no id")])
    assert await store.count(sid) == 0


async def test_retried_append_is_a_no_op(store: SessionStore) -> None:
    sid = await new_session(store)
    batch = [user("m1"), answer("m2", "one"), user("m3")]
    assert await store.append(sid, batch) == 3
    assert await store.append(sid, batch) == 0
    assert await store.append(sid, [batch[1], user("m4")]) == 1
    assert [m.id for m in await store.read(sid)] == ["m1", "m2", "m3", "m4"]
    assert await store.count(sid) == 4


async def test_duplicates_within_one_batch_are_written_once(store: SessionStore) -> None:
    sid = await new_session(store)
    added = await store.append(sid, [user("a", "first"), user("b"), user("a", "second")])
    assert added == 2
    history = await store.read(sid)
    assert [(m.id, m.content) for m in history] == [("a", "first"), ("b", "hi")]


async def test_sessions_are_separate(store: SessionStore) -> None:
    await new_session(store, "s1")
    await new_session(store, "s2")
    await store.append("s1", [user("m1", "for s1")])
    assert await store.append("s2", [user("m1", "for s2")]) == 1
    assert (await store.read("s1"))[0].content == "for s1"
    assert (await store.read("s2"))[0].content == "for s2"


async def test_every_field_round_trips(store: SessionStore) -> None:
    sid = await new_session(store)
    two_calls = (
        ToolCall(id="call_a", function=FunctionCall(name="write_file", arguments='{"p": 1}')),
        ToolCall(id="call_b", function=FunctionCall(name="broken", arguments="{not json")),
    )
    messages = [
        Message(id="m0", role="system", content='système — 天气 🌦️ "quoted" \\ \n\t\x00end'),
        Message(id="m1", role="user", content=""),
        Message(id="m2", role="assistant", content=None, tool_calls=two_calls),
        Message(id="m3", role="tool", content='{"ok": true}', tool_call_id="call_a", name="w"),
        Message(id="m4", role="tool", content=None, tool_call_id="call_b"),
        Message(id="m5", role="assistant", content="thinking", tool_calls=two_calls[:1]),
        Message(id="m6 with spaces/ü", role="assistant", content="done", name="coder"),
    ]
    await store.append(sid, messages)
    assert await store.read(sid) == messages
    assert await store.read(sid) == messages  # reads have no side effects


async def test_empty_session_reads_as_empty(store: SessionStore) -> None:
    sid = await new_session(store)
    assert await store.read(sid) == []
    assert await store.count(sid) == 0
    assert await store.append(sid, []) == 0


# --------------------------------------------------------------------------- concurrency


def _assert_batches_contiguous(history: list[Message], batches: list[list[Message]]) -> None:
    ids = [m.id for m in history]
    assert len(ids) == len(set(ids)), "an id was written twice"
    position = {mid: i for i, mid in enumerate(ids)}
    for batch in batches:
        start = position[batch[0].id]
        assert ids[start : start + len(batch)] == [m.id for m in batch], "batch interleaved"


async def test_concurrent_appends_lose_nothing_and_never_interleave(
    store: SessionStore,
) -> None:
    sid = await new_session(store)
    batches = [[user(f"b{b}-m{i}", f"{b}/{i}") for i in range(20)] for b in range(50)]
    added = await asyncio.gather(*(store.append(sid, batch) for batch in batches))
    assert added == [20] * 50
    history = await store.read(sid)
    assert len(history) == 1000
    _assert_batches_contiguous(history, batches)


async def test_two_store_instances_append_concurrently(open_store: OpenStore) -> None:
    """Two workers sharing one SQLite file (or one database) must not corrupt a session."""
    first, second = await open_store(), await open_store()
    sid = await new_session(first)
    batches = [[user(f"b{b}-m{i}") for i in range(20)] for b in range(50)]
    writers = [(first if b % 2 else second).append(sid, batch) for b, batch in enumerate(batches)]
    assert sum(await asyncio.gather(*writers)) == 1000
    history = await second.read(sid)
    assert len(history) == 1000
    _assert_batches_contiguous(history, batches)


async def test_concurrent_retries_of_one_batch_write_it_once(open_store: OpenStore) -> None:
    first, second = await open_store(), await open_store()
    sid = await new_session(first)
    batch = [user(f"m{i}") for i in range(20)]
    added = await asyncio.gather(*((first, second)[i % 2].append(sid, batch) for i in range(10)))
    assert sum(added) == 20
    assert [m.id for m in await first.read(sid)] == [m.id for m in batch]


_REPO_ROOT = Path(__file__).resolve().parents[2]
_WORKER_SCRIPT = """
import asyncio, sys
from durable_plans.domain.models import Message
from durable_plans.session_store.factory import open_session_store

async def main(target, worker):
    store = await open_session_store(target)
    batches = [
        [Message(id=f"w{worker}-b{b}-m{i}", role="user", content="x") for i in range(20)]
        for b in range(25)
    ]
    added = await asyncio.gather(*(store.append("s1", batch) for batch in batches))
    await store.close()
    assert sum(added) == 500, added

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_two_worker_processes_append_to_one_session(
    store_target: str, store: SessionStore
) -> None:
    """Two worker processes on one host share the SQLite file (or the database)."""
    sid = await new_session(store)
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WORKER_SCRIPT, store_target, str(worker), cwd=_REPO_ROOT
        )
        for worker in range(2)
    ]
    assert [await w.wait() for w in workers] == [0, 0]
    history = await store.read(sid)
    assert len(history) == 1000
    batches = [[user(f"w{w}-b{b}-m{i}") for i in range(20)] for w in range(2) for b in range(25)]
    _assert_batches_contiguous(history, batches)


async def test_concurrent_opens_of_a_fresh_store_all_succeed(open_store: OpenStore) -> None:
    stores = await asyncio.gather(*(open_store() for _ in range(5)))
    sid = await new_session(stores[0])
    await stores[-1].append(sid, [user("m1")])
    assert await stores[2].count(sid) == 1


async def test_replace_is_atomic_for_concurrent_readers(open_store: OpenStore) -> None:
    writer, reader = await open_store(), await open_store()
    sid = await new_session(writer)
    old = [user(f"old-{i}") for i in range(120)]
    new = [answer(f"new-{i}", "n") for i in range(80)]
    await writer.append(sid, old)
    seen: list[list[str]] = []
    done = asyncio.Event()

    async def read_until_done() -> None:
        while not done.is_set():
            seen.append([m.id for m in await reader.read(sid)])

    async def toggle() -> None:
        for i in range(20):
            await writer.replace(sid, new if i % 2 == 0 else old)
            await asyncio.sleep(0)
        done.set()

    await asyncio.gather(read_until_done(), toggle())
    allowed = ([m.id for m in old], [m.id for m in new])
    assert seen and all(ids in allowed for ids in seen)


# --------------------------------------------------------------------------- replace


async def test_replace_swaps_history_and_appends_continue_after_it(store: SessionStore) -> None:
    sid = await new_session(store)
    await store.append(sid, base_history())
    isolated = [base_history()[0], base_history()[1], base_history()[4]]
    await store.replace(sid, isolated)
    assert await store.read(sid) == isolated
    await store.append(sid, [user("after")])
    assert [m.id for m in await store.read(sid)] == ["b0", "b1", "b4", "after"]
    # An id dropped by replace is no longer in the session, so it may be appended again.
    assert await store.append(sid, [base_history()[2]]) == 1
    await store.replace(sid, [])
    assert await store.count(sid) == 0


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ([user("x"), Message(role="user", content="no id")], MessageIdRequired),
        ([user("x"), user("y"), user("x")], ValueError),
    ],
)
async def test_invalid_replace_changes_nothing(
    store: SessionStore, bad: list[Message], error: type[Exception]
) -> None:
    sid = await new_session(store)
    await store.append(sid, base_history())
    with pytest.raises(error):
        await store.replace(sid, bad)
    assert await store.read(sid) == base_history()


# --------------------------------------------------------------------------- snapshots


async def test_snapshot_is_kept_when_taken_again(store: SessionStore) -> None:
    sid = await new_session(store)
    await store.append(sid, base_history())
    assert await store.snapshot(sid, "snap") == 5
    await store.append(sid, [user("later")])
    assert await store.snapshot(sid, "snap") == 5  # a retried activity sees the first copy
    assert await store.read_snapshot("snap") == base_history()
    assert await store.restore(sid, "snap") == base_history()


async def test_restore_is_exact_and_repeatable(store: SessionStore) -> None:
    sid = await new_session(store)
    await store.append(sid, base_history())
    await store.snapshot(sid, "snap")
    await store.replace(sid, [base_history()[0], user("isolated")])
    await store.append(sid, subtask_turns("t", "final"))
    restored = await store.restore(sid, "snap")
    assert restored == base_history()
    assert await store.read(sid) == base_history()
    assert await store.restore(sid, "snap") == base_history()
    assert await store.has_snapshot("snap")  # restore does not consume the snapshot


async def test_restore_undoes_edits_to_messages_at_the_same_position(
    store: SessionStore,
) -> None:
    sid = await new_session(store)
    await store.append(sid, base_history())
    await store.snapshot(sid, "snap")
    edited = base_history()
    edited[1] = user("b1", "a different question under the same id")
    edited[3] = user("other-id")
    await store.replace(sid, edited)
    assert await store.restore(sid, "snap") == base_history()


async def test_restore_keeping_last_result_adds_it_once(store: SessionStore) -> None:
    sid = await new_session(store)
    await store.append(sid, base_history())
    await store.snapshot(sid, "snap")
    await store.append(sid, subtask_turns("t", "the subtask's answer"))
    await store.append(sid, [call("t-c3", "t_call_3"), result("t-r3", "t_call_3")])

    expected = [*base_history(), answer("t-final", "the subtask's answer")]
    assert await store.restore(sid, "snap", keep_last_result=True) == expected
    assert await store.restore(sid, "snap", keep_last_result=True) == expected
    assert await store.read(sid) == expected
    assert await store.restore(sid, "snap") == base_history()


async def test_keep_last_result_ignores_answers_from_before_the_snapshot(
    store: SessionStore,
) -> None:
    sid = await new_session(store)
    await store.append(sid, base_history())  # ends with the plain answer "b4"
    await store.snapshot(sid, "snap")
    await store.append(
        sid,
        [
            call("t-c1", "t_call_1"),
            result("t-r1", "t_call_1"),
            Message(id="t-empty", role="assistant", content=""),
            Message(
                id="t-mixed",
                role="assistant",
                content="calling",
                tool_calls=call("x", "t_call_2").tool_calls,
            ),
            result("t-r2", "t_call_2"),
            user("t-user", "a user message is not a result"),
        ],
    )
    assert await store.restore(sid, "snap", keep_last_result=True) == base_history()


async def test_snapshot_belongs_to_its_session(store: SessionStore) -> None:
    await new_session(store, "s1")
    await new_session(store, "s2")
    await store.append("s1", base_history())
    await store.append("s2", [user("own")])
    await store.snapshot("s1", "snap")
    with pytest.raises(SnapshotSessionMismatch, match="belongs to session 's1'"):
        await store.restore("s2", "snap")
    with pytest.raises(SnapshotSessionMismatch):
        await store.snapshot("s2", "snap")
    assert [m.id for m in await store.read("s2")] == ["own"]
    assert await store.restore("s1", "snap") == base_history()


async def test_delete_snapshot(store: SessionStore) -> None:
    sid = await new_session(store)
    await store.append(sid, base_history())
    assert await store.has_snapshot("snap") is False
    await store.snapshot(sid, "snap")
    assert await store.has_snapshot("snap") is True
    assert await store.delete_snapshot("snap") is True
    assert await store.has_snapshot("snap") is False
    assert await store.delete_snapshot("snap") is False
    with pytest.raises(SnapshotNotFound):
        await store.restore(sid, "snap")
    with pytest.raises(SnapshotNotFound):
        await store.read_snapshot("snap")
    assert await store.read(sid) == base_history()
    # The id is free again: a new snapshot takes the current history.
    await store.append(sid, [user("later")])
    assert await store.snapshot(sid, "snap") == 6
    assert (await store.read_snapshot("snap"))[-1].id == "later"


async def test_snapshot_of_empty_session_restores_to_empty(store: SessionStore) -> None:
    sid = await new_session(store)
    assert await store.snapshot(sid, "snap") == 0
    assert await store.read_snapshot("snap") == []
    await store.append(sid, subtask_turns("t", "answer"))
    assert await store.restore(sid, "snap") == []
    await store.append(sid, subtask_turns("t", "answer"))
    assert await store.restore(sid, "snap", keep_last_result=True) == [answer("t-final", "answer")]


async def test_ten_thousand_message_snapshot_round_trip(store: SessionStore) -> None:
    sid = await new_session(store)
    history = long_conversation(10_000)
    for start in range(0, len(history), 1000):
        await store.append(sid, history[start : start + 1000])
    assert await store.snapshot(sid, "big") == 10_000
    await store.replace(sid, [m for m in history if not m.is_tool_traffic][-50:])
    await store.append(sid, subtask_turns("t", "big answer"))
    restored = await store.restore(sid, "big", keep_last_result=True)
    assert restored == [*history, answer("t-final", "big answer")]
    assert await store.count(sid) == 10_001


# --------------------------------------------------------------------------- codec


_text = st.text(max_size=40)
_tool_calls = st.lists(
    st.builds(
        ToolCall,
        id=_text,
        function=st.builds(FunctionCall, name=_text, arguments=_text),
    ),
    min_size=1,
    max_size=3,
).map(tuple)


@given(
    message=st.builds(
        Message,
        id=st.text(min_size=1, max_size=20),
        role=st.sampled_from(["system", "user", "assistant", "tool"]),
        content=st.none() | _text,
        tool_calls=st.none() | _tool_calls,
        tool_call_id=st.none() | _text,
        name=st.none() | _text,
    )
)
def test_codec_round_trips_any_message(message: Message) -> None:
    row = _codec.encode(message)
    assert _codec.decode(row.body) == message
    assert row.id == message.id
    assert row.is_result == message.is_plain_assistant
    assert "\x00" not in row.body  # PostgreSQL text cannot hold NUL


# --------------------------------------------------------------------------- backend-specific


async def test_sqlite_store_creates_parent_directories_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "sessions.db"
    store = await SqliteSessionStore.open(path)
    try:
        await new_session(store)
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    conn.close()


async def test_closed_sqlite_store_refuses_work(tmp_path: Path) -> None:
    store = await SqliteSessionStore.open(tmp_path / "s.db")
    await store.close()
    with pytest.raises(SessionStoreError, match="closed"):
        await store.get_session("s1")


async def test_a_store_written_by_newer_code_is_refused(
    store_target: str, store: SessionStore
) -> None:
    """Old workers must not write into a layout they do not know."""
    if store_target.startswith("postgres"):
        import asyncpg

        dsn, schema = split_postgres_target(store_target)
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f'INSERT INTO "{schema}".schema_version VALUES (99)')
        finally:
            await admin.close()
    else:
        with sqlite3.connect(store_target) as conn:
            conn.execute("PRAGMA user_version = 99")
        conn.close()
    with pytest.raises(SessionStoreError, match="version 99"):
        await open_session_store(store_target)


@pytest.mark.parametrize("name", ["", "1abc", 'x"; DROP SCHEMA public; --', "a" * 64, "tenant-1"])
def test_postgres_schema_names_are_checked(name: str) -> None:
    with pytest.raises(ValueError, match="invalid PostgreSQL schema name"):
        quote_identifier(name)
    assert quote_identifier("t_Tenant1") == '"t_Tenant1"'


# --------------------------------------------------------------------------- factory


async def test_factory_opens_the_backend_the_target_names(
    store_target: str, store: SessionStore
) -> None:
    expected = "PostgresSessionStore" if "://" in store_target else "SqliteSessionStore"
    assert type(store).__name__ == expected
    assert isinstance(store, SessionStore)


async def test_factory_default_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DPLAN_SESSION_STORE", raising=False)
    store = await open_session_store()
    await store.close()
    assert (tmp_path / ".dplan" / "sessions.db").is_file()

    monkeypatch.setenv("DPLAN_SESSION_STORE", f"sqlite://{tmp_path / 'env.db'}")
    store = await open_session_store()
    await store.close()
    assert isinstance(store, SqliteSessionStore)
    assert store.path == tmp_path / "env.db"


async def test_factory_rejects_unknown_schemes() -> None:
    with pytest.raises(ValueError, match="'mysql'") as caught:
        await open_session_store("mysql://root:hunter2@db/app")
    assert "hunter2" not in str(caught.value)


def test_postgres_schema_parameter_is_ours() -> None:
    dsn, schema = split_postgres_target("postgresql://u@h:5432/db?sslmode=disable&schema=tenant")
    assert (dsn, schema) == ("postgresql://u@h:5432/db?sslmode=disable", "tenant")
    assert split_postgres_target("postgres://h/db") == ("postgres://h/db", None)


@pytest.mark.parametrize(
    ("target", "shown", "secrets"),
    [
        ("postgresql://alice:s3cr%40t@db:5432/app?schema=x", "alice:***@db:5432/app", ["s3cr"]),
        ("postgres://bob:pw1@h/db?password=pw2&sslmode=require", "sslmode=require", ["pw1", "pw2"]),
        ("host=db user=carol password=topsecret", "user=carol", ["topsecret"]),
    ],
)
def test_describe_never_shows_a_password(target: str, shown: str, secrets: list[str]) -> None:
    text = describe_store_target(target)
    assert shown in text
    assert not [secret for secret in secrets if secret in text]


def test_describe_shows_the_sqlite_file() -> None:
    assert describe_store_target("sqlite:///var/lib/dplan/s.db") == "sqlite:///var/lib/dplan/s.db"
    assert describe_store_target("data/s.db") == "data/s.db"
