# One image for the service and the workers: `serve` or `worker` is chosen by the command.
#   docker build -t lakefs-delta-exporter .
#   docker run --env-file exporter.env -p 18080:18080 lakefs-delta-exporter serve --host 0.0.0.0
#   docker run --env-file exporter.env lakefs-delta-exporter worker
# the full image: its C compiler and Python's headers build exporter/iceberg/_blake2b.c
FROM python:3.11 AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY hooks ./hooks
COPY workers ./workers
COPY lakefs_delta ./lakefs_delta
COPY actions ./actions
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 exporter
COPY --from=build /install /usr/local
WORKDIR /app
USER 10001
EXPOSE 18080
# by role: `serve` answers GET /healthz, a `worker` a Celery ping to its own node (read from PID 1's command)
HEALTHCHECK --interval=30s --timeout=10s --retries=3 CMD ["lakefs-delta", "healthcheck"]
ENTRYPOINT ["lakefs-delta"]
CMD ["serve", "--host", "0.0.0.0"]
