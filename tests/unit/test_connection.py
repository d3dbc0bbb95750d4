"""The Temporal connection comes from Temporal's own environment configuration.

The same variables and TOML profiles that drive the ``temporal`` CLI must drive ``dplan``
and ``dplan-worker``: these tests resolve them (with generated certificates) and check
what reaches ``Client.connect``; tests/integration/test_connection.py checks a real TLS
handshake, the API key on the wire, and a profile-chosen server end to end.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import TLSConfig

from durable_plans import TemporalUnreachable
from durable_plans._errors import SettingsError, TemporalConfigError
from durable_plans.connection import (
    TemporalAccess,
    connect_options,
    describe_connection,
    resolve_temporal,
)
from durable_plans.settings import Settings
from durable_plans.temporal_client import connect, ui_base_for, web_url
from tests.certs import SERVER_NAME, Pki, make_pki

API_KEY = "tmprl-test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No developer's ~/.config/temporalio/temporal.toml leaks into these tests."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield tmp_path


def _tls(access: TemporalAccess) -> TLSConfig:
    assert isinstance(access.tls, TLSConfig), access
    return access.tls


def test_defaults_are_a_plain_local_dev_server(home: Path) -> None:
    target = resolve_temporal({})
    assert (target.address, target.namespace) == ("localhost:7233", "default")
    assert target.access == TemporalAccess()
    assert connect_options(target.access) == {"tls": False}


def test_blank_variables_count_as_unset(home: Path) -> None:
    target = resolve_temporal(
        {"TEMPORAL_ADDRESS": " ", "TEMPORAL_NAMESPACE": "", "TEMPORAL_API_KEY": ""}
    )
    assert (target.address, target.namespace, target.access.api_key) == (
        "localhost:7233",
        "default",
        None,
    )


def test_an_api_key_means_tls_and_a_bearer_key(home: Path) -> None:
    target = resolve_temporal(
        {
            "TEMPORAL_ADDRESS": "ns.acct.tmprl.cloud:7233",
            "TEMPORAL_NAMESPACE": "ns.acct",
            "TEMPORAL_API_KEY": API_KEY,
        }
    )
    assert (target.address, target.namespace) == ("ns.acct.tmprl.cloud:7233", "ns.acct")
    assert connect_options(target.access) == {"tls": True, "api_key": API_KEY}


def test_tls_can_be_switched_off_for_an_api_key(home: Path) -> None:
    target = resolve_temporal({"TEMPORAL_API_KEY": API_KEY, "TEMPORAL_TLS": "false"})
    # Explicitly False: left to the SDK, an API key would switch TLS back on.
    assert connect_options(target.access) == {"tls": False, "api_key": API_KEY}


def test_tls_and_mtls_files_from_the_environment_reach_the_tls_config(home: Path, pki: Pki) -> None:
    access = resolve_temporal(
        {
            "TEMPORAL_ADDRESS": "temporal.internal:7233",
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca_cert),
            "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key),
        }
    ).access
    tls = _tls(access)
    assert tls.server_root_ca_cert == pki.ca_cert.read_bytes()
    assert tls.client_cert == pki.client_cert.read_bytes()
    assert tls.client_private_key == pki.client_key.read_bytes()
    assert tls.domain == SERVER_NAME
    assert access.uses_client_cert and not access.uses_api_key


def test_tls_material_given_inline_as_data(home: Path, pki: Pki) -> None:
    tls = _tls(
        resolve_temporal(
            {
                "TEMPORAL_TLS_SERVER_CA_CERT_DATA": pki.ca_cert.read_text(),
                "TEMPORAL_TLS_CLIENT_CERT_DATA": pki.client_cert.read_text(),
                "TEMPORAL_TLS_CLIENT_KEY_DATA": pki.client_key.read_text(),
            }
        ).access
    )
    assert tls.server_root_ca_cert == pki.ca_cert.read_bytes()
    assert tls.client_cert == pki.client_cert.read_bytes()
    assert tls.client_private_key == pki.client_key.read_bytes()


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "temporal.toml"
    path.write_text(text)
    return path


def test_a_profile_alone_chooses_address_namespace_and_tls(
    home: Path, tmp_path: Path, pki: Pki
) -> None:
    config = _config(
        tmp_path,
        f"""
[profile.default]
address = "localhost:7233"

[profile.prod]
address = "temporal.prod.internal:7233"
namespace = "plans"
api_key = "{API_KEY}"
[profile.prod.tls]
server_name = "{SERVER_NAME}"
server_ca_cert_path = "{pki.ca_cert}"
client_cert_path = "{pki.client_cert}"
client_key_path = "{pki.client_key}"
[profile.prod.grpc_meta]
x-team = "plans"
""",
    )
    target = resolve_temporal({"TEMPORAL_CONFIG_FILE": str(config), "TEMPORAL_PROFILE": "prod"})
    assert (target.address, target.namespace) == ("temporal.prod.internal:7233", "plans")
    assert (target.access.profile, target.access.config_file) == ("prod", str(config))
    options = connect_options(target.access)
    assert options["api_key"] == API_KEY
    assert options["rpc_metadata"] == {"x-team": "plans"}
    tls = _tls(target.access)
    assert tls.domain == SERVER_NAME
    assert tls.client_cert == pki.client_cert.read_bytes()
    assert tls.client_private_key == pki.client_key.read_bytes()


def test_environment_variables_override_the_profile(home: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, '[profile.default]\naddress = "a:7233"\nnamespace = "from-file"\n')
    target = resolve_temporal(
        {"TEMPORAL_CONFIG_FILE": str(config), "TEMPORAL_NAMESPACE": "from-env"}
    )
    assert (target.address, target.namespace, target.access.profile) == (
        "a:7233",
        "from-env",
        "default",
    )


def test_the_default_config_file_location_is_read(home: Path) -> None:
    config = home / "xdg" / "temporalio" / "temporal.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[profile.default]\naddress = "from-default-file:7233"\n')
    assert resolve_temporal({}).address == "from-default-file:7233"


@pytest.mark.parametrize(
    ("env", "config_text", "expected"),
    [
        ({"TEMPORAL_PROFILE": "nope"}, "[profile.default]\n", r"Profile 'nope' not found"),
        (
            {},
            f'[profile.default]\naddress = "a:1"\napi_key = "{API_KEY}\n',
            r"TOML parse error at line 3.*invalid basic string",
        ),
        ({"TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml"}, None, r"no such file"),
        (
            {"TEMPORAL_TLS_CLIENT_CERT_PATH": "/nonexistent/client.pem"},
            None,
            r"client certificate \(TEMPORAL_TLS_CLIENT_CERT_PATH\): cannot read "
            r"/nonexistent/client.pem",
        ),
        (
            {"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "/nonexistent/ca.pem"},
            None,
            r"server CA certificate .*cannot read /nonexistent/ca.pem",
        ),
        (
            {"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"},
            None,
            r"not supported by the Temporal Python SDK.*TEMPORAL_TLS_SERVER_NAME",
        ),
        (
            {},
            "[profile.default.tls]\ndisable_host_verification = true\n",
            r"tls.disable_host_verification in .*not supported",
        ),
    ],
)
def test_a_bad_configuration_is_one_line_naming_the_problem(
    home: Path,
    tmp_path: Path,
    env: dict[str, str],
    config_text: str | None,
    expected: str,
) -> None:
    if config_text is not None:
        env = {"TEMPORAL_CONFIG_FILE": str(_config(tmp_path, config_text)), **env}
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    message = str(caught.value)
    assert re.search(expected, message), message
    assert "\n" not in message
    assert API_KEY not in message  # a TOML error quotes its line; the key must not follow


def test_a_client_cert_without_its_key_is_refused(home: Path, pki: Pki) -> None:
    with pytest.raises(TemporalConfigError, match=r"client certificate is set but no client key"):
        resolve_temporal({"TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert)})


def test_secrets_stay_out_of_repr_and_log_fields(home: Path, pki: Pki) -> None:
    settings = Settings.from_env(
        {
            "TEMPORAL_API_KEY": API_KEY,
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key),
            "TEMPORAL_GRPC_META_X_SECRET_HEADER": "hunter2-header-value",
        }
    )
    key_pem = pki.client_key.read_text()
    key_body = key_pem.splitlines()[1]
    fields = describe_connection(
        settings.temporal_address, settings.temporal_namespace, settings.temporal_access
    )
    assert fields["tls"] == "mtls" and fields["bearer_auth"] is True
    for text in (repr(settings), str(settings), repr(settings.temporal_access), str(fields)):
        assert API_KEY not in text
        assert key_body not in text
        assert "hunter2" not in text


async def test_connect_passes_the_resolved_tls_and_key_to_the_sdk(
    home: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    async def fake_connect(target_host: str, **kwargs: Any) -> Client:
        seen.update(kwargs, target_host=target_host)
        raise RuntimeError("Connection refused")

    monkeypatch.setattr(Client, "connect", fake_connect)
    settings = Settings.from_env(
        {
            "TEMPORAL_ADDRESS": "ns.acct.tmprl.cloud:7233",
            "TEMPORAL_NAMESPACE": "ns.acct",
            "TEMPORAL_API_KEY": API_KEY,
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key),
        }
    )
    with pytest.raises(
        TemporalUnreachable, match=r"ns\.acct\.tmprl\.cloud:7233: connection refused"
    ):
        await connect(settings)
    assert (seen["target_host"], seen["namespace"], seen["api_key"]) == (
        "ns.acct.tmprl.cloud:7233",
        "ns.acct",
        API_KEY,
    )
    assert isinstance(seen["tls"], TLSConfig)
    assert seen["tls"].client_cert == pki.client_cert.read_bytes()


def test_temporal_cloud_links_go_to_the_cloud_ui(home: Path) -> None:
    settings = Settings.from_env(
        {"TEMPORAL_ADDRESS": "ns.acct.tmprl.cloud:7233", "TEMPORAL_NAMESPACE": "ns.acct"}
    )
    assert ui_base_for(settings) == "https://cloud.temporal.io"
    assert web_url(settings, "ns.acct", "p1") == (
        "https://cloud.temporal.io/namespaces/ns.acct/workflows/p1"
    )


@pytest.mark.parametrize("command", [["status", "some-plan"], ["run", "examples/weather_app.json"]])
def test_dplan_exits_2_on_a_bad_temporal_config(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    from durable_plans.cli.main import main

    monkeypatch.setenv("TEMPORAL_PROFILE", "missing-profile")
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Profile 'missing-profile' not found" in err[0], err


def test_the_worker_exits_2_on_a_bad_temporal_config(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from durable_plans.worker import main

    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", "/nonexistent/key.pem")
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", "/nonexistent/cert.pem")
    with pytest.raises(SystemExit) as exited:
        main(["--log-format", "console"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read /nonexistent/" in err[0], err
