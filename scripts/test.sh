#!/usr/bin/env bash
# The test suite: every crate's unit and integration tests, with the real models from
# scripts/fetch_models.py and Vulkan on Mesa lavapipe when no GPU is present. Missing models or
# a missing Vulkan device fail the run instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export INFR_TEST_MODELS="${INFR_TEST_MODELS:-$PWD/models}"
export INFR_REQUIRE_MODELS="${INFR_REQUIRE_MODELS:-1}"
export INFR_REQUIRE_VULKAN="${INFR_REQUIRE_VULKAN:-1}"
export INFR_REQUIRE_PYTHON_HUB="${INFR_REQUIRE_PYTHON_HUB:-1}"
# Prefer lavapipe unless the caller chose drivers.
export VK_LOADER_DRIVERS_SELECT="${VK_LOADER_DRIVERS_SELECT:-*lvp*}"
cargo test --release --workspace --locked "$@"
