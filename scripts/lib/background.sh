# Sourced by the benchmark scripts: a scratch folder ($work) and the
# processes started in the background with `start NAME COMMAND...` (output
# in $work/NAME.log), all stopped (SIGINT, then SIGKILL) and the folder
# removed when the script exits; `answers` waits for a server to answer.

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    sleep 0.5
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

start() { # name, command...
    local name=$1
    shift
    "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
}

answers() { # name, load generator, target, method, tool: waits (20 s) until a call succeeds
    local name=$1 load=$2 target=$3 method=$4 tool=$5
    for attempt in $(seq 100); do
        if "$load" load --target "$target" --method "$method" --tool "$tool" \
            --seconds 0.1 --warmup 0 >/dev/null 2>&1; then
            return 0
        fi
        if [ "$attempt" = 100 ]; then
            echo "$name ($target) never answered; logs in $work:" >&2
            tail -n 5 "$work"/*.log >&2
            exit 1
        fi
        sleep 0.2
    done
}
