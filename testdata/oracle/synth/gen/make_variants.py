#!/usr/bin/env python3
"""Tiny random-weight variants of the synth models with other shapes than the ones the engine was written
against, made by the same makers (make_synth.py, make_gpt_oss.py) with other shape arguments, so that the
oracle tests check the general case: other widths, head counts and head dims, GQA ratios, expert counts that
are not powers of two (nor multiples of four), other top-k, a DeltaNet with three value heads per key head and
an attention layer every second layer, an MoE on every Llama 4 layer, other windows and layer patterns.

usage: make_variants.py --tok-src SMOLLM2.gguf --out DIR [name ...]
names: see VARIANTS. The oracles come from make_oracle_pyllama.py like the others.
"""
import argparse, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_synth import Builder, copy_tokenizer, make_gemma4, make_llama4, make_qwen35, make_qwen35moe, make_qwen3moe  # noqa: E402
from make_gpt_oss import make_gpt_oss  # noqa: E402

# The DeltaNet shape both qwen35 variants share: 96 wide, full attention every second layer (1, 3) with 6 q
# heads / 2 kv heads of 32 (rope sections summing to 32 / 4 / 2), 2 key heads with 3 value heads each of 16.
QWEN35_V = dict(E=96, H=6, HKV=2, D=32, DK=16, HK=2, HV=6, FF=160, interval=2, sections=(2, 1, 1, 0))

# name -> (GGUF arch, maker, shape arguments)
VARIANTS = {
    # 96 wide, 6 q heads / 3 kv heads of 16 on sliding layers, 1 of 32 on global ones, a window of 5, per-layer
    # FFN widths, 6 layers (the last one global without attn_v).
    "gemma4-v": ("gemma4", make_gemma4, dict(E=96, H=6, D_SWA=16, D_FULL=32, hkv=(3, 1), SWA_WINDOW=5,
                                            is_swa=(True, True, False, True, True, False),
                                            FF=(128, 96, 128, 160, 128, 192),
                                            out_scales=(0.9, 0.8, 1.1, 0.7, 1.0, 0.85))),
    # 96 wide, 5 layers (global no-rope layer 3 between chunked ones), 6 q heads / 2 kv heads of 16, an MoE on
    # every layer of 6 experts, top-1, with the shared expert.
    "llama4-v": ("llama4", make_llama4, dict(E=96, L=5, H=6, HKV=2, D=16, NE=6, moe_step=1, rope_factor=8.0)),
    # 96 wide, 3 layers, 6 q heads / 2 kv heads of 16, 10 experts, top-3, expert width 32.
    "qwen3moe-v": ("qwen3moe", make_qwen3moe, dict(E=96, L=3, H=6, HKV=2, D=16, NE=10, NU=3, FFE=32, FF=192)),
    "qwen35-v": ("qwen35", make_qwen35, QWEN35_V),
    # As qwen35-v with an MoE of 6 experts, top-3, expert width 32, shared expert 96.
    "qwen35moe-v": ("qwen35moe", make_qwen35moe, dict(QWEN35_V, NE=6, NU=3, FFE=32, FFS=96)),
    # 3 layers, 6 q heads / 3 kv heads of 16, 6 experts, top-2, a window of 4 (64 wide: its untied output
    # doubles the file).
    "gpt-oss-v": ("gpt-oss", make_gpt_oss, dict(L=3, H=6, HKV=3, D=16, NE=6, NU=2, SWA=4)),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    for name in (a.names or list(VARIANTS)):
        arch, maker, shape = VARIANTS[name]
        path = os.path.join(a.out, f"{name}.gguf")
        b = Builder(arch, path, name=name)
        hp = maker(b, **shape)
        copy_tokenizer(b, a.tok_src)
        b.finish()
        print(name, path, os.path.getsize(path), hp)


if __name__ == "__main__":
    main()
