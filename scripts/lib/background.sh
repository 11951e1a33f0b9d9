# Sourced by the benchmark scripts: a scratch folder ($work) and the
# processes started in the background with `start NAME COMMAND...` (output
# in $work/NAME.log), all stopped (SIGINT, then SIGKILL) and the folder
# removed when the script exits.

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
