"""``python -m durable_plans.testing``: the fake provider as its own process.

A separate process outlives the workers a crash test kills, so its request log counts
every call across all of them; ``FakeProviderProcess`` starts it this way. It prints
``READY <base_url>`` once listening (``--help`` for the options).
"""

from __future__ import annotations

from durable_plans.testing._provider_process import main

if __name__ == "__main__":
    main()
