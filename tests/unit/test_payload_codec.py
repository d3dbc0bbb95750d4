"""Payload encryption without a server: key formats, key files, rotation, clear errors, and
the codec server's protocol and CORS."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path

import pytest
from aiohttp import ClientSession
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import DefaultFailureConverterWithEncodedAttributes

from durable_plans._errors import PayloadKeyError, SettingsError
from durable_plans.cli import main as cli
from durable_plans.codec_server import normalize_origin, running_codec_server
from durable_plans.payload_codec import (
    ENCODING,
    KEY_ID_METADATA,
    EncryptionCodec,
    PayloadKeyring,
    generate_key,
    keyring_from_env,
    parse_key,
)
from durable_plans.plugin import DurablePlansPlugin
from durable_plans.settings import Settings

KEY_A = bytes(range(32))
KEY_B = bytes(range(100, 132))
B64_A = base64.b64encode(KEY_A).decode()
HEX_B = KEY_B.hex()
SECRET_TEXT = "the launch code is swordfish-4242"


def _json_payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


def test_keys_are_read_as_hex_or_base64_with_an_optional_id() -> None:
    assert parse_key(B64_A, "X") == (parse_key(B64_A, "X")[0], KEY_A)
    assert parse_key(B64_A, "X")[0].startswith("sha256:")
    assert parse_key(f"old={HEX_B}", "X") == ("old", KEY_B)
    urlsafe = base64.urlsafe_b64encode(KEY_B).decode().rstrip("=")
    assert parse_key(f"2025-06={urlsafe}", "X") == ("2025-06", KEY_B)
    # A generated key is a valid one.
    assert len(parse_key(generate_key(), "X")[1]) == 32


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (base64.b64encode(b"x" * 16).decode(), "base64 of 16 bytes (need 32)"),
        ("ab" * 20, "40 hex digits (need 64)"),
        ("not a key!", "neither hex nor base64"),
        ("bad id!=" + B64_A, "a key id is"),
        ("k1=" + "ab" * 31, "key 'k1' is 62 hex digits"),
    ],
)
def test_a_malformed_key_is_named_and_not_echoed(value: str, expected: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"DPLAN_PAYLOAD_KEY": value})
    message = str(info.value)
    assert "DPLAN_PAYLOAD_KEY" in message
    assert expected in message
    assert value.rstrip("=").split("=")[-1] not in message


def test_no_key_means_plain_payloads_and_keys_never_show_in_a_repr() -> None:
    assert Settings.from_env({}).payload_keys is None
    settings = Settings.from_env({"DPLAN_PAYLOAD_KEY": f"k1={B64_A}"})
    assert settings.payload_keys is not None
    assert settings.payload_keys.ids == ("k1",)
    for text in (repr(settings), repr(settings.payload_keys), repr(settings.payload_keys.codec())):
        assert B64_A not in text and KEY_A.hex() not in text


def test_a_key_file_lists_the_current_key_first_and_older_ones_after(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(f"# rotated 2025-06\nnew={HEX_B}\n\nold={B64_A}  # until June\n")
    ring = keyring_from_env({"DPLAN_PAYLOAD_KEY_FILE": str(key_file)})
    assert ring is not None and ring.current_id == "new" and ring.ids == ("new", "old")
    # Extra decode-only keys from the environment join either source.
    ring = keyring_from_env(
        {"DPLAN_PAYLOAD_KEY": f"new={HEX_B}", "DPLAN_PAYLOAD_KEYS": f"old={B64_A}, "}
    )
    assert ring is not None and ring.ids == ("new", "old")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DPLAN_PAYLOAD_KEYS": f"old={B64_A}"}, "set DPLAN_PAYLOAD_KEY"),
        ({"DPLAN_PAYLOAD_KEY": B64_A, "DPLAN_PAYLOAD_KEY_FILE": "/x"}, "not both"),
        ({"DPLAN_PAYLOAD_KEY_FILE": "/nonexistent/keys"}, "cannot read /nonexistent/keys"),
        (
            {"DPLAN_PAYLOAD_KEY": f"k={B64_A}", "DPLAN_PAYLOAD_KEYS": f"k={HEX_B}"},
            "key id 'k' is given twice with different keys",
        ),
    ],
)
def test_key_configuration_errors_say_what_to_change(env: dict[str, str], expected: str) -> None:
    with pytest.raises(PayloadKeyError, match=expected):
        keyring_from_env(env)


def test_a_bad_line_of_a_key_file_is_named_by_file_and_line(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(f"new={HEX_B}\nold=tooshort\n")
    with pytest.raises(PayloadKeyError, match=f"{key_file}:2: key 'old'"):
        keyring_from_env({"DPLAN_PAYLOAD_KEY_FILE": str(key_file)})


async def test_payloads_are_encrypted_under_the_current_key_id_and_decrypt_back() -> None:
    codec = PayloadKeyring.from_entries([("k1", KEY_A)]).codec()
    original = _json_payload(SECRET_TEXT)
    [sealed] = await codec.encode([original])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.metadata[KEY_ID_METADATA] == b"k1"
    assert b"swordfish" not in sealed.SerializeToString()
    assert await codec.decode([sealed]) == [original]
    # Unencrypted payloads (histories from before encryption) pass through.
    assert await codec.decode([original]) == [original]


async def test_rotation_old_payloads_decode_after_a_new_current_key_is_added() -> None:
    old = PayloadKeyring.from_entries([("2025-01", KEY_A)]).codec()
    [written_before] = await old.encode([_json_payload(SECRET_TEXT)])
    rotated = PayloadKeyring.from_entries([("2025-06", KEY_B), ("2025-01", KEY_A)]).codec()
    [written_after] = await rotated.encode([_json_payload("new")])
    assert written_after.metadata[KEY_ID_METADATA] == b"2025-06"
    assert await rotated.decode([written_before]) == [_json_payload(SECRET_TEXT)]
    # Dropping the old key too early: the error names the key id that is missing.
    only_new = PayloadKeyring.from_entries([("2025-06", KEY_B)]).codec()
    with pytest.raises(PayloadKeyError, match="key id '2025-01', which is not among"):
        await only_new.decode([written_before])


async def test_a_wrong_key_under_the_right_id_or_an_altered_payload_fails_clearly() -> None:
    [sealed] = (
        await PayloadKeyring.from_entries([("k", KEY_A)])
        .codec()
        .encode([_json_payload(SECRET_TEXT)])
    )
    wrong = PayloadKeyring.from_entries([("k", KEY_B)]).codec()
    with pytest.raises(PayloadKeyError, match="key id 'k' does not decrypt"):
        await wrong.decode([sealed])
    # The key id is authenticated: relabelling a payload does not make another key try it.
    both = PayloadKeyring.from_entries([("k", KEY_A), ("j", KEY_B)]).codec()
    relabelled = Payload()
    relabelled.CopyFrom(sealed)
    relabelled.metadata[KEY_ID_METADATA] = b"j"
    with pytest.raises(PayloadKeyError, match="key id 'j' does not decrypt"):
        await both.decode([relabelled])


def test_the_plugin_encrypts_payloads_and_failures_when_settings_carry_keys() -> None:
    settings = Settings.from_env({"DPLAN_PAYLOAD_KEY": B64_A})
    converter = DurablePlansPlugin(settings=settings)._data_converter(None)
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.failure_converter_class is DefaultFailureConverterWithEncodedAttributes
    # Kept when a worker's plugin without keys takes over that client's converter.
    kept = DurablePlansPlugin()._data_converter(converter)
    assert kept.payload_codec is converter.payload_codec
    assert kept.failure_converter_class is DefaultFailureConverterWithEncodedAttributes
    assert DurablePlansPlugin(settings=Settings())._data_converter(None).payload_codec is None


def test_origins_compare_without_path_or_trailing_slash() -> None:
    assert normalize_origin("http://LocalHost:8233/") == "http://localhost:8233"
    assert normalize_origin("https://ui.example.com/namespaces/x") == "https://ui.example.com"
    assert normalize_origin("*") == "*"


async def test_the_codec_server_speaks_temporals_remote_codec_protocol() -> None:
    ring = PayloadKeyring.from_entries([("k1", KEY_A)])
    ui = "http://localhost:8233"
    original = Payloads(payloads=[_json_payload(SECRET_TEXT)])
    async with (
        running_codec_server(ring.codec(), [ui + "/"], port=0) as server,
        ClientSession() as http,
    ):
        headers = {"Content-Type": "application/json", "X-Namespace": "default", "Origin": ui}
        # Preflight from the UI's origin: allowed, with the headers the UI asks for.
        async with http.options(
            f"{server.url}/decode",
            headers={
                "Origin": ui,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        ) as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == ui
            assert "POST" in resp.headers["Access-Control-Allow-Methods"]
            assert "x-namespace" in resp.headers["Access-Control-Allow-Headers"].lower()
        async with http.options(
            f"{server.url}/decode", headers={"Origin": "http://evil.example"}
        ) as resp:
            assert resp.status == 403
            assert "Access-Control-Allow-Origin" not in resp.headers

        async with http.post(
            f"{server.url}/encode", data=json_format.MessageToJson(original), headers=headers
        ) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == ui
            encoded_text = await resp.text()
        assert "swordfish" not in encoded_text
        encoded = json_format.Parse(encoded_text, Payloads())
        assert encoded.payloads[0].metadata["encoding"] == ENCODING

        for path in ("/decode", "/default/decode"):
            async with http.post(f"{server.url}{path}", data=encoded_text, headers=headers) as r:
                assert r.status == 200
                decoded = json_format.Parse(await r.text(), Payloads())
            assert decoded == original

        # A payload under a key this server does not hold: 400, naming the key id.
        [foreign] = (
            await PayloadKeyring.from_entries([("elsewhere", KEY_B)])
            .codec()
            .encode([_json_payload("x")])
        )
        body = json_format.MessageToJson(Payloads(payloads=[foreign]))
        async with http.post(f"{server.url}/decode", data=body, headers=headers) as resp:
            assert resp.status == 400
            assert "'elsewhere'" in (await resp.json())["message"]
        async with http.post(f"{server.url}/decode", data="{not json", headers=headers) as resp:
            assert resp.status == 400


def test_dplan_codec_server_needs_a_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("DPLAN_PAYLOAD_KEY", "DPLAN_PAYLOAD_KEY_FILE", "DPLAN_PAYLOAD_KEYS"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["codec-server"]) == 2
    assert "no payload key configured" in capsys.readouterr().err
    monkeypatch.setenv("DPLAN_PAYLOAD_KEY", "k=short")
    assert cli.main(["codec-server"]) == 2
    assert "DPLAN_PAYLOAD_KEY: key 'k'" in capsys.readouterr().err


async def test_dplan_codec_server_serves_with_the_configured_key(tmp_path: Path) -> None:
    """The real command in its own process: it prints where it listens (and key ids, not
    keys), and decodes what the worker's key encrypted."""
    env = {**os.environ, "DPLAN_PAYLOAD_KEY": f"k1={B64_A}", "TEMPORAL_ADDRESS": "localhost:7233"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durable_plans.cli",
        "codec-server",
        "--port",
        "0",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        banner = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
        assert B64_A not in banner and "'k1'" in banner, banner
        url = banner.split(" on ", 1)[1].split(" ", 1)[0]
        allowed = (await asyncio.wait_for(process.stdout.readline(), timeout=5)).decode()
        assert "http://localhost:8233" in allowed  # the UI of TEMPORAL_ADDRESS
        [sealed] = (
            await PayloadKeyring.from_entries([("k1", KEY_A)])
            .codec()
            .encode([_json_payload(SECRET_TEXT)])
        )
        body = json_format.MessageToJson(Payloads(payloads=[sealed]))
        async with (
            ClientSession() as http,
            http.post(
                f"{url}/decode", data=body, headers={"Content-Type": "application/json"}
            ) as r,
        ):
            assert r.status == 200
            assert SECRET_TEXT in base64.b64decode((await r.json())["payloads"][0]["data"]).decode()
    finally:
        process.kill()
        await process.wait()
