#!/usr/bin/env python3
"""Writes <name>__fox.json like make_fox_oracle.py, with llama.cpp driven through llama-cpp-python (the same
vendored llama.cpp commit 0c1e57098 when built from the llama-cpp-python 0.3.36 sdist, CPU, no AMX:
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON").

usage: make_oracle_pyllama.py --dir SYNTH_DIR name ...
Same settings as make_fox_oracle.py: the whole prompt in one llama_decode (n_ubatch >= n_prompt), then 16 greedy
single-token decodes; f16 KV cache, flash attention off, 2 threads; row i = logits after token i.
"""
import argparse, hashlib, json, os
import numpy as np
import llama_cpp

PROMPT = "The quick brown fox jumps over the lazy dog. 1 2 3"


def sig(x, n=5):
    return float(f"{x:.{n-1}e}")


def run(name, d):
    m = os.path.join(d, f"{name}.gguf")
    llm = llama_cpp.Llama(model_path=m, n_ctx=128, n_batch=128, n_ubatch=128, logits_all=True, n_threads=2,
                          n_threads_batch=2, flash_attn=False, type_k=llama_cpp.GGML_TYPE_F16,
                          type_v=llama_cpp.GGML_TYPE_F16, verbose=False)
    ids = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
    llm.eval(ids)
    rows = [np.array(llm.scores[i], dtype=np.float64) for i in range(len(ids))]
    greedy = []
    for _ in range(16):
        t = int(np.argmax(rows[-1]))
        greedy.append(t)
        llm.eval([t])
        rows.append(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64))
    lg = np.stack(rows)
    assert np.isfinite(lg).all(), "non-finite logits"
    out, margins = [], []
    for i in range(lg.shape[0]):
        row = lg[i]
        mx = row.max()
        lse = mx + np.log(np.exp(row - mx).sum())
        top = np.argsort(-row, kind="stable")[:40]
        out.append({"pos": i, "lse": sig(lse), "top": [[int(t), sig(row[t])] for t in top]})
        margins.append(row[top[0]] - row[top[1]])
    j = {"model": f"{name}.gguf", "sha256": hashlib.sha256(open(m, "rb").read()).hexdigest(), "llama_cpp": "0c1e57098",
         "settings": {"mode": "batch", "kv": "f16", "fa": "off", "threads": 2},
         "prompt_ids": ids, "greedy_ids": greedy, "rows": out}
    with open(os.path.join(d, f"{name}__fox.json"), "w") as f:
        json.dump(j, f, separators=(",", ":"))
    std = lg.std(axis=1)
    print(f"{name}: ids {ids} rows {lg.shape[0]} logit-std {std.min():.3f}..{std.max():.3f} "
          f"top1-margin min {min(margins):.4f} median {np.median(margins):.4f} "
          f"distinct-argmax {len(set(np.argmax(lg, 1).tolist()))}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("names", nargs="+")
    a = ap.parse_args()
    for n in a.names:
        run(n, a.dir)


if __name__ == "__main__":
    main()
