"""Any Temporal: a real server chosen by a Temporal CLI profile, a real TLS/mTLS handshake,
and the API key on the wire as Temporal expects it.

- A TOML profile (``TEMPORAL_CONFIG_FILE`` + ``TEMPORAL_PROFILE``, no ``TEMPORAL_ADDRESS``)
  alone points ``dplan-worker`` and ``dplan run`` (both real processes) at a dev server of
  its own, and the plan runs in the profile's namespace.
- The dev server has no TLS, so a TLS-terminating proxy (tests/integration/tls_proxy.py)
  stands in front of it: the client verifies the proxy's certificate against a generated
  CA, presents its client certificate (the proxy requires one, as mTLS clusters do), and
  the proxy decodes the HTTP/2 headers to see ``authorization: Bearer <key>``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from durable_plans import TemporalUnreachable
from durable_plans.connection import TemporalAccess
from durable_plans.dev_server import dynamic_config_args
from durable_plans.embedded import DEV_SERVER_STARTUP, EmbeddedTemporal, free_port
from durable_plans.settings import Settings
from durable_plans.temporal_client import connect
from tests.certs import CLIENT_NAME, SERVER_NAME, Pki, make_pki
from tests.integration.conftest import temporal_binary
from tests.integration.tls_proxy import TlsProxy
from tests.integration.workers import REPO_ROOT, WorkerProcess

pytestmark = pytest.mark.integration

PROFILE_NAMESPACE = "dplan-profile"
API_KEY = "tmprl-test-key-5f3c9a1e7b2d4c6e8a0b"


@pytest.fixture(scope="module")
async def profile_server() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of its own whose only extra namespace is the profile's: a plan that
    ran anywhere else would not be found there."""
    env = await WorkflowEnvironment.start_local(
        dev_server_startup_timeout=DEV_SERVER_STARTUP,
        namespace=PROFILE_NAMESPACE,
        dev_server_existing_path=temporal_binary(),
        dev_server_log_level="error",
        dev_server_extra_args=dynamic_config_args(),
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _only_temporal_profile(monkeypatch: pytest.MonkeyPatch, config: Path, profile: str) -> None:
    """The profile is the only Temporal configuration the child processes inherit."""
    for name in list(os.environ):
        if name.startswith("TEMPORAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    monkeypatch.setenv("TEMPORAL_PROFILE", profile)


async def test_a_cli_profile_alone_points_worker_and_run_at_its_server_and_namespace(
    profile_server: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = profile_server.client.service_client.config.target_host
    config = tmp_path / "temporal.toml"
    # The default profile points nowhere: only choosing "plans" reaches the server. The key
    # is sent in plain text here (the dev server ignores it); the logs must not show it.
    config.write_text(
        f"""
[profile.default]
address = "127.0.0.1:9"

[profile.plans]
address = "{target}"
namespace = "{PROFILE_NAMESPACE}"
api_key = "{API_KEY}"
[profile.plans.tls]
disabled = true
"""
    )
    _only_temporal_profile(monkeypatch, config, "plans")
    tq = f"profile-{uuid.uuid4().hex[:8]}"
    plan_id = f"profile-plan-{uuid.uuid4().hex[:8]}"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            {
                "id": plan_id,
                "goal": "Prove the profile chose the server",
                "subtasks": [
                    {"id": "a", "description": "Inspect the repository", "agent": "coder"},
                    {
                        "id": "b",
                        "description": "Summarise it",
                        "agent": "ask",
                        "depends_on": ["a"],
                    },
                ],
            }
        )
    )
    (tmp_path / "workspace").mkdir()
    dplan_env = {
        "DPLAN_TASK_QUEUE": tq,
        "DPLAN_SESSION_STORE": str(tmp_path / "sessions.db"),
        "DPLAN_WORKSPACE": str(tmp_path / "workspace"),
        "DPLAN_STATE_DIR": str(tmp_path / "state"),
    }
    worker_log = tmp_path / "worker.log"
    worker = WorkerProcess(dplan_env, worker_log).start()
    try:
        await asyncio.to_thread(worker.wait_ready)
        run = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "durable_plans.cli",
            "run",
            str(plan_file),
            "--json",
            cwd=REPO_ROOT,
            env={**os.environ, **dplan_env},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(run.communicate(), timeout=120)
    finally:
        worker.stop()

    assert run.returncode == 0, err.decode()
    report = json.loads(out)
    assert (report["plan_id"], report["status"]) == (plan_id, "completed")

    # It ran in the profile's namespace, and nowhere else.
    in_profile_ns = await Client.connect(target, namespace=PROFILE_NAMESPACE)
    description = await in_profile_ns.get_workflow_handle(plan_id).describe()
    assert description.status is WorkflowExecutionStatus.COMPLETED
    in_default_ns = await Client.connect(target, namespace="default")
    with pytest.raises(RPCError) as missing:
        await in_default_ns.get_workflow_handle(plan_id).describe()
    assert missing.value.status is RPCStatusCode.NOT_FOUND

    log = worker_log.read_text()
    started = json.loads(next(line for line in log.splitlines() if "worker.started" in line))
    assert started["address"] == target
    assert (started["namespace"], started["profile"]) == (PROFILE_NAMESPACE, "plans")
    assert (started["tls"], started["bearer_auth"]) == ("off", True)
    # Where its trees live, said once (the state directory is per user by default).
    assert started["state_dir"] == str(tmp_path / "state")
    assert started["tree_retention_s"] == 86400
    assert sum('"state_dir"' in line for line in log.splitlines()) == 1
    assert API_KEY not in log and API_KEY not in err.decode()


def _tls_env(proxy: TlsProxy, pki: Pki, *, client_cert: bool = True) -> dict[str, str]:
    env = {
        "TEMPORAL_ADDRESS": proxy.address,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca_cert),
        "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
        "TEMPORAL_API_KEY": API_KEY,
    }
    if client_cert:
        env["TEMPORAL_TLS_CLIENT_CERT_PATH"] = str(pki.client_cert)
        env["TEMPORAL_TLS_CLIENT_KEY_PATH"] = str(pki.client_key)
    return env


async def test_mtls_and_the_api_key_reach_the_server_over_a_real_handshake(
    temporal_env: WorkflowEnvironment, pki: Pki, tmp_path: Path
) -> None:
    upstream = temporal_env.client.service_client.config.target_host
    async with TlsProxy(upstream, pki, require_client_cert=True) as proxy:
        client = await connect(Settings.from_env(_tls_env(proxy, pki)))
        response = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default")
        )
        assert response.namespace_info.name == "default"  # a real RPC made it through

        assert proxy.connections, "the client never reached the TLS proxy"
        for conn in proxy.connections:
            # The handshake verified the server against our CA (the client would have
            # refused otherwise), and the proxy verified the client's certificate.
            assert conn.client_cert_cn == CLIENT_NAME
            assert conn.alpn == "h2"
        requests = proxy.headers_seen()
        describe = [r for r in requests if r.get(":path", "").endswith("/DescribeNamespace")]
        assert describe, [r.get(":path") for r in requests]
        assert all(r.get("authorization") == f"Bearer {API_KEY}" for r in requests)


async def test_a_server_requiring_mtls_refuses_a_client_without_a_certificate(
    temporal_env: WorkflowEnvironment, pki: Pki
) -> None:
    upstream = temporal_env.client.service_client.config.target_host
    async with TlsProxy(upstream, pki, require_client_cert=True) as proxy:
        with pytest.raises(TemporalUnreachable) as refused:
            await connect(Settings.from_env(_tls_env(proxy, pki, client_cert=False)))
    assert proxy.address in str(refused.value)
    # What is guaranteed is the server side: no handshake completed (the proxy only records a
    # connection once the client's certificate verified) and no request got through. Which
    # text the client's transport reports is not: the server's alert ("client certificate"),
    # a torn-down handshake ("operation was canceled") or a reset connection, by load.
    assert not proxy.connections, "a TLS handshake completed without a client certificate"
    assert not proxy.headers_seen(), "a request got through without a client certificate"


async def test_a_server_certificate_from_an_unknown_ca_is_refused(
    temporal_env: WorkflowEnvironment, pki: Pki, tmp_path: Path
) -> None:
    other_ca = make_pki(tmp_path / "other")
    upstream = temporal_env.client.service_client.config.target_host
    async with TlsProxy(upstream, pki, require_client_cert=False) as proxy:
        env = {**_tls_env(proxy, pki), "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(other_ca.ca_cert)}
        with pytest.raises(TemporalUnreachable) as refused:
            await connect(Settings.from_env(env))
    assert "not signed by a CA this client trusts" in str(refused.value)
    assert not proxy.headers_seen(), "a request was sent over an unverified connection"


async def test_embedded_mode_talks_plain_to_its_own_server_whatever_the_environment(
    tmp_path: Path, pki: Pki
) -> None:
    """``--embedded`` must work with a shell configured for a secured cluster: the dev server
    it starts gets a plain connection, and never sees the key meant for that cluster."""
    unreachable = f"127.0.0.1:{free_port()}"
    settings = Settings.from_env(
        {
            "TEMPORAL_ADDRESS": unreachable,
            "TEMPORAL_API_KEY": API_KEY,
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca_cert),
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key),
            "DPLAN_STATE_DIR": str(tmp_path / "state"),
        }
    )
    assert settings.temporal_access.uses_client_cert
    async with EmbeddedTemporal(settings, ui=False) as server:
        assert server.started
        embedded = server.client_settings(settings)
        assert embedded.temporal_address == server.address
        assert embedded.temporal_access == TemporalAccess()
        client = await connect(embedded)
        assert await client.service_client.check_health()
        assert client.service_client.config.api_key is None
