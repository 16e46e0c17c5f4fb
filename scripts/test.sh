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
# The cooperative-matrix kernels run on no driver above (bookworm's lavapipe has none): the
# Vulkan parity tests once more on Debian sid's lavapipe, which has them (8x8 fragments).
parity=$(cargo test --release --locked -p infr-vulkan --test parity --no-run --message-format=json |
    grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | tail -1)
[ -n "$parity" ] || { echo "test.sh: no Vulkan parity test binary was built" >&2; exit 1; }
INFR_REQUIRE_COOPMAT=1 scripts/coopmat-lavapipe.sh "$parity" --skip validation_layer_is_active_when_installed
# The synth-model oracles on that driver too: batches of more than 16 rows take the f16
# cooperative path there, as on NVIDIA GPUs (its own tolerance, see tests/oracle_synth.rs).
oracle=$(cargo test --release --locked -p infr-engine --test oracle_synth --no-run --message-format=json |
    grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | tail -1)
[ -n "$oracle" ] || { echo "test.sh: no synth oracle test binary was built" >&2; exit 1; }
scripts/coopmat-lavapipe.sh "$oracle" vulkan
# And the real-model oracle with a q8_0 KV cache there: its SmolLM2 chat case has a clear row
# that the summation order of the cooperative (split-K) prompt products can tip.
oracle_real=$(cargo test --release --locked -p infr-engine --test oracle_vulkan --no-run --message-format=json |
    grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | tail -1)
[ -n "$oracle_real" ] || { echo "test.sh: no real-model oracle test binary was built" >&2; exit 1; }
scripts/coopmat-lavapipe.sh "$oracle_real" q8_0_cache
# The official SDKs against `infr serve` (builds target/release/infr, starts it on a free
# loopback port with smollm2, stops it afterwards).
crates/infr-server/tests/clients/run.sh
