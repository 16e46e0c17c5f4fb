#!/usr/bin/env python3
"""Writes oracle files for a quantized KV cache: llama.cpp (through llama-cpp-python 0.3.36, the vendored
llama.cpp 0c1e57098, CPU build without AMX: CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON
-DGGML_F16C=ON") on the prompt of an existing oracle file, with K and V cached as TYPE (q8_0 needs flash attention
in llama.cpp, so it is on), then 24 greedy single-token decodes. Same JSON layout as logits/*.json.

usage: make_kv_oracle.py --models DIR --type q8_0 --out DIR logits/<model>__<case>.json ...
"""
import argparse, hashlib, json, os
import numpy as np
import llama_cpp

TYPES = {"q8_0": llama_cpp.GGML_TYPE_Q8_0, "f16": llama_cpp.GGML_TYPE_F16}


def sig(x, n=5):
    return float(f"{x:.{n-1}e}")


def run(src, models, ty, out_dir):
    base = json.load(open(src))
    model = os.path.join(models, base["model"] + ".gguf")
    ids = base["prompt_ids"]
    n_ctx = len(ids) + 32
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True, n_threads=2,
                          n_threads_batch=2, flash_attn=True, type_k=TYPES[ty], type_v=TYPES[ty], verbose=False)
    llm.eval(ids)
    rows = [np.array(llm.scores[i], dtype=np.float64) for i in range(len(ids))]
    greedy = []
    for _ in range(24):
        t = int(np.argmax(rows[-1]))
        greedy.append(t)
        llm.eval([t])
        rows.append(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64))
    lg = np.stack(rows)
    assert np.isfinite(lg).all(), "non-finite logits"
    out = []
    for i in range(lg.shape[0]):
        row = lg[i]
        mx = row.max()
        lse = mx + np.log(np.exp(row - mx).sum())
        top = np.argsort(-row, kind="stable")[:40]
        out.append({"pos": i, "lse": sig(lse), "top": [[int(t), sig(row[t])] for t in top]})
    j = dict(base)
    j.update({"sha256": hashlib.sha256(open(model, "rb").read()).hexdigest(), "llama_cpp": "0c1e57098",
              "settings": dict(base["settings"], tool="llama-cpp-python 0.3.36 (Llama.eval, logits_all)", kv_type=ty,
                               flash_attn="on", backend="CPU (AVX2/FMA/F16C, no AMX)", n_ctx=n_ctx),
              "greedy_ids": greedy, "rows": out})
    name = os.path.basename(src)
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump(j, f, separators=(",", ":"))
    print(f"{name}: {len(ids)} prompt tokens, greedy {greedy[:8]}...")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--type", default="q8_0", choices=sorted(TYPES))
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for f in a.files:
        run(f, a.models, a.type, a.out)


if __name__ == "__main__":
    main()
