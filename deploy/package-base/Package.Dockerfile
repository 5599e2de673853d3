# A package image from a package folder (config.json + steps): the build context is the folder.
#   docker build -f deploy/package-base/Package.Dockerfile --build-arg BASE=ghcr.io/noderoll/agent:0.1.0 \
#     -t registry.example.com/packages/sysctl-tuning:1.0.0 deploy/examples/packages/sysctl-tuning
ARG BASE=ghcr.io/noderoll/agent:0.1.0
FROM ${BASE}
COPY . /noderoll-package/
# Validate config.json at build time, not on the first node.
RUN python -c "from agent.config import load_config; from pathlib import Path; load_config(Path('/noderoll-package'))"
