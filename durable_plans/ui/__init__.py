"""``dplan ui``: a local web page for plans (the DAG, each agent's work, the controls).

The page is plain HTML, CSS and JavaScript served from ``static/`` (the graph layout
library vendored under ``static/vendor/`` by ``make ui-vendor``); everything it shows or
does goes through the typed ``Client`` and the session store, on the server side, so the
payload key and the store's credentials never reach the browser.
"""

from __future__ import annotations

from durable_plans.ui.security import UiSecurity, is_local_host
from durable_plans.ui.server import UiServer, build_app, run_ui, running_ui

__all__ = ["UiSecurity", "UiServer", "build_app", "is_local_host", "run_ui", "running_ui"]
