#!/usr/bin/env bash
# Install the system packages infr's build and tests need on Debian/Ubuntu: the Vulkan loader,
# Mesa's software Vulkan driver (lavapipe) and validation layers, Python for the test clients,
# chromium for the chat page test, node and npm for the coding-agent clients (Claude Code,
# opencode; installed from npm by their test).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
pkgs="libvulkan1 mesa-vulkan-drivers vulkan-validationlayers python3 python3-pip ca-certificates curl chromium"
# A node that is already there (nodesource's, say) is kept; Debian's npm would conflict with it.
command -v npm >/dev/null 2>&1 || pkgs="$pkgs nodejs npm"
missing=""
for p in $pkgs; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust (https://rustup.rs) and re-run" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Python packages the interop tests drive (huggingface_hub reads/writes the shared cache).
req="$(dirname "$0")/../tests/hub_interop/requirements.txt"
if ! python3 -c "import huggingface_hub" >/dev/null 2>&1; then
    python3 -m pip install -q --disable-pip-version-check -r "$req" \
        || python3 -m pip install -q --disable-pip-version-check --break-system-packages -r "$req"
fi

# The OpenAI and Anthropic SDKs the server's client tests drive (crates/infr-server/tests/clients).
req="$(dirname "$0")/../crates/infr-server/tests/clients/requirements.txt"
if ! python3 -c "import openai, anthropic" >/dev/null 2>&1; then
    python3 -m pip install -q --disable-pip-version-check -r "$req" \
        || python3 -m pip install -q --disable-pip-version-check --break-system-packages -r "$req"
fi
