#!/usr/bin/env bash
# Start `infr serve` with the smallest test model on a free loopback port (API key and
# --metrics on), run the OpenAI and Anthropic SDK checks and the raw curl SSE checks
# (curl_sse.sh) against it, stop the server. Needs `pip install -r requirements.txt`
# (scripts/install-deps.sh does it). A missing model skips, unless INFR_REQUIRE_MODELS is set;
# then it fails, as missing SDKs always do. INFR_BIN picks a prebuilt `infr` (default: build
# target/release/infr).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
models="${INFR_TEST_MODELS:-$root/models}"
model="$models/smollm2-135m-instruct-q4_1.gguf"
# shellcheck source=lib.sh
. "$here/lib.sh"
need_model "$model" "sdk clients"
python3 -c 'import openai, anthropic, litellm, websockets' 2>/dev/null \
    || { echo "sdk clients: needs python3 -m pip install -r $here/requirements.txt" >&2; exit 1; }
bin=$(infr_bin "$root")
port=$(free_port)
export INFR_API_KEY="sdk-test-key"
log=$(mktemp)
"$bin" serve "$model" --dev cpu --host 127.0.0.1 --port "$port" --parallel 2 --ctx-size 4096 --metrics >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
wait_up "$port" "$pid" "$log" smollm2
INFR_BASE="http://127.0.0.1:$port" python3 "$here/sdk_clients.py"
INFR_BASE="http://127.0.0.1:$port" INFR_METRICS=1 bash "$here/curl_sse.sh"
# gpt-oss's harmony dialect: a random-weight gpt-oss written by `infr synth`, served with the
# model's own chat template from testdata (`--chat-template-file`).
gptoss=$(mktemp -d)
"$bin" synth --shape tiny-gpt-oss -o "$gptoss/tiny-gpt-oss.gguf" >/dev/null
port2=$(free_port)
"$bin" serve "$gptoss/tiny-gpt-oss.gguf" --dev cpu --host 127.0.0.1 --port "$port2" --parallel 1 --ctx-size 2048 \
    --chat-template-file "$root/testdata/templates/openai-gpt-oss-120b.jinja" >"$gptoss/log" 2>&1 &
pid2=$!
trap 'kill "$pid" "$pid2" 2>/dev/null || true; wait "$pid" "$pid2" 2>/dev/null || true; rm -rf "$log" "$gptoss"' EXIT
wait_up "$port2" "$pid2" "$gptoss/log" gpt-oss
INFR_BASE="http://127.0.0.1:$port2" python3 "$here/sdk_harmony.py"
# Scale-out: two replicas of the small model behind LiteLLM's router, a replica restarted and
# one drained (litellm_replicas.py).
INFR_BIN="$bin" INFR_MODEL="$model" python3 "$here/litellm_replicas.py"
# The chat page at GET / in headless chromium (chat_page.py).
INFR_BIN="$bin" INFR_MODEL="$model" python3 "$here/chat_page.py"
# Claude Code and opencode, from npm, each through a tool round trip (agents.sh).
INFR_BIN="$bin" bash "$here/agents.sh"
