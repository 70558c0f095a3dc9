# Sourced by the trace scripts: start_bench GATEWAY WORKLOAD OUT runs `zkgate-bench --only
# WORKLOAD` against GATEWAY in the background (its report and log under OUT.*) and sets `bench`
# to its pid and `pid` to the gateway's, once the gateway has started.
start_bench() {
    local gateway=$1 workload=$2 out=$3 name
    name=$(basename "$gateway")
    target/release/zkgate-bench --only "$workload" --gateway "$gateway" \
        --figures "$out-fig" --json "$out.json" --out "$out.md" > "$out.log" 2>&1 &
    bench=$!
    pid=
    for _ in $(seq 1 300); do
        pid=$(pgrep -n -x "$name" || true)
        [ -n "$pid" ] && return 0
        sleep 0.1
    done
    echo "the gateway ($name) did not start; see $out.log" >&2
    exit 1
}
