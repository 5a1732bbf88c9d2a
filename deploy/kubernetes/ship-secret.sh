#!/usr/bin/env bash
# Ship a keyset snapshot as the Kubernetes Secret the replicas mount (create or update).
#   ship-secret.sh SNAPSHOT     [env SECRET_NAME, default mcp-keyset; NAMESPACE, default current]
# The Secret's content travels through the pipe only: it is never printed.
set -euo pipefail
kubectl create secret generic "${SECRET_NAME:-mcp-keyset}" ${NAMESPACE:+--namespace "$NAMESPACE"} \
  --from-file=keyset.json="$1" --dry-run=client -o yaml \
  | kubectl apply ${NAMESPACE:+--namespace "$NAMESPACE"} -f - >/dev/null
