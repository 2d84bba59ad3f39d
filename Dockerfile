# syntax=docker/dockerfile:1
# trajgrade sidecar image: `docker build -t trajgrade .`
#
# Stage 1 builds the wheel (Rust core + PyO3 binding) with maturin; stage 2 installs only that
# wheel and its Python dependencies into a slim, non-root Python runtime. Configuration is by
# TRAJGRADE_* environment variables (every `trajgrade serve --flag` has one; see
# docs/deployment.md). tests/test_sidecar.py runs this file's ENTRYPOINT, ENV and HEALTHCHECK
# outside Docker, so keep them in the exec (JSON) form.

ARG PYTHON_VERSION=3.11
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS builder
# Debian bookworm's python3 is 3.11, the ABI floor of the abi3 wheel (pyproject requires-python).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/maturin \
    && /opt/maturin/bin/pip install --no-cache-dir 'maturin==1.16.0'
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto/ proto/
COPY rust/ rust/
COPY python/ python/
# The cache mounts keep the crate downloads and compiled dependencies between image builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/rust/target \
    /opt/maturin/bin/maturin build --release --out /dist

FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=builder /dist/ /tmp/dist/
COPY constraints.txt /tmp/constraints.txt
# The wheel's dependencies at the versions the repository's tests ran with (constraints.txt);
# nothing else is installed. Bytecode is compiled here, once, so each `trajgrade health` probe
# starts fast on a read-only filesystem.
# hadolint ignore=DL3013
RUN pip install --constraint /tmp/constraints.txt /tmp/dist/*.whl \
    && rm -rf /tmp/dist /tmp/constraints.txt \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin trajgrade \
    && mkdir -p /sock \
    && chown trajgrade:trajgrade /sock
USER 10001:10001
WORKDIR /home/trajgrade

# Listen on every interface of the container's own network namespace (publish it with -p, or
# reach it from the pod). A sidecar should share a unix socket instead:
# TRAJGRADE_LISTEN=unix:/sock/trajgrade.sock with /sock an emptyDir (deploy/k8s/).
ENV TRAJGRADE_LISTEN=0.0.0.0:50051 \
    TRAJGRADE_LOG_FORMAT=json \
    TRAJGRADE_GRACE_PERIOD_S=20
EXPOSE 50051
# `trajgrade health` dials the first TRAJGRADE_LISTEN address (a wildcard host means loopback).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["trajgrade", "health", "--quiet"]
# SIGTERM drains: health goes NOT_SERVING, queued work finishes within the grace period.
STOPSIGNAL SIGTERM
ENTRYPOINT ["trajgrade", "serve"]
