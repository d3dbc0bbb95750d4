"""The dynamic config every Temporal dev server we start runs with.

``temporal server start-dev`` has one history shard, and each of a shard's task queues
(transfer, timer, visibility) loads its tasks from the database at most 20 times a second
(``history.*ProcessorMaxPollRPS``, a cluster setting sized for hundreds of shards). Every
step of a workflow goes through the transfer queue: an activity or workflow task reaches
its worker only once a load picks it up. On one shard that budget is the whole server's:
once its burst is spent (about 20 steps), every following step waits about 42 ms for it.
A 50-activity workflow took 1.57 s against 0.37 s without the cap (measured on this host
with a no-op activity); a conversation turn, three steps, paid about a tenth of a second.

Lifting the cap costs a load per notification instead of one per batch: nothing a dev
server notices. A production cluster keeps its own settings; these are only for servers
this package starts (``dplan run --embedded``, ``durable_plans.testing``, the test suite
and the benches), and for anyone starting a dev server by hand (docs/operating.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["DYNAMIC_CONFIG", "dynamic_config_args"]

# Loads per second allowed to each of the shard's queue readers: far above what a dev
# server's one shard is asked for, so the rate never decides when a task is dispatched.
_LOADS_PER_SECOND = 1000

DYNAMIC_CONFIG: Mapping[str, int] = MappingProxyType(
    {
        "history.transferProcessorMaxPollRPS": _LOADS_PER_SECOND,
        "history.timerProcessorMaxPollRPS": _LOADS_PER_SECOND,
        "history.visibilityProcessorMaxPollRPS": _LOADS_PER_SECOND,
    }
)


def dynamic_config_args() -> list[str]:
    """``--dynamic-config-value key=value`` arguments for ``temporal server start-dev``."""
    args: list[str] = []
    for key, value in DYNAMIC_CONFIG.items():
        args += ["--dynamic-config-value", f"{key}={value}"]
    return args
