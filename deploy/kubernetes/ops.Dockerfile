# The image of the rotation job: mrtr-state, kubectl and the deploy scripts, run as uid 10001.
# Build from the repository root:
#   docker build -f deploy/kubernetes/ops.Dockerfile -t registry.example.com/mrtr-state-ops:1.0 .
FROM python:3.12.8-slim-bookworm

# kubectl, pinned, checked against the digest the Kubernetes release publishes beside it
ARG KUBECTL_VERSION=v1.31.4

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates=20230311* curl=7.88.* \
    && arch="$(dpkg --print-architecture)" \
    && base="https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/${arch}" \
    && curl -fsSLo /usr/local/bin/kubectl "${base}/kubectl" \
    && echo "$(curl -fsSL "${base}/kubectl.sha256")  /usr/local/bin/kubectl" | sha256sum -c - \
    && chmod 0755 /usr/local/bin/kubectl \
    && apt-get purge -y curl && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*

# Pinned, with digests (ops-requirements.txt, written by scripts/lock_images.py): the same
# commit gives the same image.
COPY deploy/kubernetes/ops-requirements.txt pyproject.toml README.md LICENSE /src/
COPY mrtr_state /src/mrtr_state
COPY docs/man/mrtr-state.1 /src/docs/man/mrtr-state.1
RUN pip install --no-cache-dir --require-hashes --only-binary=:all: -r /src/ops-requirements.txt \
    && pip install --no-cache-dir --no-deps --no-build-isolation /src && rm -rf /src
COPY deploy /opt/mrtr-state/deploy

RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin mrtr-state
USER 10001:10001
WORKDIR /tmp
