"""Plan-end webhooks without a server: plan rules, signing, Retry-After, answer classes.

The activity runs in Temporal's ActivityEnvironment against a real local aiohttp receiver,
so each HTTP answer's classification (delivered, retried, refused) is exercised over the
wire. Signatures are checked with the specification's reference package.
"""

from __future__ import annotations

import base64
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from aiohttp import web
from standardwebhooks import Webhook
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durable_plans._errors import PlanValidationError, WebhookSecretError
from durable_plans.activities.webhook_delivery import MAX_RETRY_AFTER, NotifyActivities, retry_after
from durable_plans.domain.contracts import WebhookAttempt, WebhookInput
from durable_plans.domain.failures import FailureType
from durable_plans.domain.models import Notify, PlanReport, SubtaskResult, SubtaskStatus
from durable_plans.domain.plan_loader import plan_from_data
from durable_plans.domain.webhook import notify_problems, signature_headers, signing_key
from durable_plans.settings import Settings
from durable_plans.workflows.policies import DEFAULT_PARAMETERS
from tests.integration.webhook_receiver import new_secret

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
REPORT = PlanReport.build(
    "p1", [SubtaskResult(id="a", status=SubtaskStatus.COMPLETED, agent="coder", result="ok")]
)


# --------------------------------------------------------------------------- plan rules


def _problems(notify: object) -> list[str]:
    data = {"id": "p1", "subtasks": [{"id": "a", "description": "x"}], "notify": notify}
    try:
        plan_from_data(data)
    except PlanValidationError as err:
        return list(err.problems)
    return []


def test_a_good_notify_is_accepted() -> None:
    good = {"webhook": "https://hooks.example.com/dplan?team=7", "secret_env": "HOOK_SECRET"}
    assert _problems(good) == []
    assert _problems({**good, "deliver_for_s": 30}) == []


@pytest.mark.parametrize(
    ("notify", "expected"),
    [
        ({"webhook": "ftp://x/", "secret_env": "S"}, "notify.webhook: must be an http or https"),
        ({"webhook": "hooks.example.com", "secret_env": "S"}, "must be an http or https URL"),
        ({"webhook": "http:///path", "secret_env": "S"}, "notify.webhook: has no host"),
        ({"webhook": "https://u:pw@x.example/", "secret_env": "S"}, "must not carry credentials"),
        ({"webhook": "http://x:99999/", "secret_env": "S"}, "notify.webhook: not a valid URL"),
        ({"webhook": "http://x/ a", "secret_env": "S"}, "must not contain whitespace"),
        ({"webhook": "", "secret_env": "S"}, "notify.webhook: must not be empty"),
        ({"webhook": "https://x/", "secret_env": "1ABC"}, "is not an environment variable name"),
        ({"webhook": "https://x/", "secret_env": "A-B"}, "is not an environment variable name"),
        ({"webhook": "https://x/", "secret_env": SECRET}, "not the secret itself"),
        (
            {"webhook": "https://x/", "secret_env": "S", "deliver_for_s": 0.5},
            "notify.deliver_for_s: must be between 1 and 604800 seconds, got 0.5",
        ),
        ({"webhook": "https://x/", "secret_env": "S", "retries": 3}, "unknown field 'retries'"),
        ({"webhook": "https://x/"}, "notify: missing required field 'secret_env'"),
        ({"webhook": 7, "secret_env": "S"}, "notify.webhook: must be a string, got 7"),
        ("https://x/", "notify: must be an object"),
    ],
)
def test_a_bad_notify_is_one_clear_line(notify: object, expected: str) -> None:
    problems = _problems(notify)
    assert len(problems) == 1, problems
    assert expected in problems[0]
    assert "\n" not in problems[0]


def test_the_secret_never_appears_in_the_problem() -> None:
    problems = notify_problems(Notify(webhook="https://x/", secret_env=SECRET))
    assert problems and all(SECRET not in p and SECRET[6:] not in p for p in problems)


# --------------------------------------------------------------------------- signing


def test_signature_verifies_with_the_reference_implementation() -> None:
    body = REPORT.model_dump_json().encode()
    now = int(datetime.now(UTC).timestamp())
    headers = signature_headers(signing_key(SECRET, "S"), "msg_abc", now, body)
    assert headers["webhook-signature"].startswith("v1,")
    assert Webhook(SECRET).verify(body, headers) == REPORT.model_dump(mode="json")


def test_unpadded_secrets_are_accepted() -> None:
    secret = new_secret().rstrip("=")
    assert signing_key(secret, "S") == signing_key(secret + "=" * (-len(secret[6:]) % 4), "S")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "HOOK is not set in the worker's environment"),
        ("  ", "HOOK is not set in the worker's environment"),
        ("c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0", "HOOK does not hold a whsec_… secret"),
        ("whsec_not*base64!", "HOOK is malformed: the part after whsec_ is not base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "HOOK is too short: 5 bytes"),
    ],
)
def test_a_bad_secret_is_named_never_shown(value: str | None, expected: str) -> None:
    with pytest.raises(WebhookSecretError) as info:
        signing_key(value, "HOOK")
    assert str(info.value).startswith(expected)
    if value and value.strip():
        assert value not in str(info.value)


# --------------------------------------------------------------------------- Retry-After


def test_retry_after_reads_seconds_and_dates() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after("3") == timedelta(seconds=3)
    assert retry_after(format_datetime(now + timedelta(seconds=90), usegmt=True), now=now) == (
        timedelta(seconds=90)
    )
    assert retry_after(format_datetime(now - timedelta(hours=1), usegmt=True), now=now) == (
        timedelta(0)
    )
    assert retry_after("999999") == MAX_RETRY_AFTER
    for unreadable in (None, "", "soon", "nan", "inf"):
        assert retry_after(unreadable) is None


# --------------------------------------------------------------------------- the activity


Serve = Callable[[int, dict[str, str]], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Starts local receivers that answer one status (with headers); gives their URLs."""
    runners: list[web.AppRunner] = []

    async def answer_with(status: int, headers: dict[str, str]) -> str:
        async def handle(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(status=status, headers=headers, text=f"answer {status}")

        app = web.Application()
        app.router.add_post("/hook", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}/hook"

    yield answer_with
    for runner in runners:
        await runner.cleanup()


async def _deliver(
    url: str, env: dict[str, str] | None = None, acts: NotifyActivities | None = None
) -> WebhookAttempt:
    acts = acts or NotifyActivities(environ={"HOOK": SECRET} if env is None else env)
    inp = WebhookInput(webhook_id="msg_1", url=url, secret_env="HOOK", report=REPORT)
    try:
        return await ActivityEnvironment().run(acts.deliver_webhook, inp)
    finally:
        await acts.aclose()


async def _failure(url: str, env: dict[str, str] | None = None) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await _deliver(url, env)
    return info.value


async def test_2xx_is_delivered(serve: Serve) -> None:
    url = await serve(202, {})
    assert await _deliver(url) == WebhookAttempt(attempt=1, status_code=202)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503])
async def test_transient_answers_are_retried(serve: Serve, status: int) -> None:
    err = await _failure(await serve(status, {}))
    assert err.type == FailureType.WEBHOOK_UNAVAILABLE and not err.non_retryable
    assert err.next_retry_delay is None
    assert err.details[0] == WebhookAttempt(
        attempt=1, status_code=status, reason=f"HTTP {status}: answer {status}"
    )


async def test_retry_after_sets_the_next_delay(
    serve: Serve,
) -> None:
    err = await _failure(await serve(429, {"Retry-After": "7"}))
    assert err.next_retry_delay == timedelta(seconds=7)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422, 302])
async def test_refusals_are_final(serve: Serve, status: int) -> None:
    headers = {"Location": "http://elsewhere.example/"} if status == 302 else {}
    err = await _failure(await serve(status, headers))
    assert err.type == FailureType.WEBHOOK_REJECTED and err.non_retryable
    assert err.details[0].status_code == status


async def test_connection_refused_is_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = await _failure(f"http://127.0.0.1:{port}/hook")
    assert err.type == FailureType.WEBHOOK_UNAVAILABLE and not err.non_retryable
    assert err.details[0].status_code is None and "Connect" in err.message


@pytest.mark.parametrize("env", [{}, {"HOOK": "whsec_%%%"}])
async def test_a_missing_or_malformed_secret_is_final(serve: Serve, env: dict[str, str]) -> None:
    err = await _failure(await serve(200, {}), env)
    assert err.type == FailureType.WEBHOOK_MISCONFIGURED and err.non_retryable
    assert err.message.startswith("HOOK ")


async def test_one_http_client_serves_every_delivery(
    serve: Serve,
) -> None:
    url = await serve(200, {})
    acts = NotifyActivities(environ={"HOOK": SECRET})
    env = ActivityEnvironment()
    inp = WebhookInput(webhook_id="msg_1", url=url, secret_env="HOOK", report=REPORT)
    await env.run(acts.deliver_webhook, inp)
    first = acts._http()
    await env.run(acts.deliver_webhook, inp)
    assert acts._http() is first
    await acts.aclose()
    assert first.is_closed


# --------------------------------------------------------------------------- configuration


def test_settings_and_retry_policy() -> None:
    settings = Settings.from_env(
        {"DPLAN_NOTIFY_DELIVER_FOR_S": "60", "DPLAN_NOTIFY_MAX_BACKOFF_S": "5"}
    )
    params = settings.activity_parameters()
    assert params.notify_deliver_for == timedelta(seconds=60)
    assert params.notify_max_backoff == timedelta(seconds=5)
    assert DEFAULT_PARAMETERS.notify_deliver_for >= timedelta(hours=1)
    policy = params.notify_retry
    assert policy.maximum_attempts == 0  # bounded by time, not attempts
    assert set(policy.non_retryable_error_types or ()) == {
        FailureType.WEBHOOK_REJECTED,
        FailureType.WEBHOOK_MISCONFIGURED,
    }
