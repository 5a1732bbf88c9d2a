#!/usr/bin/env bash
# The whole mrtr-state flow on the demo's own keyset (keys/keyset.json), explained as it runs.
set -euo pipefail

# The demo writes keys: it must never touch a keyset the environment or a config file points at
# (MRTR_STATE_KEYSET=/srv/prod/keyset.json make demo). So every MRTR_STATE_* setting is cleared
# and a private config (mktemp: 0600) names the demo's keyset, which also beats any
# mrtr-state.toml found in this folder.
for name in $(env | sed -n 's/^\(MRTR_STATE_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$name"; done
demo_config=$(mktemp)
trap 'rm -f "$demo_config"' EXIT
printf "keyset = '%s'\n" "$PWD/keys/keyset.json" > "$demo_config"
export MRTR_STATE_CONFIG="$demo_config"

# Bold headings on a terminal, unless NO_COLOR is set (no-color.org) or TERM is dumb.
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ] && [ "${TERM:-}" != dumb ]; then
  step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  step() { printf '\n== %s\n' "$*"; }
fi
show() { printf '$ %s\n' "$*"; "$@"; }

step "The demo uses its own keyset, keys/keyset.json (MRTR_STATE_* settings and config files are ignored here)"
if [ -f keys/keyset.json ]; then
  echo "keys/keyset.json exists: using it"
else
  echo "No keyset yet: create keys/keyset.json (mode 0600, one primary key per format)"
  show mrtr-state keys init
fi

step "The keys (ids, algorithms, status; secrets are never printed)"
show mrtr-state keys list

step "Mint a token bound to principal alice and request req-42, carrying state {\"step\":2}"
printf '$ mrtr-state mint --principal alice --request-id req-42 --ttl 120 --state '"'"'{"step":2}'"'"'\n'
TOKEN=$(mrtr-state mint --principal alice --request-id req-42 --ttl 120 --state '{"step":2}')
echo "$TOKEN"

step "Verify it as the retry would: same principal, same request -> the state, exit 0"
printf '$ mrtr-state verify --principal alice --request-id req-42 "$TOKEN"\n'
mrtr-state verify --principal alice --request-id req-42 "$TOKEN"

step "Verify it for another principal -> refused with exit 4 (binding mismatch)"
printf '$ mrtr-state verify --principal mallory --request-id req-42 "$TOKEN"\n'
set +e
mrtr-state verify --principal mallory --request-id req-42 "$TOKEN"
code=$?
set -e
echo "exit code $code"

step "Change one character of the ciphertext -> refused with exit 1 (tag mismatch)"
if [ "${TOKEN:40:1}" = "A" ]; then swap=B; else swap=A; fi
TAMPERED="${TOKEN:0:40}${swap}${TOKEN:41}"
printf '$ mrtr-state verify --principal alice --request-id req-42 "$TAMPERED"\n'
set +e
mrtr-state verify --principal alice --request-id req-42 "$TAMPERED"
code=$?
set -e
echo "exit code $code"

step "Inspect it: anatomy, claims and time line (decrypted because the keyset is at hand)"
printf '$ mrtr-state inspect "$TOKEN"\n'
mrtr-state inspect "$TOKEN"

step "The same state as a JWS (signed, readable: the principal only as a keyed tag) and a JWE"
for fmt in jws jwe; do
  T=$(mrtr-state mint --format "$fmt" --principal alice --request-id req-42 --state '{"step":2}')
  printf '%s token: %s...\n' "$fmt" "${T:0:72}"
  printf '$ mrtr-state verify --principal alice --request-id req-42 "$%s_TOKEN"\n' "$fmt"
  mrtr-state verify --principal alice --request-id req-42 "$T"
done

step "The same as JSON, for scripts"
printf '$ mrtr-state verify --json --principal alice --request-id req-42 "$TOKEN"\n'
mrtr-state verify --json --principal alice --request-id req-42 "$TOKEN"

step "Rotate: one safe step per run; a primary mints 30 days by default, so nothing is due yet"
show mrtr-state rotate --dry-run
step "With a period of an hour, the successor is due now: added pending, promoted once every replica has had an hour to load it"
show mrtr-state rotate --every 1h
show mrtr-state keys list

printf '\nDone. Try: mrtr-state --help\n'
