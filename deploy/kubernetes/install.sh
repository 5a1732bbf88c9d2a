#!/usr/bin/env bash
# First install, in order: the rotation job's identity and volume, the job, one run of it now
# (it creates the keyset and ships the Secret), and only then the replicas that mount that Secret.
#   install.sh        [env NAMESPACE, default the current one]
set -euo pipefail
cd "$(dirname "$0")"
ns=(${NAMESPACE:+--namespace "$NAMESPACE"})
kubectl apply "${ns[@]}" -f rbac.yaml -f pvc.yaml -f rotate-cronjob.yaml
kubectl create job "${ns[@]}" --from=cronjob/mrtr-state-rotate mrtr-state-bootstrap
kubectl wait "${ns[@]}" --for=condition=complete --timeout=10m job/mrtr-state-bootstrap
kubectl apply "${ns[@]}" -f deployment.yaml
