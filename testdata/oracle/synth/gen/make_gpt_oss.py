#!/usr/bin/env python3
"""Tiny random-weight gpt-oss GGUF, made the way make_synth.py makes the others (same Builder, RNG and tokenizer).

usage: make_gpt_oss.py --tok-src SMOLLM2.gguf --out DIR

Structure as llama.cpp 0c1e57098 reads it (src/models/openai-moe.cpp, arch string "gpt-oss"):
  * 4 layers, n_embd 64, 4 q heads / 2 kv heads of dim 32 (key_length + rope.dimension_count given);
  * sliding window 8 on even layers (default pattern 2: il % 2 == 0 slides), global odd layers;
  * NeoX RoPE, base 150000, YaRN (factor 32, original context 4096) as the real files have it;
  * Q/K/V/O biases, per-head attention sinks (attn_sinks.weight {4});
  * attn_norm before attention, post_attention_norm before the MoE, no ffn_norm;
  * MoE on every layer: router with bias (ffn_gate_inp.{weight,bias}), 8 experts, 4 used, softmax over the chosen
    logits (SOFTMAX_WEIGHT), separate gate/up/down experts with per-expert biases, clamped SwiGLU
    (swiglu_oai: alpha 1.702, limit 7); experts MXFP4 except layer 2's down (Q8_0) and layer 1's up (Q4_0);
  * untied output.weight (gpt-oss requires it).
Gate/up weights use std 0.5 so that the clamps at 7 bite for some activations.
"""
import argparse, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_synth import Builder, copy_tokenizer, common, N_VOCAB, WS, QT  # noqa: E402


def make_gpt_oss(b, E=64, L=4, H=4, HKV=2, D=32, NE=8, NU=4, FFE=64, SWA=8):
    common(b, E, L, H, HKV, FFE, head_dim=D, rope_base=150000.0, eps=1e-5)
    b.u32("%s.rope.dimension_count", D)
    b.u32("%s.expert_count", NE)
    b.u32("%s.expert_used_count", NU)
    b.u32("%s.expert_feed_forward_length", FFE)
    b.u32("%s.attention.sliding_window", SWA)
    b.str("%s.rope.scaling.type", "yarn")
    b.f32("%s.rope.scaling.factor", 32.0)
    b.u32("%s.rope.scaling.original_context_length", 4096)
    b.tensor("token_embd.weight", [E, N_VOCAB], QT.Q8_0, 0.5)
    b.norm("output_norm.weight", E)
    b.tensor("output.weight", [E, N_VOCAB], QT.Q8_0, 0.5)
    for i in range(L):
        p = f"blk.{i}."
        b.norm(p + "attn_norm.weight", E)
        b.tensor(p + "attn_q.weight", [E, H * D], QT.Q8_0, WS)
        b.tensor(p + "attn_q.bias", [H * D], QT.F32, 0.5)
        b.tensor(p + "attn_k.weight", [E, HKV * D], QT.Q8_0, WS)
        b.tensor(p + "attn_k.bias", [HKV * D], QT.F32, 0.5)
        b.tensor(p + "attn_v.weight", [E, HKV * D], QT.Q4_0 if i == 3 else QT.Q8_0, WS)
        b.tensor(p + "attn_v.bias", [HKV * D], QT.F32, 0.5)
        b.tensor(p + "attn_output.weight", [H * D, E], QT.Q8_0, WS)
        b.tensor(p + "attn_output.bias", [E], QT.F32, 0.5)
        b.tensor(p + "attn_sinks.weight", [H], QT.F32, 1.0)
        b.norm(p + "post_attention_norm.weight", E)
        b.tensor(p + "ffn_gate_inp.weight", [E, NE], QT.F32, 0.3)
        b.tensor(p + "ffn_gate_inp.bias", [NE], QT.F32, 0.5)
        b.tensor(p + "ffn_gate_exps.weight", [E, FFE, NE], QT.MXFP4, 0.5)
        b.tensor(p + "ffn_gate_exps.bias", [FFE, NE], QT.F32, 0.5)
        b.tensor(p + "ffn_up_exps.weight", [E, FFE, NE], QT.Q4_0 if i == 1 else QT.MXFP4, 0.5)
        b.tensor(p + "ffn_up_exps.bias", [FFE, NE], QT.F32, 0.5)
        b.tensor(p + "ffn_down_exps.weight", [FFE, E, NE], QT.Q8_0 if i == 2 else QT.MXFP4, WS)
        b.tensor(p + "ffn_down_exps.bias", [E, NE], QT.F32, 0.5)
    return dict(n_embd=E, n_layer=L, n_head=H, n_head_kv=HKV, head_dim=D, n_expert=NE, n_expert_used=NU,
                n_ff_exp=FFE, sliding_window=SWA, swa_layers=list(range(0, L, 2)), yarn=32, tied=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-src", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    path = os.path.join(a.out, "gpt-oss.gguf")
    b = Builder("gpt-oss", path, name="gpt-oss")
    hp = make_gpt_oss(b)
    copy_tokenizer(b, a.tok_src)
    b.finish()
    print("gpt-oss", path, os.path.getsize(path), hp)


if __name__ == "__main__":
    main()
