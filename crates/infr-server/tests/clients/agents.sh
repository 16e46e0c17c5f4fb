#!/usr/bin/env bash
# Real coding-agent clients against `infr serve`: Claude Code (`claude -p`, the Anthropic
# Messages API) and opencode (`opencode run`, OpenAI-compatible chat completions through
# @ai-sdk/openai-compatible), installed from npm at pinned versions and each asked to read a
# file with its read tool. Passes when each client completes its run and its transcript shows
# the model's tool call executed by the client and its result sent back: the protocol round
# trip. Whether the model named the right file and what it then answers is model quality
# (Qwen2.5-Coder-0.5B on a CPU): counted, not checked.
#
# Both run with a short system prompt and only the read tool (Claude Code `--bare
# --system-prompt --tools Read`, an opencode agent): their default prompts (~19k and ~7k
# tokens) take minutes to prefill on a 2-core machine (measured here: opencode's default agent
# 190 s for 7,208 prompt tokens, then the same round trip). The README's client recipes use the
# defaults.
#
# Needs node and npm (scripts/install-deps.sh installs them); packages go to
# $INFR_AGENTS_DIR (default target/agents) and are reused. INFR_BIN picks a prebuilt `infr`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
models="${INFR_TEST_MODELS:-$root/models}"
model="$models/qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"
# shellcheck source=lib.sh
. "$here/lib.sh"
need_model "$model" "agent clients"
command -v npm >/dev/null || { echo "agent clients: needs node and npm (scripts/install-deps.sh)" >&2; exit 1; }
agents="${INFR_AGENTS_DIR:-$root/target/agents}"
mkdir -p "$agents"
agents="$(cd "$agents" && pwd)"
if [ ! -x "$agents/node_modules/.bin/claude" ] || [ ! -x "$agents/node_modules/.bin/opencode" ]; then
    npm install --prefix "$agents" --no-audit --no-fund --loglevel=error \
        @anthropic-ai/claude-code@2.1.197 opencode-ai@1.18.33 >&2
fi
bin=$(infr_bin "$root")
port=$(free_port)
work=$(mktemp -d)
log="$work/serve.log"
# The server requires this key, and each client sends it as its own settings say.
key="${INFR_API_KEY:-agents-test-key}"
env -u INFR_BIN -u INFR_AGENTS_DIR INFR_API_KEY="$key" \
    "$bin" serve "$model" --alias qwen --dev cpu --host 127.0.0.1 --port "$port" --parallel 2 --ctx-size 16384 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
wait_up "$port" "$pid" "$log" qwen
proj="$work/project"
mkdir -p "$proj"
echo "The secret word is PELICAN." >"$proj/notes.txt"
ask="Use the read tool to read notes.txt, then tell me the secret word."
fail() {
    echo "agent clients: $1" >&2
    tail -20 "$log" >&2
    exit 1
}

# Claude Code: the stream-json transcript must hold a Read tool_use from the model and the
# tool_result Claude Code sent back for it, and end with a result (whether the model named the
# right path is model quality: counted, not required). Claude Code samples at its own
# temperature (1), and the 0.5B model now and then writes the call as plain text instead of in
# its tool-call tags (model quality, not protocol): up to three runs, one must do the round trip.
claude_check() {
    python3 - "$1" <<'EOF'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
uses = [c for e in events if e.get("type") == "assistant"
        for c in e["message"].get("content", []) if c.get("type") == "tool_use" and c.get("name") == "Read"]
ids = {u.get("id") for u in uses}
results = [c for e in events if e.get("type") == "user" and isinstance(e["message"].get("content"), list)
           for c in e["message"]["content"] if c.get("type") == "tool_result" and c.get("tool_use_id") in ids]
with_text = [c for c in results if "PELICAN" in json.dumps(c)]
done = [e for e in events if e.get("type") == "result"]
print(f"claude code: {len(uses)} Read call(s), {len(results)} result(s) sent back ({len(with_text)} with the "
      f"file's text), {'a final result' if done else 'no final result'} "
      f"({done[-1].get('num_turns') if done else 0} turns)")
if not (uses and results) and done:
    print(f"claude code's result: {str(done[-1].get('result'))[:300]}")
sys.exit(0 if uses and results and done else 1)
EOF
}
cc_home="$work/cc-home"
mkdir -p "$cc_home"
cc_ok=""
for attempt in 1 2 3; do
    (
        cd "$proj"
        HOME="$cc_home" ANTHROPIC_BASE_URL="http://127.0.0.1:$port" ANTHROPIC_AUTH_TOKEN="$key" ANTHROPIC_MODEL=qwen \
            ANTHROPIC_SMALL_FAST_MODEL=qwen CLAUDE_CODE_MAX_OUTPUT_TOKENS=256 CLAUDE_CODE_ATTRIBUTION_HEADER=0 \
            DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
            timeout 300 "$agents/node_modules/.bin/claude" -p "$ask" --bare --max-turns 3 \
            --system-prompt "You are a coding assistant. To read a file, call the Read tool." \
            --tools Read --allowedTools Read \
            --output-format stream-json --verbose >"$work/claude.jsonl" 2>"$work/claude.err" || true
    )
    if claude_check "$work/claude.jsonl"; then
        cc_ok=1
        break
    fi
    echo "claude code: run $attempt made no round trip"
done
[ -n "$cc_ok" ] || { cat "$work/claude.err" >&2; fail "Claude Code did not complete a tool round trip in three runs"; }

# opencode: an agent with only the read tool, at most three steps (the 0.5B model can keep
# re-reading the file and writing until a 300 s timeout); the run must exit 0 and its JSON
# events show a read call run and answered (the right path: counted, not required). As for
# Claude Code, up to three runs, one must do the round trip.
cat >"$proj/opencode.json" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "provider": {
    "infr": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "infr",
      "options": { "baseURL": "http://127.0.0.1:$port/v1", "apiKey": "$key" },
      "models": { "qwen": { "name": "qwen", "limit": { "context": 8192, "output": 256 } } }
    }
  },
  "small_model": "infr/qwen",
  "agent": {
    "mini": {
      "mode": "primary",
      "temperature": 0,
      "steps": 3,
      "prompt": "You are a coding assistant. Use the read tool to read files when asked.",
      "tools": { "*": false, "read": true }
    }
  }
}
EOF
opencode_check() {
    python3 - "$1" <<'EOF'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
reads = [e["part"] for e in events if e.get("type") == "tool_use" and e["part"].get("tool") == "read"
         and e["part"]["state"].get("status") in ("completed", "error")]
with_text = [r for r in reads if "PELICAN" in r["state"].get("output", "")]
steps = [e for e in events if e.get("type") == "step_finish"]
print(f"opencode: {len(reads)} read call(s) run and answered ({len(with_text)} with the file's text), "
      f"{len(steps)} step(s)")
sys.exit(0 if reads and steps else 1)
EOF
}
oc_home="$work/oc-home"
mkdir -p "$oc_home"
oc_ok=""
for attempt in 1 2 3; do
    (
        cd "$proj"
        HOME="$oc_home" XDG_CONFIG_HOME="$oc_home/.config" XDG_DATA_HOME="$oc_home/.local/share" \
            timeout 300 "$agents/node_modules/.bin/opencode" run -m infr/qwen --agent mini --format json "$ask" \
            >"$work/opencode.jsonl" 2>"$work/opencode.err"
    ) || { cat "$work/opencode.err" >&2; fail "opencode run failed"; }
    if opencode_check "$work/opencode.jsonl"; then
        oc_ok=1
        break
    fi
    echo "opencode: run $attempt made no tool call"
done
[ -n "$oc_ok" ] || { cat "$work/opencode.err" >&2; fail "opencode did not complete a tool round trip in three runs"; }
echo "agent clients: Claude Code and opencode completed tool round trips"
