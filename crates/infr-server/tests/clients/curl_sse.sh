#!/usr/bin/env bash
# Raw HTTP checks of a running `infr serve` with plain `curl -N`: OpenAI SSE (`data:` lines,
# each JSON, ending with `data: [DONE]`), Anthropic SSE (`event: message_start` ...
# `event: message_stop`), 401 for a wrong key, 400 for malformed JSON, and `/metrics` when the
# server runs with --metrics. Any failure exits non-zero with what was received.
#
# Usage: INFR_BASE=http://127.0.0.1:PORT INFR_API_KEY=KEY [INFR_METRICS=1] curl_sse.sh
# (run.sh starts the server and sets these).
set -euo pipefail
base="${INFR_BASE:?set INFR_BASE}"
key="${INFR_API_KEY:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0

fail() {
    echo "curl sse: FAIL: $1" >&2
    for f in "$tmp"/headers "$tmp"/body; do
        if [ -f "$f" ]; then echo "--- $(basename "$f"):" >&2; head -c 4000 "$f" >&2; echo >&2; fi
    done
    exit 1
}

ok() {
    passed=$((passed + 1))
    echo "curl sse: ok: $1"
}

# post PATH JSON [KEY]: POST with curl -N; leaves headers and body in $tmp; prints the status.
post() {
    local auth=()
    if [ -n "${3-}" ]; then auth=(-H "Authorization: Bearer $3" -H "x-api-key: $3"); fi
    rm -f "$tmp/headers" "$tmp/body"
    curl -sS -N --max-time 120 -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' \
        -H 'Content-Type: application/json' "${auth[@]}" --data-binary "$2" "$base$1" \
        || fail "curl could not POST $1"
}

# OpenAI streaming chat.
status=$(post /v1/chat/completions '{"model": "any", "stream": true, "max_tokens": 8, "temperature": 0,
    "messages": [{"role": "user", "content": "What is the capital of France?"}]}' "$key")
[ "$status" = 200 ] || fail "OpenAI stream: status $status"
grep -qi '^content-type: text/event-stream' "$tmp/headers" || fail "OpenAI stream: not text/event-stream"
python3 - "$tmp/body" <<'EOF' || fail "OpenAI stream: bad SSE body"
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
data = [l[len("data: "):] for l in lines if l.startswith("data: ")]
other = [l for l in lines if l and not l.startswith("data: ") and not l.startswith(":")]
assert not other, f"unexpected lines: {other[:3]}"
assert len(data) >= 3, f"too few data lines: {len(data)}"
assert data[-1] == "[DONE]", f"last data line is {data[-1]!r}, not [DONE]"
assert data.count("[DONE]") == 1, "[DONE] more than once"
chunks = [json.loads(d) for d in data[:-1]]  # every other data line is JSON
assert all(c["object"] == "chat.completion.chunk" for c in chunks), "wrong object"
assert len({c["id"] for c in chunks}) == 1, "ids differ between chunks"
text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
assert text.strip(), "no content streamed"
finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
assert finish in (["stop"], ["length"]), f"finish_reason: {finish}"
EOF
ok "OpenAI chat stream: data lines are JSON, one finish_reason, then data: [DONE]"

# Anthropic streaming messages.
status=$(post /v1/messages '{"model": "any", "stream": true, "max_tokens": 8, "temperature": 0,
    "messages": [{"role": "user", "content": "What is the capital of France?"}]}' "$key")
[ "$status" = 200 ] || fail "Anthropic stream: status $status"
grep -qi '^content-type: text/event-stream' "$tmp/headers" || fail "Anthropic stream: not text/event-stream"
python3 - "$tmp/body" <<'EOF' || fail "Anthropic stream: bad SSE body"
import json, sys
blocks = [b for b in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if b.strip()]
events = []
for b in blocks:
    fields = dict(l.split(": ", 1) for l in b.split("\n") if not l.startswith(":"))
    if not fields:
        continue  # keep-alive comment
    assert set(fields) == {"event", "data"}, f"event without name or data: {b!r}"
    d = json.loads(fields["data"])
    assert d["type"] == fields["event"], f"event {fields['event']} carries type {d['type']}"
    events.append((fields["event"], d))
names = [n for n, _ in events]
assert names[0] == "message_start", names
assert names[-1] == "message_stop", names
assert names[-2] == "message_delta", names
assert "content_block_start" in names and "content_block_stop" in names, names
text = "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")
assert text.strip(), "no text streamed"
assert events[-2][1]["delta"]["stop_reason"] in ("end_turn", "max_tokens"), events[-2]
assert events[-2][1]["usage"]["output_tokens"] >= 1, events[-2]
EOF
ok "Anthropic messages stream: message_start ... message_delta, message_stop"

# A wrong key is refused (when the server has one).
if [ -n "$key" ]; then
    status=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}]}' "wrong-$key")
    [ "$status" = 401 ] || fail "wrong key on /v1/chat/completions: status $status, not 401"
    python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["type"] == "authentication_error", e' \
        "$tmp/body" || fail "wrong key: not an OpenAI authentication_error"
    status=$(post /v1/messages '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}' "wrong-$key")
    [ "$status" = 401 ] || fail "wrong key on /v1/messages: status $status, not 401"
    python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); assert b["type"] == "error" and b["error"]["type"] == "authentication_error", b' \
        "$tmp/body" || fail "wrong key: not an Anthropic authentication_error"
    ok "wrong key: 401 in each API's error shape"
fi

# Malformed JSON is a 400 that says so.
status=$(post /v1/chat/completions '{"messages": [' "$key")
[ "$status" = 400 ] || fail "malformed JSON: status $status, not 400"
python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["type"] == "invalid_request_error" and "malformed JSON" in e["message"], e' \
    "$tmp/body" || fail "malformed JSON: wrong error body"
status=$(post /v1/messages '{"messages": [' "$key")
[ "$status" = 400 ] || fail "malformed JSON on /v1/messages: status $status, not 400"
ok "malformed JSON: 400 invalid_request_error"

# Prometheus metrics, when served.
if [ -n "${INFR_METRICS:-}" ]; then
    rm -f "$tmp/headers" "$tmp/body"
    auth=()
    if [ -n "$key" ]; then auth=(-H "Authorization: Bearer $key"); fi
    status=$(curl -sS --max-time 30 -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' "${auth[@]}" "$base/metrics") \
        || fail "curl could not GET /metrics"
    [ "$status" = 200 ] || fail "/metrics: status $status"
    python3 - "$tmp/body" <<'EOF' || fail "/metrics: bad exposition"
import re, sys
sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? \S+$')
values = {}
for line in open(sys.argv[1], encoding="utf-8").read().splitlines():
    if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
        continue
    assert sample.match(line), f"bad line: {line!r}"
    name, value = line.rsplit(" ", 1)
    values[name] = float(value)
ok = 'infr_requests_total{endpoint="chat_completions",status="200"}'
assert values.get(ok, 0) >= 1, "the streamed chat was not counted"
assert values.get('infr_requests_total{endpoint="chat_completions",status="400"}', 0) >= 1, "the 400 was not counted"
assert values["infr_generated_tokens_total"] >= 2, values["infr_generated_tokens_total"]
EOF
    ok "/metrics: Prometheus text, requests and tokens counted"
fi
echo "curl sse: $passed passed"
