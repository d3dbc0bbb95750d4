"""``dplan ui``: serve the plan page (``durable_plans/ui``) until Ctrl-C.

The client is made as every other command makes it (``Client.connect`` with the
environment's settings and ``--by``), so what the page does is recorded as the CLI's
commands record it. A non-local address without a token is refused before connecting.
"""

from __future__ import annotations

from durable_plans.activities.log import ensure_logging
from durable_plans.cli._common import Exit, Usage, err, read_settings, reported
from durable_plans.client import Client

__all__ = ["ui_command"]


async def ui_command(
    *, host: str, port: int, token: str | None, operator: str | None, temporal_ui: str | None
) -> int:
    """0 when stopped, 1 unreachable or cannot listen, 2 refused settings."""
    ensure_logging(json=False, level="WARNING")

    async def body() -> int:
        from durable_plans.ui import UiSecurity, run_ui

        settings = read_settings()
        chosen = token or settings.ui_token
        if temporal_ui:
            settings = settings.with_overrides(ui_url=temporal_ui)
        try:
            security = UiSecurity(bind_host=host, token=chosen)
        except ValueError as problem:
            raise Usage(f"error: {problem}") from None
        client = await Client.connect(settings, operator=operator)
        try:
            await run_ui(client, security, port=port)
        except OSError as error:
            err(f"error: cannot listen on {host}:{port}: {error.strerror or error}")
            return Exit.FAILED
        return Exit.OK

    return await reported(body())
