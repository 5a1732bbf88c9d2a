#!/usr/bin/env bash
# Advance key rotation one safe step on the writable source of truth, then ship the keyset to
# the replicas whenever its content differs from what was last shipped *successfully*. A ship
# that fails is retried by the next run even when rotate has nothing new to do, so no replica
# is left without a pending key that a later promotion relies on.
#
#   rotate-and-ship.sh KEYSET SHIP-COMMAND [ARG...]
#
# SHIP-COMMAND is run with a snapshot of KEYSET as its last argument and must exit 0 only once
# the replicas' source (a Kubernetes Secret, the file on each host...) holds that snapshot. The
# first run on an empty volume creates KEYSET (and ships it); an existing one is never replaced.
# Rotation settings come from the usual places (MRTR_STATE_PROPAGATION, MRTR_STATE_RETENTION,
# a config file). Exit codes: those of `mrtr-state rotate` (6: keyset or config problem), else
# the ship command's.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: rotate-and-ship.sh KEYSET SHIP-COMMAND [ARG...]" >&2
  exit 2
fi
keyset=$1
shift
shipped="$keyset.shipped"   # SHA-256 of the content last shipped successfully (not a secret)

mrtr-state rotate --keyset "$keyset" --init-if-missing --json

# One consistent version to hash and ship: writers replace the file by rename, never in place.
umask 077
snapshot=$(mktemp "$(dirname "$keyset")/.keyset-ship.XXXXXX")
trap 'rm -f "$snapshot"' EXIT
cat "$keyset" >"$snapshot"
digest=$(sha256sum "$snapshot" | cut -d' ' -f1)

if [ -f "$shipped" ] && [ "$(cat "$shipped")" = "$digest" ]; then
  echo "keyset unchanged since it was last shipped ($digest)" >&2
  exit 0
fi
"$@" "$snapshot"
printf '%s\n' "$digest" >"$shipped.tmp"
mv -f "$shipped.tmp" "$shipped"
echo "shipped keyset $digest" >&2
