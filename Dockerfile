# The worker image: dplan-worker and what it runs. git holds every plan's files
# (DPLAN_WORKSPACE is a git repository, its trees under DPLAN_STATE_DIR); bubblewrap is the
# tool sandbox's. The project is installed with its PostgreSQL extra (the session store).
# Used by docker-compose.yml for the worker and for the one-shot `dplan setup`.
FROM python:3.11-slim-trixie

RUN apt-get update \
    && apt-get install -y --no-install-recommends git bubblewrap ca-certificates \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY durable_plans ./durable_plans
COPY examples ./examples
RUN pip install --no-cache-dir '.[postgres]'

# Not root: the worker runs agents' commands in its workspace. Its state (trees, the
# cache clone of a workspace remote, the default SQLite session store) and the workspace
# are volumes, created here so that a new named volume starts owned by this user.
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/dplan \
        --shell /usr/sbin/nologin dplan \
    && mkdir -p /var/lib/dplan /workspace \
    && chown dplan:dplan /var/lib/dplan /workspace

ENV DPLAN_STATE_DIR=/var/lib/dplan \
    DPLAN_WORKSPACE=/workspace \
    PYTHONUNBUFFERED=1
VOLUME ["/var/lib/dplan", "/workspace"]
# Numeric, so that a runtime (Kubernetes runAsNonRoot) can tell it is not root.
USER 10001:10001
WORKDIR /home/dplan

CMD ["dplan-worker"]
