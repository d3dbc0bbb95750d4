"""Where the Temporal server is and how to get in: Temporal's own environment configuration.

The worker and every ``dplan`` command resolve their connection here, through
``temporalio.envconfig``, the loader the ``temporal`` CLI and every Temporal SDK share. So
the same variables (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``,
``TEMPORAL_TLS_*``, ``TEMPORAL_GRPC_META_*``) and the same TOML profiles
(``TEMPORAL_CONFIG_FILE``, ``TEMPORAL_PROFILE``, default
``~/.config/temporalio/temporal.toml``) that drive ``temporal`` drive ``dplan``, and a
deployment configured for one is configured for the other.

Resolution happens once, when the settings are read, so a bad configuration (an unknown
profile, malformed TOML, a certificate file that is not there) is one clear line at start
(exit 2), not a confusing transport error later. Certificates and keys are read then too.

The secrets this yields (API key, client key, gRPC metadata) stay in the process that read
them: ``TemporalAccess`` hides them from ``repr``, ``describe`` reports only whether they
are in use, and nothing here ever reaches a workflow input, result, memo or log line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from durable_plans._errors import TemporalConfigError

if TYPE_CHECKING:  # temporalio is slow to import; settings are read without it
    from temporalio.envconfig import ClientConfigTLS
    from temporalio.service import TLSConfig

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_NAMESPACE",
    "QUERY_RPC_TIMEOUT",
    "TemporalAccess",
    "TemporalConfigError",
    "TemporalTarget",
    "connect_options",
    "describe_connection",
    "resolve_temporal",
]

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"

QUERY_RPC_TIMEOUT = timedelta(seconds=10)
"""How long a caller (the client, the CLI, the page) waits for a workflow to answer a
query. A query needs a worker to answer it (a closed workflow's, one replaying it);
without one the server holds the call open, so the wait is bounded and a missing worker
costs a sentence, not a hang. It lives here, with how callers reach the server, and not in
``workflows.policies``: that module is workflow code (timeouts of the commands a workflow
issues, passed through the sandbox), and callers must not depend on the workflow layer."""

_ENV_PREFIX = "TEMPORAL_"
_HOST_VERIFICATION_ENV = "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"
_TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True, repr=False)
class TemporalAccess:
    """How to get into the server: TLS (server CA, server name, client certificate), an API
    key, extra gRPC metadata, and the profile they came from.

    The default is a plain, unauthenticated connection, which is what a local dev server
    (and the one ``dplan run --embedded`` starts) expects.
    """

    tls: bool | TLSConfig = field(default=False, hash=False)  # TLSConfig is unhashable
    """``False``: plain text; ``True``: TLS with the system roots; a ``TLSConfig``: TLS as
    configured. Holds the client's private key, so never printed."""
    api_key: str | None = None
    """Sent by the SDK as ``authorization: Bearer <key>`` on every call."""
    rpc_metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    """``TEMPORAL_GRPC_META_*`` / a profile's ``grpc_meta``: extra headers, maybe secret."""
    profile: str | None = None
    """The profile used from ``config_file``; None when no config file was found."""
    config_file: str | None = None

    @property
    def uses_tls(self) -> bool:
        return self.tls is not False

    @property
    def uses_client_cert(self) -> bool:
        return not isinstance(self.tls, bool) and self.tls.client_cert is not None

    @property
    def uses_api_key(self) -> bool:
        return self.api_key is not None

    def __repr__(self) -> str:
        # Only facts that are safe to print: no key, certificate bytes or header values.
        return (
            f"TemporalAccess(tls={self.uses_tls}, client_cert={self.uses_client_cert}, "
            f"api_key={'set' if self.uses_api_key else None}, "
            f"rpc_metadata={sorted(self.rpc_metadata)}, profile={self.profile!r})"
        )


@dataclass(frozen=True)
class TemporalTarget:
    """The resolved connection: where (address, namespace) and how (``access``)."""

    address: str = DEFAULT_ADDRESS
    namespace: str = DEFAULT_NAMESPACE
    access: TemporalAccess = field(default_factory=TemporalAccess)


def default_config_file(env: Mapping[str, str]) -> Path:
    """Where the ``temporal`` CLI and the SDKs look when ``TEMPORAL_CONFIG_FILE`` is unset:
    the user config dir (``$XDG_CONFIG_HOME`` or ``~/.config``; on macOS
    ``~/Library/Application Support``), then ``temporalio/temporal.toml``."""
    base = env.get("XDG_CONFIG_HOME") or os.environ.get("XDG_CONFIG_HOME")
    if not base:
        mac = sys.platform == "darwin"
        base = str(Path.home() / ("Library/Application Support" if mac else ".config"))
    return Path(base) / "temporalio" / "temporal.toml"


def resolve_temporal(env: Mapping[str, str]) -> TemporalTarget:
    """The connection ``env`` describes, with a profile from the Temporal config file
    applied first and the environment variables over it (the CLI's precedence).

    Blank variables count as unset, as everywhere in our settings. Raises
    ``TemporalConfigError`` with one line naming the problem.
    """
    # Imported here: only processes that talk to Temporal pay for the SDK import.
    from temporalio.envconfig import ClientConfigProfile

    temporal_env = {k: v for k, v in env.items() if k.startswith(_ENV_PREFIX) and v.strip()}
    explicit_file = temporal_env.get("TEMPORAL_CONFIG_FILE")
    config_file = Path(explicit_file) if explicit_file else default_config_file(env)
    if explicit_file and not config_file.is_file():
        raise TemporalConfigError(f"TEMPORAL_CONFIG_FILE: no such file: {config_file}")
    profile_name = temporal_env.get("TEMPORAL_PROFILE")
    where = (
        f"Temporal config {config_file}"
        if config_file.is_file()
        else f"Temporal config (no file at {config_file})"
    )
    try:
        profile = ClientConfigProfile.load(
            profile=profile_name,
            # The SDK would find the file itself; naming it keeps messages and logs exact.
            config_source=config_file if config_file.is_file() else None,
            override_env_vars=temporal_env,
        )
    except Exception as err:  # the bridge raises its own ConfigError type
        raise TemporalConfigError(f"{where}: {_one_line(err)}") from None
    _refuse_disabled_host_verification(temporal_env, config_file, profile_name)

    api_key = profile.api_key or None
    tls: bool | TLSConfig = api_key is not None  # an API key means TLS, as in the SDK
    if profile.tls is not None:
        tls = _tls_config(profile.tls)
    used_file = config_file if config_file.is_file() else None
    return TemporalTarget(
        address=profile.address or DEFAULT_ADDRESS,
        namespace=profile.namespace or DEFAULT_NAMESPACE,
        access=TemporalAccess(
            tls=tls,
            api_key=api_key,
            rpc_metadata=dict(profile.grpc_meta),
            profile=(profile_name or "default") if used_file else None,
            config_file=str(used_file) if used_file else None,
        ),
    )


def _one_line(err: BaseException) -> str:
    """The loader's message in one line. A TOML parse error quotes the offending source
    line, which may hold an API key, so only its first line (position) and last line (what
    was wrong) are kept."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]}: {lines[-1]}"
    return text.removeprefix("Configuration loading error: ")


def _refuse_disabled_host_verification(
    env: Mapping[str, str], config_file: Path, profile_name: str | None
) -> None:
    """``temporal`` can skip the server-name check; the Python SDK cannot. Ignoring the
    setting would trade a clear message now for a certificate error at connect time."""
    disabled = env.get(_HOST_VERIFICATION_ENV, "").strip().lower() in _TRUE
    source = _HOST_VERIFICATION_ENV
    if not disabled and config_file.is_file():
        disabled = _profile_disables_host_verification(config_file, profile_name or "default")
        source = f"tls.disable_host_verification in {config_file}"
    if disabled:
        raise TemporalConfigError(
            f"{source}: not supported by the Temporal Python SDK; set "
            "TEMPORAL_TLS_SERVER_NAME (tls.server_name) to a name in the server's certificate"
        )


def _profile_disables_host_verification(config_file: Path, profile_name: str) -> bool:
    # ``ClientConfigTLS`` drops this key, so the file is read for it; it already parsed.
    import tomllib

    try:
        document = tomllib.loads(config_file.read_text())
    except (OSError, ValueError):
        return False
    profile: Any = document.get("profile", {}).get(profile_name, {})
    tls: Any = profile.get("tls", {}) if isinstance(profile, dict) else {}
    return isinstance(tls, dict) and tls.get("disable_host_verification") is True


# What each TLS source is called in the environment and in a profile, for error messages.
_TLS_SOURCES = {
    "server_root_ca_cert": ("server CA certificate", "TEMPORAL_TLS_SERVER_CA_CERT_PATH"),
    "client_cert": ("client certificate", "TEMPORAL_TLS_CLIENT_CERT_PATH"),
    "client_private_key": ("client key", "TEMPORAL_TLS_CLIENT_KEY_PATH"),
}


def _tls_config(tls: ClientConfigTLS) -> bool | TLSConfig:
    """The SDK's ``TLSConfig`` with every file read now, so a missing one is named at start."""
    from temporalio.service import TLSConfig

    if tls.disabled is True:
        return False
    material: dict[str, bytes | None] = {}
    for attr, (what, variable) in _TLS_SOURCES.items():
        source = getattr(tls, attr)
        if isinstance(source, Path):
            try:
                material[attr] = source.read_bytes()
            except OSError as err:
                raise TemporalConfigError(
                    f"Temporal TLS {what} ({variable}): cannot read {source}: "
                    f"{err.strerror or type(err).__name__}"
                ) from None
        elif isinstance(source, str):
            material[attr] = source.encode()
        else:
            material[attr] = source
    if (material["client_cert"] is None) != (material["client_private_key"] is None):
        have, missing = (
            ("client certificate", "client key (TEMPORAL_TLS_CLIENT_KEY_PATH)")
            if material["client_cert"] is not None
            else ("client key", "client certificate (TEMPORAL_TLS_CLIENT_CERT_PATH)")
        )
        raise TemporalConfigError(f"Temporal mTLS: a {have} is set but no {missing}")
    return TLSConfig(
        domain=tls.server_name or None,
        server_root_ca_cert=material["server_root_ca_cert"],
        client_cert=material["client_cert"],
        client_private_key=material["client_private_key"],
    )


def connect_options(access: TemporalAccess) -> dict[str, Any]:
    """Keyword arguments for ``Client.connect`` besides the address and namespace.

    ``tls`` is always explicit: left out, the SDK would switch TLS on by itself whenever an
    API key is set, which would contradict a profile that disabled it.
    """
    options: dict[str, Any] = {"tls": access.tls}
    if access.api_key is not None:
        options["api_key"] = access.api_key
    if access.rpc_metadata:
        options["rpc_metadata"] = dict(access.rpc_metadata)
    return options


def describe_connection(address: str, namespace: str, access: TemporalAccess) -> dict[str, Any]:
    """Log fields that say where and how a process connects, never with what: whether TLS,
    a client certificate and an API key are used, not the key or certificate."""
    if access.uses_client_cert:
        tls = "mtls"
    elif access.uses_tls:
        tls = "tls"
    else:
        tls = "off"
    return {
        "address": address,
        "namespace": namespace,
        "profile": access.profile,
        "config_file": access.config_file,
        "tls": tls,
        # Not "api_key": the log redaction drops any field named like a credential.
        "bearer_auth": access.uses_api_key,
    }
