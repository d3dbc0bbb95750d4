"""Secret scrubbing: real key shapes are redacted, ordinary text is not."""

from __future__ import annotations

from typing import Any

import pytest

from durable_plans.domain.secrets import (
    contains_secret,
    is_secret_label,
    scrub_secrets,
    scrub_value,
)

OPENAI_LEGACY = "sk-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0fGh3iJk6l"
OPENAI_PROJ = "sk-proj-" + "Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa" * 2
ANTHROPIC = "sk-ant-api03-" + "q1W2e3R4t5Y6u7I8o9P0-_aSdFgHjKl" * 3
OPENROUTER = "sk-or-v1-" + "0123456789abcdef" * 4
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SESSION_ID = "ASIAY34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"key {OPENAI_LEGACY} end", "key [REDACTED:openai] end"),
        (f"OPENAI_API_KEY={OPENAI_PROJ}", "OPENAI_API_KEY=[REDACTED:openai]"),
        (f"ANTHROPIC_API_KEY='{ANTHROPIC}'", "ANTHROPIC_API_KEY='[REDACTED:anthropic]'"),
        (f"use {OPENROUTER}.", "use [REDACTED:openrouter]."),
        (f"id={AWS_ID}\n", "id=[REDACTED:aws_access_key_id]\n"),
        (f"({AWS_SESSION_ID})", "([REDACTED:aws_access_key_id])"),
        (
            f"aws_secret_access_key = {AWS_SECRET}",
            "aws_secret_access_key = [REDACTED:aws_secret_access_key]",
        ),
        (
            f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
            "AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_access_key]",
        ),
        (
            f'{{"aws_secret_access_key": "{AWS_SECRET}"}}',
            '{"aws_secret_access_key": "[REDACTED:aws_secret_access_key]"}',
        ),
        (
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig-nature_x",
            "Authorization: Bearer [REDACTED:bearer]",
        ),
        ("authorization: bearer abcdefghijklmnop1234", "authorization: bearer [REDACTED:bearer]"),
        ("api_key=a1b2c3d4e5f6", "api_key=[REDACTED:api_key]"),
        ('{"api_key": "a1b2c3d4e5f6", "n": 1}', '{"api_key": "[REDACTED:api_key]", "n": 1}'),
        ("client(api_key='hunter2hunter2')", "client(api_key='[REDACTED:api_key]')"),
        ("x-api-key: 0123456789", "x-api-key: [REDACTED:api_key]"),
        ("DB_PASSWORD=s3cr3t!pw", "DB_PASSWORD=[REDACTED:api_key]"),
    ],
)
def test_secrets_are_redacted_with_their_kind(text: str, expected: str) -> None:
    assert scrub_secrets(text) == expected
    assert contains_secret(text)
    assert not contains_secret(expected)


@pytest.mark.parametrize(
    "text",
    [
        "task-sketch and skeleton",
        "risk-assessment-framework-for-enterprise-teams",
        "desk-organisation-and-cleanup-checklist-v2",
        "sk-learn is a nickname for scikit-learn",
        "sk-short",
        "sk-ant-short",
        "AKIA is a prefix; AKIAIOSFODNN7 is too short",
        "AKIAIOSFODNN7EXAMPLEXYZ is too long to be a key id",
        "Bearer authentication is described in RFC 6750",
        "api_key=None",
        "the api_key parameter is optional",
        "aws_secret_access_key = <set me>",
        "password: [REDACTED:api_key]",
        "",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert scrub_secrets(text) == text
    assert not contains_secret(text)


def test_every_secret_in_a_text_goes() -> None:
    text = f"a={OPENAI_LEGACY} b={ANTHROPIC} c={AWS_ID} d={OPENROUTER}"
    out = scrub_secrets(text)
    for secret in (OPENAI_LEGACY, ANTHROPIC, AWS_ID, OPENROUTER):
        assert secret not in out
    assert out.count("[REDACTED:") == 4


def test_scrubbing_is_idempotent() -> None:
    text = f"api_key={OPENAI_PROJ} Bearer {ANTHROPIC} {AWS_ID}"
    once = scrub_secrets(text)
    assert scrub_secrets(once) == once


def test_secret_labels() -> None:
    assert is_secret_label("api_key") and is_secret_label("OPENAI_API_KEY")
    assert is_secret_label("client_secret") and is_secret_label("refresh-token")
    assert not is_secret_label("model") and not is_secret_label("api_base")


class TestScrubValue:
    def test_recurses_through_containers(self) -> None:
        event: dict[str, Any] = {
            "event": "llm.call",
            "headers": {"Authorization": f"Bearer {OPENAI_PROJ}"},
            "attempts": [1, f"with {AWS_ID}", (f"key {ANTHROPIC}", 2.5)],
            "ok": True,
        }
        assert scrub_value(event) == {
            "event": "llm.call",
            "headers": {"Authorization": "Bearer [REDACTED:openai]"},
            "attempts": [1, "with [REDACTED:aws_access_key_id]", ("key [REDACTED:anthropic]", 2.5)],
            "ok": True,
        }

    def test_values_under_secret_keys_are_redacted_whole(self) -> None:
        out = scrub_value({"api_key": "x", "DPLAN_API_KEY": "short", "model": "gpt-4o"})
        assert out == {
            "api_key": "[REDACTED:api_key]",
            "DPLAN_API_KEY": "[REDACTED:api_key]",
            "model": "gpt-4o",
        }

    def test_empty_and_non_string_values_under_secret_keys_stay(self) -> None:
        assert scrub_value({"api_key": "", "password": None}) == {"api_key": "", "password": None}

    def test_input_is_not_mutated(self) -> None:
        event = {"msg": [OPENAI_LEGACY]}
        scrub_value(event)
        assert event == {"msg": [OPENAI_LEGACY]}

    def test_other_objects_pass_through(self) -> None:
        marker = object()
        assert scrub_value(marker) is marker
        assert scrub_value(42) == 42 and scrub_value(None) is None

    def test_cycles_terminate(self) -> None:
        loop: list[Any] = ["a"]
        loop.append(loop)
        assert scrub_value(loop) == ["a", "[REDACTED:cycle]"]
