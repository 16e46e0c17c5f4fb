// Shared helpers for every kernel.

// Linear index of this workgroup in a 2-D dispatch grid (x is at most 65535 wide).
fn wg_linear(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// The sum of the squares of v's lanes, in lane order (the RMS norms' terms).
fn sum_sq(v: vec4<f32>) -> f32 {
    return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
}

// Round an f32 to the nearest f16 (ties to even, as ggml's conversion) and back; ggml rounds
// some intermediates to f16. Done with integer arithmetic because the rounding mode of the
// driver's f32->f16 packing is implementation-defined (NVIDIA's differs from nearest-even).
// `a / b` rounded as IEEE division rounds it, as llama.cpp's CPU computes the activation
// quantizers' scales. Vulkan lets a division be off by 2.5 ULP (NVIDIA's is), which moves
// the rounding near-ties of `round(x * iscale)`: one residual step with fused multiply-adds
// (the residual of a quotient that close is exact) gives the correctly rounded quotient.
fn div_rn(a: f32, b: f32) -> f32 {
    let q = a / b;
    let r = fma(-q, b, a);
    return fma(r, 1.0 / b, q);
}

fn round_f16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    if a >= 0x477ff000u {
        // NaN stays; 65520 and above round to infinity.
        if a > 0x7f800000u {
            return x;
        }
        return bitcast<f32>((b & 0x80000000u) | 0x7f800000u);
    }
    if a < 0x38800000u {
        // f16 subnormals: multiples of 2^-24 (scaling by powers of two is exact).
        return round(x * 16777216.0) * 5.9604644775390625e-8;
    }
    let r = b + 0xfffu + ((b >> 13u) & 1u);
    return bitcast<f32>(r & 0xffffe000u);
}

// Four f32 as four f16 (nearest, ties to even) in two words: rounded first, so the packing
// (whose rounding is implementation-defined) only sees exactly representable values.
fn pack_f16x4(v: vec4<f32>) -> vec2<u32> {
    let r = vec4<f32>(round_f16(v.x), round_f16(v.y), round_f16(v.z), round_f16(v.w));
    return vec2<u32>(pack2x16float(r.xy), pack2x16float(r.zw));
}

// tanh through exp (accurate on every driver, unlike some native tanh approximations), finite
// for any argument.
fn tanh_exp(x: f32) -> f32 {
    let a = min(abs(x), 15.0);
    let t = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    return select(t, -t, x < 0.0);
}

// Keys per split of a decode attention row of `len` keys over at most n_split workgroups:
// at least 64 (one key tile), so short contexts use fewer splits (attention.wgsl and
// attention_combine.wgsl must agree).
fn attn_chunk(len: u32, n_split: u32) -> u32 {
    return max((len + n_split - 1u) / n_split, 64u);
}

// The first key a query at `pos` attends to: 0, the start of its sliding window, or with the
// top bit of `window` set (`attn_kernels::ATTN_CHUNKED`), the start of its chunk of
// `window & 0x7fffffff` positions (Llama 4's chunked attention).
// Flag of the attention `window` word: bidirectional over the step (a diffusion canvas of one
// sequence): every row sees the keys of the step's first row's window through its last row.
const ATTN_BIDIR: u32 = 0x40000000u;

// The keys [x, y) of the row at position `pos`; `first` and `last`: the step's first and last
// positions (used by bidirectional steps only).
fn attn_keys(pos: u32, first: u32, last: u32, window: u32) -> vec2<u32> {
    if (window & ATTN_BIDIR) != 0u {
        return vec2<u32>(attn_first_key(first, window & ~ATTN_BIDIR), last + 1u);
    }
    return vec2<u32>(attn_first_key(pos, window), pos + 1u);
}

fn attn_first_key(pos: u32, window: u32) -> u32 {
    if (window & 0x80000000u) != 0u {
        return pos - pos % (window & 0x7fffffffu);
    }
    if window != 0u && pos + 1u > window {
        return pos + 1u - window;
    }
    return 0u;
}

// How many of the n_split workgroups get keys of a row of `len` keys (`attn_chunk` each).
fn attn_splits_used(len: u32, n_split: u32) -> u32 {
    let chunk = attn_chunk(len, n_split);
    return (len + chunk - 1u) / chunk;
}

// ggml_gelu through its f16 table: input and output rounded to f16, saturating outside ±10.
// GELU (tanh approximation) in f32 throughout (transformers' gelu_pytorch_tanh).
fn gelu_exact(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_exp(0.7978846 * x * (1.0 + 0.044715 * x * x)));
}

fn gelu_f16(x: f32) -> f32 {
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let h = round_f16(x);
    return round_f16(0.5 * h * (1.0 + tanh_exp(0.7978846 * h * (1.0 + 0.044715 * h * h))));
}
