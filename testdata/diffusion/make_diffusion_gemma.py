#!/usr/bin/env python3
"""A tiny random-weight DiffusionGemma, its GGUF, and the transformers reference for it.

Runs the `diffusion_gemma` model of the `transformers` package (5.24.0, CPU, float32) on a toy
configuration with the real structure (Gemma 4 26B-A4B text stack: sliding and global layers, a
global layer without V, dense + routed FFN, the decoder's self-conditioning block) and writes:

- `diffusion-gemma.gguf`: the weights in infr's DiffusionGemma layout (see README.md), all F32
  (the matrices hold F16-representable values, so an F16 file would be lossless too). F32 keeps
  the engine's matmuls in f32 as the reference's are: this random model amplifies the f16
  rounding of activations (~5e-4) to ~1% in probabilities within one pass, and the
  self-conditioning feedback would then carry that into different trajectories.
- `diffusion-gemma__<case>.json`: for a prompt and a seed, the encoder's logits over the prompt,
  then for every canvas and every denoising step the decoder's raw logits (lse + top 40 per row),
  the random draws the sampler made (the categorical samples and the fresh noise canvas), the
  argmax canvas, the accepted mask, the canvas after renoising, and the committed block.

Usage: python make_diffusion_gemma.py [OUT_DIR]   (needs torch, transformers==5.24.0, gguf, numpy)
"""

import json
import math
import os
import sys

import numpy as np
import torch

import gguf
import transformers
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
from transformers.models.diffusion_gemma import generation_diffusion_gemma as gen

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
ARCH = "diffusion-gemma"

# ---- geometry (toy widths, real structure) --------------------------------------------------
E, L, H = 64, 4, 4
D_SWA, D_FULL = 32, 64
HKV_SWA, HKV_FULL = 2, 1
IS_SWA = [True, False, True, False]
FF, N_EXP, N_USED, FF_EXP = 128, 8, 2, 64
WINDOW = 8
CANVAS = 16
# Gain of the self-conditioning block's output. A random model feeds its probabilities back
# through it as a chaotic map at gain 1 or even 0.25 (in transformers itself, a 0.01-logit
# perturbation of step 0 grows to KL 0.03 by step 2 and 1.4 by step 4, so no two
# implementations could agree past a few steps). At 0.05 such a perturbation shrinks from step
# to step (KL 1e-5 at step 1, 1e-7 at step 4), as in a trained model whose canvases converge,
# while the block still matters: with and without it, step 1's logits differ by KL 0.63 and 8
# of 16 argmaxes.
SC_GAIN = float(os.environ.get("SC_GAIN", "0.05"))
SOFTCAP = 30.0
EPS = 1e-6

# ---- vocabulary: infr's synthetic byte-level BPE (crates/infr-models/src/synth/vocab.rs) ------
CONTROLS = ["<bos>", "<eos>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
            "<|tool_response>", "<tool_response|>", '<|"|>', "<|channel>", "<channel|>", "<|think|>"]
N_VOCAB = 1024


def filler(i):
    length, k, count = 2, i, 26 * 26
    while k >= count:
        k -= count
        length += 1
        count *= 26
    word = []
    for _ in range(length):
        word.append(chr(ord("a") + k % 26))
        k //= 26
    return "".join(reversed(word))


def vocabulary(n, controls):
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = [chr(c) for c in printable]
    extra = 0
    for b in range(256):
        if b not in printable:
            chars.append(chr(256 + extra))
            printable.append(b)
            extra += 1
    n_filler = n - 256 - len(controls)
    tokens = chars + [filler(i) for i in range(n_filler)] + list(controls)
    types = [3 if i >= n - len(controls) else 1 for i in range(n)]
    merges = []
    for i in range(min(n_filler, 4096)):
        w = filler(i)
        merges.append(f"{w[:-1]} {w[-1]}")
    return tokens, types, merges


FIRST_CONTROL = N_VOCAB - len(CONTROLS)
BOS, EOS, PAD = FIRST_CONTROL, FIRST_CONTROL + 1, FIRST_CONTROL


def build_model(seed=1234):
    tc = dict(vocab_size=N_VOCAB, hidden_size=E, intermediate_size=FF, num_hidden_layers=L,
              num_attention_heads=H, num_key_value_heads=HKV_SWA, head_dim=D_SWA, global_head_dim=D_FULL,
              num_global_key_value_heads=HKV_FULL, sliding_window=WINDOW,
              layer_types=["sliding_attention" if s else "full_attention" for s in IS_SWA],
              num_experts=N_EXP, top_k_experts=N_USED, moe_intermediate_size=FF_EXP,
              max_position_embeddings=4096, rms_norm_eps=EPS, final_logit_softcapping=SOFTCAP,
              pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS)
    vc = {"model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8}
    cfg = DiffusionGemmaConfig(text_config=tc, vision_config=vc, canvas_length=CANVAS)
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(cfg).eval()
    g = torch.Generator().manual_seed(seed)

    def randn(shape, std):
        return torch.randn(shape, generator=g) * std

    def f16(t):
        return t.to(torch.float16).to(torch.float32)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name:
                continue
            shape = tuple(p.shape)
            if name.endswith("embed_tokens.weight"):
                v = f16(randn(shape, 0.5))
            elif name.endswith("router.proj.weight"):
                v = randn(shape, 2.0)
            elif name.endswith("per_expert_scale"):
                v = 1.0 + randn(shape, 0.2)
            elif "post_attention_layernorm" in name or name.endswith("post_feedforward_layernorm.weight"):
                v = 2.0 * (1.0 + randn(shape, 0.1))
            elif p.ndim == 1:
                v = 1.0 + randn(shape, 0.1)
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                v = f16(randn(shape, 1.0 / math.sqrt(shape[-1])))
            elif name.endswith("self_conditioning.down_proj.weight"):
                v = f16(randn(shape, SC_GAIN / math.sqrt(shape[-1])))
            else:
                v = f16(randn(shape, 1.0 / math.sqrt(shape[-1])))
            p.copy_(v)
        enc = model.model.encoder.language_model
        # A larger end-of-sequence row makes the toy model end some canvases, so that the
        # end-of-sequence handling is exercised.
        enc.embed_tokens.weight[EOS] *= 1.6
        for i, layer in enumerate(enc.layers):
            layer.layer_scalar.fill_([0.9, 0.8, 1.1, 0.7][i])
        for i, layer in enumerate(model.model.decoder.layers):
            layer.layer_scalar.fill_([0.95, 0.85, 1.05, 0.75][i])
    return model


def write_gguf(model, path, settings):
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    enc = "model.encoder.language_model."
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name("synthetic-diffusion-gemma")
    a = ARCH
    w.add_uint32(f"{a}.context_length", 4096)
    w.add_uint32(f"{a}.embedding_length", E)
    w.add_uint32(f"{a}.block_count", L)
    w.add_uint32(f"{a}.feed_forward_length", FF)
    w.add_uint32(f"{a}.attention.head_count", H)
    w.add_array(f"{a}.attention.head_count_kv", [HKV_SWA if s else HKV_FULL for s in IS_SWA])
    w.add_uint32(f"{a}.attention.key_length", D_FULL)
    w.add_uint32(f"{a}.attention.value_length", D_FULL)
    w.add_uint32(f"{a}.attention.key_length_swa", D_SWA)
    w.add_uint32(f"{a}.attention.value_length_swa", D_SWA)
    w.add_float32(f"{a}.rope.freq_base", 1000000.0)
    w.add_float32(f"{a}.rope.freq_base_swa", 10000.0)
    w.add_uint32(f"{a}.rope.dimension_count", D_FULL)
    w.add_uint32(f"{a}.rope.dimension_count_swa", D_SWA)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", EPS)
    w.add_uint32(f"{a}.attention.sliding_window", WINDOW)
    w.add_array(f"{a}.attention.sliding_window_pattern", IS_SWA)
    w.add_uint32(f"{a}.attention.shared_kv_layers", 0)
    w.add_uint32(f"{a}.embedding_length_per_layer_input", 0)
    w.add_float32(f"{a}.final_logit_softcapping", SOFTCAP)
    w.add_uint32(f"{a}.expert_count", N_EXP)
    w.add_uint32(f"{a}.expert_used_count", N_USED)
    w.add_uint32(f"{a}.expert_feed_forward_length", FF_EXP)
    # The diffusion keys: the block length and the generation defaults (generation_config.json).
    w.add_uint32(f"{a}.diffusion.canvas_length", CANVAS)
    w.add_uint32(f"{a}.diffusion.max_denoising_steps", settings["max_denoising_steps"])
    w.add_float32(f"{a}.diffusion.t_min", settings["t_min"])
    w.add_float32(f"{a}.diffusion.t_max", settings["t_max"])
    w.add_float32(f"{a}.diffusion.entropy_bound", settings["entropy_bound"])
    w.add_uint32(f"{a}.diffusion.stability_threshold", settings["stability_threshold"])
    w.add_float32(f"{a}.diffusion.confidence_threshold", settings["confidence_threshold"])
    tokens, types, merges = vocabulary(N_VOCAB, CONTROLS)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_pad_token_id(PAD)
    w.add_add_bos_token(True)

    def put(name, arr, f16=False):
        arr = np.ascontiguousarray(arr, dtype=np.float16 if f16 else np.float32)
        w.add_tensor(name, arr)

    put("token_embd.weight", sd[enc + "embed_tokens.weight"])
    put("output_norm.weight", sd[enc + "norm.weight"], f16=False)
    n_rot = int(D_FULL * 0.25 / 2)
    put("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (D_FULL // 2 - n_rot)), f16=False)
    for i in range(L):
        p, b = f"{enc}layers.{i}.", f"blk.{i}."
        put(b + "attn_norm.weight", sd[p + "input_layernorm.weight"], f16=False)
        put(b + "attn_q.weight", sd[p + "self_attn.q_proj.weight"])
        put(b + "attn_k.weight", sd[p + "self_attn.k_proj.weight"])
        if p + "self_attn.v_proj.weight" in sd:
            put(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        put(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        put(b + "attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"], f16=False)
        put(b + "attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"], f16=False)
        put(b + "post_attention_norm.weight", sd[p + "post_attention_layernorm.weight"], f16=False)
        put(b + "layer_output_scale.weight", sd[p + "layer_scalar"], f16=False)
        put(b + "ffn_norm.weight", sd[p + "pre_feedforward_layernorm.weight"], f16=False)
        put(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
        put(b + "post_ffw_norm_1.weight", sd[p + "post_feedforward_layernorm_1.weight"], f16=False)
        put(b + "ffn_gate_inp.weight", sd[p + "router.proj.weight"], f16=False)
        put(b + "ffn_gate_inp.scale", sd[p + "router.scale"], f16=False)
        put(b + "pre_ffw_norm_2.weight", sd[p + "pre_feedforward_layernorm_2.weight"], f16=False)
        put(b + "ffn_gate_up_exps.weight", sd[p + "experts.gate_up_proj"])
        put(b + "ffn_down_exps.weight", sd[p + "experts.down_proj"])
        put(b + "ffn_down_exps.scale", sd[p + "router.per_expert_scale"], f16=False)
        put(b + "post_ffw_norm_2.weight", sd[p + "post_feedforward_layernorm_2.weight"], f16=False)
        put(b + "post_ffw_norm.weight", sd[p + "post_feedforward_layernorm.weight"], f16=False)
        # The decoder shares every weight with the encoder but its layer scalar (a buffer).
        put(f"dec.{b}layer_output_scale.weight", sd[f"model.decoder.layers.{i}.layer_scalar"], f16=False)
    sc = "model.decoder.self_conditioning."
    put("self_cond.norm.weight", sd[sc + "pre_norm.weight"], f16=False)
    put("self_cond.ffn_gate.weight", sd[sc + "gate_proj.weight"])
    put("self_cond.ffn_up.weight", sd[sc + "up_proj.weight"])
    put("self_cond.ffn_down.weight", sd[sc + "down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def rows_of(logits):
    """lse + the 40 largest logits of each row (float64 lse, 5 significant digits)."""
    out = []
    for row in logits.double().numpy():
        lse = float(np.log(np.exp(row - row.max()).sum()) + row.max())
        top = np.argsort(-row, kind="stable")[:40]
        out.append({"lse": float(f"{lse:.5g}"), "top": [[int(t), float(f"{row[t]:.5g}")] for t in top]})
    return out


def run_case(model, name, prompt_ids, seed, settings, max_new_tokens):
    ids = torch.tensor([prompt_ids])
    # The encoder's logits over the prompt (the causal Gemma 4 pass with the tied head).
    with torch.no_grad():
        enc = model.model.encoder(input_ids=ids)
        lg = model.lm_head(enc.last_hidden_state)[0].float()
        lg = torch.tanh(lg / SOFTCAP) * SOFTCAP
    prompt_rows = rows_of(lg)
    for r, p in zip(prompt_rows, range(len(prompt_ids))):
        r["pos"] = p

    # Record every random draw and every decoder forward.
    draws = {"noise": [], "samples": []}
    forwards = []
    orig_init = gen.EntropyBoundSampler.initialize_canvas
    orig_multinomial = torch.multinomial
    orig_forward = DiffusionGemmaForBlockDiffusion.forward

    def init_canvas(self, batch_size, device):
        c = orig_init(self, batch_size, device)
        draws["noise"].append(c[0].tolist())
        return c

    def multinomial(probs, num_samples, *a, **k):
        s = orig_multinomial(probs, num_samples, *a, **k)
        draws["samples"].append(s[:, 0].tolist())
        return s

    def forward(self, *a, **k):
        out = orig_forward(self, *a, **k)
        if k.get("decoder_input_ids") is not None:
            forwards.append({"canvas_in": k["decoder_input_ids"][0].tolist(), "rows": rows_of(out.logits[0])})
        return out

    accepted = []
    orig_accept = gen.EntropyBoundSampler.accept_canvas

    def accept(self, *a, **k):
        r = orig_accept(self, *a, **k)
        accepted.append([int(x) for x in self.accepted_token_mask[0].tolist()])
        return r

    gen.EntropyBoundSampler.initialize_canvas = init_canvas
    gen.EntropyBoundSampler.accept_canvas = accept
    torch.multinomial = multinomial
    DiffusionGemmaForBlockDiffusion.forward = forward
    try:
        torch.manual_seed(seed)
        cfg = gen.DiffusionGemmaGenerationConfig(
            max_new_tokens=max_new_tokens, max_denoising_steps=settings["max_denoising_steps"],
            sampler_config=gen.EntropyBoundSamplerConfig(entropy_bound=settings["entropy_bound"]),
            t_min=settings["t_min"], t_max=settings["t_max"],
            stability_threshold=settings["stability_threshold"],
            confidence_threshold=settings["confidence_threshold"],
            eos_token_id=EOS, pad_token_id=PAD, bos_token_id=BOS)
        out = model.generate(ids, generation_config=cfg)
    finally:
        gen.EntropyBoundSampler.initialize_canvas = orig_init
        gen.EntropyBoundSampler.accept_canvas = orig_accept
        torch.multinomial = orig_multinomial
        DiffusionGemmaForBlockDiffusion.forward = orig_forward
    seq = out.sequences[0].tolist()
    # Split the flat record into blocks: each block starts with one initial-canvas draw, and
    # each step draws one sample row and one renoise canvas.
    steps = []
    for i, f in enumerate(forwards):
        f["samples"] = draws["samples"][i]
        f["accepted"] = accepted[i]
        steps.append(f)
    blocks, noise_at, step_at = [], 0, 0
    n_prompt = len(prompt_ids)
    n_blocks = math.ceil((len(seq) - n_prompt) / CANVAS)
    for bi in range(n_blocks):
        init = draws["noise"][noise_at]
        noise_at += 1
        block_steps = []
        canvas = init
        while step_at < len(steps) and steps[step_at]["canvas_in"] == canvas:
            s = steps[step_at]
            s["renoise"] = draws["noise"][noise_at]
            noise_at += 1
            # The next canvas keeps accepted samples and renoises the rest.
            s["canvas_out"] = [(smp if acc else nz) for smp, acc, nz in zip(s["samples"], s["accepted"], s["renoise"])]
            canvas = s["canvas_out"]
            block_steps.append(s)
            step_at += 1
            if step_at < len(steps) and steps[step_at]["canvas_in"] != canvas:
                break
        blocks.append({"init_canvas": init, "steps": block_steps,
                       "committed": seq[n_prompt + bi * CANVAS: n_prompt + (bi + 1) * CANVAS]})
    assert step_at == len(steps), "every decoder forward belongs to a block"
    case = {"transformers": transformers.__version__, "torch": torch.__version__, "case": name, "seed": seed,
            "settings": dict(settings, canvas_length=CANVAS, max_new_tokens=max_new_tokens, eos_token_id=EOS,
                             pad_token_id=PAD),
            "n_vocab": N_VOCAB, "prompt_ids": prompt_ids, "prompt_rows": prompt_rows, "blocks": blocks,
            "sequence": seq}
    with open(os.path.join(OUT, f"diffusion-gemma__{name}.json"), "w") as f:
        json.dump(case, f, separators=(",", ":"))
    n_steps = [len(b["steps"]) for b in blocks]
    print(f"{name}: blocks {len(blocks)}, steps {n_steps}, accepted/step "
          f"{[sum(s['accepted']) for b in blocks for s in b['steps']]}, committed {seq[n_prompt:]}")


DEFAULTS = dict(max_denoising_steps=12, t_min=0.4, t_max=0.8, entropy_bound=0.1, stability_threshold=1,
                confidence_threshold=0.005)

if __name__ == "__main__":
    torch.set_num_threads(2)
    model = build_model()
    write_gguf(model, os.path.join(OUT, "diffusion-gemma.gguf"), DEFAULTS)
    # "fox": the reference's defaults (max steps cut to 12), three canvases.
    fox = [BOS] + [40, 300, 77, 512, 13, 700, 5, 901, 250, 66]
    run_case(model, "fox", fox, 8, DEFAULTS, 3 * CANVAS)
    # "loose": a wider entropy bound and no stability requirement, so that blocks accept several
    # tokens per step and stop early on confidence.
    prompt = [BOS] + [100, 200, 300, 400, 500, 600, 700]
    loose = dict(DEFAULTS, entropy_bound=1.5, confidence_threshold=2.0, stability_threshold=0, max_denoising_steps=10)
    run_case(model, "loose", prompt, 11, loose, 2 * CANVAS)
    # "eos": a wider bound; the second canvas commits an end-of-sequence token: generation
    # ends there and the tokens after it become padding.
    eos = dict(DEFAULTS, entropy_bound=5.0, confidence_threshold=3.0, max_denoising_steps=10)
    run_case(model, "eos", prompt, 3, eos, 2 * CANVAS)
