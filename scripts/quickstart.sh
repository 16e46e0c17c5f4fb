#!/usr/bin/env bash
# Set up a fresh machine, build infr, and run the default model once.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
python3 scripts/fetch_models.py
cargo build --release --locked
MODEL=${INFR_MODEL:-models/smollm2-135m-instruct-q4_1.gguf}
./target/release/infr inspect "$MODEL" | sed -n 1,20p
echo
./target/release/infr run "$MODEL" "${1:-What is the capital of France? Answer in one sentence.}" -n 64
