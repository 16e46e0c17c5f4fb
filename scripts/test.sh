#!/usr/bin/env bash
# The test suite: every crate's unit and integration tests, with the real models from
# scripts/fetch_models.py and Vulkan on Mesa lavapipe when no GPU is present, then the OpenAI and
# Anthropic Python SDKs, LiteLLM, chromium (the chat page), Claude Code and opencode against a real
# `infr serve` (scripts/install-deps.sh installs what they need). Missing models, a missing Vulkan
# device or missing clients fail the run instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export INFR_TEST_MODELS="${INFR_TEST_MODELS:-$PWD/models}"
export INFR_REQUIRE_MODELS="${INFR_REQUIRE_MODELS:-1}"
export INFR_REQUIRE_VULKAN="${INFR_REQUIRE_VULKAN:-1}"
export INFR_REQUIRE_PYTHON_HUB="${INFR_REQUIRE_PYTHON_HUB:-1}"
# Prefer lavapipe unless the caller chose drivers.
export VK_LOADER_DRIVERS_SELECT="${VK_LOADER_DRIVERS_SELECT:-*lvp*}"
cargo test --release --workspace --locked "$@"
# The binaries the stages below run, from that same workspace build: building one package
# alone unifies dependency features differently and compiles infr-vulkan, infr-engine and
# infr-cli again (~70 s on 2 cores).
built=$(cargo test --release --workspace --locked --no-run --message-format=json)
binary() { # TARGET-NAME KIND: the executable of that target from the build above
    python3 -c 'import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    # A bin target has two artifacts: its unit-test harness (profile.test) and the program.
    program = not (m.get("profile") or {}).get("test", False)
    wanted = t.get("name") == sys.argv[1] and sys.argv[2] in t.get("kind", []) and (sys.argv[2] != "bin" or program)
    if m.get("reason") == "compiler-artifact" and wanted and m.get("executable"):
        print(m["executable"])' "$1" "$2" <<<"$built" | tail -1
}
need() { [ -n "$2" ] || { echo "test.sh: the workspace build made no $1" >&2; exit 1; }; }
# The cooperative-matrix kernels run on no driver above (bookworm's lavapipe has none): the
# Vulkan parity tests once more on Debian sid's lavapipe, which has them (8x8 fragments).
# This stage is bound by the driver's cold JIT compiles (its shader cache starts empty in CI),
# so it leaves out the tests that never reach a cooperative kernel (portable kernels, f32 and
# integer-dot matrix-vector kernels of 1-16 rows, embedding gathers: all run above), the row
# counts of every weight type's products that take none and the weight types whose
# cooperative loader is another's code (INFR_PARITY_COOP_ROWS_ONLY: linear_every_type, cold,
# 99 s with every type, 34 s with one of each dequantizer family) and skips LLVM's
# optimization passes (GALLIVM_PERF=nopt): cold, on 2 cores, 594 s against 822 s with every
# test and the optimizer (before the type families).
parity=$(binary parity test); need "Vulkan parity test binary" "$parity"
# The delta rule's other thread shapes and token blocks (INFR_VK_DELTA_SHAPE and
# INFR_VK_DELTA_BLOCK, tuning knobs for GPUs): the recurrent parity tests once per setting,
# with shapes that lavapipe's 8-lane subgroups take.
for setting in "INFR_VK_DELTA_SHAPE=8x16" "INFR_VK_DELTA_SHAPE=2x64" "INFR_VK_DELTA_SHAPE=1x32 INFR_VK_DELTA_BLOCK=3"; do
    env $setting "$parity" recurrent
done
non_coop=(linear_every_type_portable linear_f32_vec_kernels linear_gemv_full_rows embed_every_type tiny_model_portable)
INFR_REQUIRE_COOPMAT=1 INFR_PARITY_COOP_ROWS_ONLY=1 GALLIVM_PERF=nopt scripts/coopmat-lavapipe.sh "$parity" --skip validation_layer_is_active_when_installed \
    "${non_coop[@]/#/--skip=}"
# The synth-model oracles on that driver too: batches of more than 16 rows take the f16
# cooperative path there, as on NVIDIA GPUs (its own tolerance, see tests/oracle_synth.rs).
oracle=$(binary oracle_synth test); need "synth oracle test binary" "$oracle"
scripts/coopmat-lavapipe.sh "$oracle" vulkan
# And the real-model oracle with a q8_0 KV cache there: its SmolLM2 chat case has a clear row
# that the summation order of the cooperative (split-K) prompt products can tip.
oracle_real=$(binary oracle_vulkan test); need "real-model oracle test binary" "$oracle_real"
scripts/coopmat-lavapipe.sh "$oracle_real" q8_0_cache
# The official SDKs, LiteLLM, the chat page and the agents against `infr serve`, with the
# `infr` of the workspace build (run.sh starts it on a free loopback port with smollm2).
INFR_BIN=$(binary infr bin); need "infr binary" "$INFR_BIN"
INFR_BIN=$INFR_BIN crates/infr-server/tests/clients/run.sh
