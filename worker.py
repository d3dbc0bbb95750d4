"""``python worker.py`` from a checkout: the same worker as ``dplan-worker``, whose code
lives in ``durable_plans/worker.py``."""

from durable_plans.worker import main

if __name__ == "__main__":
    main()
