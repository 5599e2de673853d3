# noderoll worker and bridge image: `docker run IMAGE worker` / `docker run IMAGE bridge`.
# Build: docker build -t ghcr.io/noderoll/noderoll:dev . (docker-compose.yml builds it under that name)
FROM python:3.11-slim AS build
WORKDIR /src
# Dependencies first so a code change does not reinstall them.
COPY pyproject.toml README.md ./
COPY api/ api/
COPY planning/ planning/
COPY workflows/ workflows/
COPY activities/ activities/
COPY worker/ worker/
COPY cli/ cli/
COPY demo/ demo/
COPY service/ service/
COPY crd_bridge/ crd_bridge/
COPY agent/ agent/
COPY fleetsim/ fleetsim/
COPY localstack/ localstack/
COPY bench/ bench/
COPY webhook/ webhook/
COPY protocol/ protocol/
COPY metrics/ metrics/
COPY kube/ kube/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NODEROLL_METRICS_PORT=9090
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# Unprivileged: the worker and the bridge only talk to the API server and Temporal.
USER 65532:65532
WORKDIR /home/noderoll
EXPOSE 9090
ENTRYPOINT ["noderoll"]
CMD ["--help"]
