#!/bin/bash
# The proxy's user-space instructions per round trip, counted by valgrind's callgrind: a figure
# that does not move from run to run, beside bench/handles.py's CPU time (which, on a shared
# 2-core machine, moves by 10% and more between rounds). It leaves out the kernel: the cost of
# the Redis round trips' system calls and wake-ups is only in the CPU figures.
#
#   bench/instructions.sh tokens|handles|memory [ROUNDS]    (needs valgrind and redis-server)
#
# The proxy runs under callgrind behind the naive upstream; 30 rounds warm it, the counters are
# zeroed, ROUNDS (200) rounds run at one connection, and the count is divided by them.
set -euo pipefail
MODE=${1:?tokens, handles or memory}
ROUNDS=${2:-200}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
PY=${PYTHON:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() {
    for _ in $(seq 900); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.2; done
    echo "nothing listens on $1" >&2
    return 1
}

UPSTREAM=$(port)
"$PY" "$ROOT/examples/naive_upstream.py" "$UPSTREAM" 2>/dev/null &
PIDS+=($!)
wait_for "$UPSTREAM"
case $MODE in
    tokens)
        "$PY" -c "import mrtr_state as ms, sys; ms.Keyset.generate(('A256GCM',)).save(sys.argv[1])" \
            "$WORK/keyset.json"
        STORE=(--keyset "$WORK/keyset.json") ;;
    memory) STORE=(--state-store memory:) ;;
    handles)
        REDIS=$(port)
        redis-server --port "$REDIS" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
            >/dev/null &
        PIDS+=($!)
        wait_for "$REDIS"
        STORE=(--state-store "redis://127.0.0.1:$REDIS/0") ;;
    *) echo "mode: tokens, handles or memory" >&2; exit 2 ;;
esac
PROXY=$(port)
valgrind --tool=callgrind --callgrind-out-file="$WORK/out.%p" "$PY" -m mrtr_state proxy \
    --upstream "http://127.0.0.1:$UPSTREAM/mcp" --listen "127.0.0.1:$PROXY" \
    --principal-header X-Forwarded-User "${STORE[@]}" 2>"$WORK/valgrind.log" &
VALGRIND=$!
PIDS+=($VALGRIND)
wait_for "$PROXY"
"$PY" "$HERE/load_client.py" "http://127.0.0.1:$PROXY/mcp" 1 30 >/dev/null
callgrind_control -z "$VALGRIND" >/dev/null 2>&1
"$PY" "$HERE/load_client.py" "http://127.0.0.1:$PROXY/mcp" 1 "$ROUNDS" >/dev/null
callgrind_control -d "$VALGRIND" >/dev/null 2>&1
sleep 1
DUMP=$(ls "$WORK"/out.*.1)
TOTAL=$(grep -m1 '^summary:' "$DUMP" | awk '{print $2}')
echo "$MODE: $((TOTAL / ROUNDS)) instructions per round trip (user space, $ROUNDS rounds)"
