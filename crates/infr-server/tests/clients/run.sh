#!/usr/bin/env bash
# Start `infr serve` with the smallest test model on a free loopback port, run the OpenAI and
# Anthropic SDK checks against it, stop the server. Needs `pip install openai anthropic`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../../.." && pwd)"
models="${INFR_TEST_MODELS:-$root/models}"
model="$models/smollm2-135m-instruct-q4_1.gguf"
if [ ! -f "$model" ]; then
    echo "skipping: $model not found"
    exit 0
fi
python3 -c 'import openai, anthropic' 2>/dev/null || { echo "needs: pip install openai anthropic"; exit 1; }
cargo build --release -p infr-cli --manifest-path "$root/Cargo.toml" >&2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export INFR_API_KEY="sdk-test-key"
log=$(mktemp)
"$root/target/release/infr" serve "$model" --dev cpu --host 127.0.0.1 --port "$port" --parallel 2 --ctx-size 2048 \
    >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.5
done
INFR_BASE="http://127.0.0.1:$port" python3 "$(dirname "$0")/sdk_clients.py"
