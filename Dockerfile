# One image for the service and the workers: `serve` or `worker` is chosen by the command.
#   docker build -t lakefs-delta-exporter .
#   docker run --env-file exporter.env -p 18080:18080 lakefs-delta-exporter serve --host 0.0.0.0
#   docker run --env-file exporter.env lakefs-delta-exporter worker
FROM python:3.11-slim AS build
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
COPY --chown=exporter:exporter actions /app/actions
WORKDIR /app
ENV LAKEFS_DELTA_ACTIONS_DIR=/app/actions
USER 10001
EXPOSE 18080
HEALTHCHECK --interval=30s --timeout=3s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:18080/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["lakefs-delta"]
CMD ["serve", "--host", "0.0.0.0"]
