#!/usr/bin/env bash
# Run a command on a software Vulkan driver that has cooperative matrices: Mesa lavapipe from
# Debian sid (26.x, f16 8x8x8 cooperative matrices), unpacked with its own glibc, libstdc++
# and LLVM into a private root and used through that root's dynamic loader. Nothing is
# installed into the system. Debian bookworm's lavapipe (22.3, the one CI and quickstart.sh
# use) has no cooperative matrices, so this is how the coopmat kernels run without a GPU
# (with 8x8 fragments; NVIDIA GPUs run them with 16x16).
#
# usage: scripts/coopmat-lavapipe.sh PROGRAM [ARGS...]
#   e.g. cargo test --release -p infr-vulkan --no-run
#        scripts/coopmat-lavapipe.sh target/release/deps/parity-<hash>
# The root lives in $INFR_SID_ROOT (default /tmp/infr-sid) and is reused. Programs that
# PROGRAM starts do not inherit the loader (run test binaries directly, not through cargo).
# The system's validation layer is too old for this driver's structures, so layers are off.
set -euo pipefail
ROOT=${INFR_SID_ROOT:-/tmp/infr-sid}
L=$ROOT/usr/lib/x86_64-linux-gnu
if [ ! -f "$ROOT/lvp.json" ]; then
    apt_dir=$ROOT.apt
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$ROOT"
    echo "deb http://deb.debian.org/debian sid main" > "$apt_dir/sources.list"
    : > "$apt_dir/status"
    # An empty package status makes apt resolve the whole dependency closure.
    o=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
       -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::status=$apt_dir/status"
       -o "Dir::Cache=$apt_dir/cache" -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")
    apt-get "${o[@]}" -qq update
    apt-get "${o[@]}" -qq -y --download-only --no-install-recommends install mesa-vulkan-drivers libvulkan1
    for deb in "$apt_dir"/cache/archives/*.deb; do dpkg -x "$deb" "$ROOT"; done
    printf '{"ICD": {"api_version": "1.4.0", "library_path": "%s"}, "file_format_version": "1.0.0"}\n' \
        "$L/libvulkan_lvp.so" > "$ROOT/lvp.json"
fi
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 2; }
prog=$1; shift
case $prog in */*) ;; *) prog=$(command -v -- "$prog") ;; esac
export VK_DRIVER_FILES=$ROOT/lvp.json VK_LOADER_LAYERS_DISABLE='~all~'
exec "$L/ld-linux-x86-64.so.2" --library-path "$L" --argv0 "$prog" "$prog" "$@"
