#!/usr/bin/env bash
# First install, in order: the KEK's passphrase (a Secret of its own, made once from random
# bytes that never pass through argv), the rotation job's identity and volume, the job, one run
# of it now (it creates the encrypted keyset and ships the Secret), and only then the replicas
# that mount that Secret.
#   install.sh        [env NAMESPACE, default the current one]
set -euo pipefail
cd "$(dirname "$0")"
ns=(${NAMESPACE:+--namespace "$NAMESPACE"})
if ! kubectl get "${ns[@]}" secret mcp-keyset-kek >/dev/null 2>&1; then
  umask 077
  passphrase=$(mktemp)
  trap 'rm -f "$passphrase"' EXIT
  head -c 32 /dev/urandom | base64 | tr -d '\n' >"$passphrase"
  kubectl create secret generic "${ns[@]}" mcp-keyset-kek --from-file=passphrase="$passphrase"
fi
kubectl apply "${ns[@]}" -f rbac.yaml -f pvc.yaml -f rotate-cronjob.yaml
kubectl create job "${ns[@]}" --from=cronjob/mrtr-state-rotate mrtr-state-bootstrap
kubectl wait "${ns[@]}" --for=condition=complete --timeout=10m job/mrtr-state-bootstrap
kubectl apply "${ns[@]}" -f deployment.yaml
