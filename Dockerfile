# The worker image: the project installed with its PostgreSQL extra, nothing else.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md settings.py worker.py ./
COPY domain ./domain
COPY session_store ./session_store
COPY workflows ./workflows
COPY activities ./activities
COPY starter ./starter
COPY durable_plans ./durable_plans
COPY examples ./examples
RUN pip install --no-cache-dir '.[postgres]'
ENV DPLAN_WORKSPACE=/workspace
VOLUME ["/workspace"]
CMD ["dplan-worker"]
