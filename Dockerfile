# The worker image: the project installed with its PostgreSQL extra, nothing else.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY durable_plans ./durable_plans
COPY examples ./examples
RUN pip install --no-cache-dir '.[postgres]'
ENV DPLAN_WORKSPACE=/workspace
VOLUME ["/workspace"]
CMD ["dplan-worker"]
