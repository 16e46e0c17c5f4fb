# Helpers the client test scripts (run.sh, agents.sh) source. `what` names the script in messages.

# need_model PATH WHAT: return if the model file is there; else skip the script (exit 0), or fail
# it when INFR_REQUIRE_MODELS is set.
need_model() {
    [ -f "$1" ] && return 0
    if [ -n "${INFR_REQUIRE_MODELS:-}" ]; then
        echo "$2: missing model $1" >&2
        exit 1
    fi
    echo "$2: skipping, $1 not found"
    exit 0
}

# infr_bin ROOT: the `infr` to test: $INFR_BIN, or target/release/infr built now.
infr_bin() {
    if [ -n "${INFR_BIN:-}" ]; then
        echo "$INFR_BIN"
        return
    fi
    cargo build --release --locked -p infr-cli --manifest-path "$1/Cargo.toml" >&2
    echo "$1/target/release/infr"
}

# A free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_up PORT PID LOG WHAT: until the server answers /health; its log and a failure if it dies
# or is not up within two minutes.
wait_up() {
    for _ in $(seq 1 240); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.5
    done
    echo "the $4 server did not come up" >&2
    cat "$3" >&2
    exit 1
}
