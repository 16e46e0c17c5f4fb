// Append the step's K and V rows to a q8_0 paged cache (ggml's quantize_row_q8_0: per block
// of 32, d = amax / 127, q = round(x / d) half away from zero, d stored f16-rounded). A slot
// of width w holds w/4 words of quants, then w/32 f32 scales. One thread per block.

struct Params {
    kw: u32,
    vw: u32,
    n_tokens: u32,
    page_size: u32,
    pos_off: u32,
    pt_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> K: array<f32>;
@group(0) @binding(1) var<storage, read> V: array<f32>;
@group(0) @binding(2) var<storage, read_write> KC: array<u32>;
@group(0) @binding(3) var<storage, read_write> VC: array<u32>;
@group(0) @binding(4) var<storage, read> S: array<u32>;

// Quantize 32 values from `src` (K or V, selected by `is_k`) at `at`; returns the f16-rounded
// scale and writes the packed quants into `q`.
fn round_away(v: f32) -> f32 {
    return sign(v) * floor(abs(v) + 0.5);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    let per_tok = (pc.kw + pc.vw) / 32u;
    let tok = g / per_tok;
    if tok >= pc.n_tokens {
        return;
    }
    let b = g % per_tok;
    let pos = S[pc.pos_off + tok];
    let slot = S[S[pc.pt_off + tok] + pos / pc.page_size] * pc.page_size + pos % pc.page_size;
    let is_k = b < pc.kw / 32u;
    let w = select(pc.vw, pc.kw, is_k);
    let blk = select(b - pc.kw / 32u, b, is_k);
    var x: array<f32, 32>;
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        var v: f32;
        if is_k {
            v = K[tok * pc.kw + blk * 32u + j];
        } else {
            v = V[tok * pc.vw + blk * 32u + j];
        }
        x[j] = v;
        amax = max(amax, abs(v));
    }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    let base = slot * (w / 4u + w / 32u);
    for (var j = 0u; j < 8u; j++) {
        var word = 0u;
        for (var e = 0u; e < 4u; e++) {
            let q = i32(round_away(x[4u * j + e] * id));
            word |= (bitcast<u32>(q) & 0xffu) << (8u * e);
        }
        if is_k {
            KC[base + blk * 8u + j] = word;
        } else {
            VC[base + blk * 8u + j] = word;
        }
    }
    let scale = bitcast<u32>(round_f16(d));
    if is_k {
        KC[base + w / 4u + blk] = scale;
    } else {
        VC[base + w / 4u + blk] = scale;
    }
}
