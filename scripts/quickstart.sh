#!/usr/bin/env bash
# Set up a fresh machine, build infr, and run the default model once.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
python3 scripts/fetch_models.py
cargo build --release --locked
# The best of the small models we can fetch here (SmolLM2-135M answers too, but poorly).
MODEL=${INFR_MODEL:-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
./target/release/infr inspect "$MODEL" | sed -n 1,20p
echo
./target/release/infr run "$MODEL" "${1:-What is the capital of France? Answer in one sentence.}" -n 64
