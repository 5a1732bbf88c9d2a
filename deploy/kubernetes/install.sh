#!/usr/bin/env bash
# First install, in order: the KEK's passphrase (a Secret of its own, made once from random
# bytes that never pass through argv), the rotation job's identity and volume, the job, one run
# of it now (it creates the encrypted keyset and ships the Secret), and only then the replicas
# that mount that Secret. Safe to run again (an upgrade, a retry after a failure): the KEK is
# made only if absent, `apply` converges, and the bootstrap run replaces the last one's Job; the
# job itself never replaces the keyset it finds.
#   install.sh   [env NAMESPACE, default the current one;
#                 PROXIED=1: the proxied server (proxy-sidecar.yaml, with its NetworkPolicy)
#                 instead of deployment.yaml; BOOTSTRAP_TIMEOUT, default 600 seconds]
set -euo pipefail
cd "$(dirname "$0")"
ns=(${NAMESPACE:+--namespace "$NAMESPACE"})
job=mrtr-state-bootstrap
timeout=${BOOTSTRAP_TIMEOUT:-600}

if ! kubectl get "${ns[@]}" secret mcp-keyset-kek >/dev/null 2>&1; then
  umask 077
  passphrase=$(mktemp)
  trap 'rm -f "$passphrase"' EXIT
  head -c 32 /dev/urandom | base64 | tr -d '\n' >"$passphrase"
  kubectl create secret generic "${ns[@]}" mcp-keyset-kek --from-file=passphrase="$passphrase"
fi
kubectl apply "${ns[@]}" -f rbac.yaml -f pvc.yaml -f rotate-cronjob.yaml

# A Job runs once and `create` refuses a name that exists: drop the last install's first.
kubectl delete "${ns[@]}" job "$job" --ignore-not-found --wait=true
kubectl create job "${ns[@]}" --from=cronjob/mrtr-state-rotate "$job"
# Complete or Failed, whichever comes first (`kubectl wait` waits for one condition only, so a
# failed job would hold it to its timeout).
deadline=$((SECONDS + timeout))
while :; do
  conditions=$(kubectl get "${ns[@]}" job "$job" \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}') || conditions=
  case " $conditions " in
    *" Complete "*) break ;;
    *" Failed "*)
      echo "install.sh: job/$job failed; its last lines:" >&2
      kubectl logs "${ns[@]}" "job/$job" --tail=20 >&2 || true
      exit 1
      ;;
  esac
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "install.sh: job/$job has not finished after ${timeout} s" >&2
    exit 1
  fi
  sleep 2
done

if [ "${PROXIED:-}" = 1 ]; then
  # The NetworkPolicy goes with the proxied pods whatever the principal mode: it keeps the
  # admin port (metrics, key ids in use) to the monitoring namespace.
  kubectl apply "${ns[@]}" -f proxy-sidecar.yaml -f networkpolicy.yaml
else
  kubectl apply "${ns[@]}" -f deployment.yaml
fi
