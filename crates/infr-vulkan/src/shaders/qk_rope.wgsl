// The attention inputs of a step in one dispatch: per-head RMS norm of Q and K (optional:
// Qwen3's and Gemma 3's q_norm / k_norm), RoPE of both (rope_math.wgsl), and the append of
// the step's K and V rows to the paged KV cache (V optionally normed per head, without a
// weight: Gemma 4). One workgroup per (token, head): heads 0..n_head are Q heads, then
// n_kv_head K heads, then (when the step writes the cache) n_kv_head V heads. Same
// arithmetic as norm.wgsl, rope.wgsl and kv_write.wgsl in sequence.
// Q, K and V may each be the partial-product planes of a split-K matmul (`parts`: a byte per
// input, 1 for the tensor itself; planes of n_tokens rows), summed here in split_reduce.wgsl's
// order instead of by a reduction dispatch. Q may be read in place from a tensor holding each
// head's query at `q_off` within a period of `q_period` columns (Qwen3.5's query | gate
// projection): head h of token t starts at (t * n_head + h) * q_period + q_off.

struct Params {
    rope: Rope,
    dk: u32,
    dv: u32,
    n_head: u32,
    n_kv_head: u32,
    n_tokens: u32,
    // Per side: 0 no norm, 1 norm, 2 norm times a weight.
    q_norm: u32,
    k_norm: u32,
    q_eps: f32,
    k_eps: f32,
    write_kv: u32,
    page_size: u32,
    pos_off: u32,
    pt_off: u32,
    kw: u32,
    vw: u32,
    parts: u32,
    // 1: V normed per head (no weight) before its append.
    v_norm: u32,
    v_eps: f32,
    q_period: u32,
    q_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> XQ: array<f32>;
@group(0) @binding(1) var<storage, read_write> YQ: array<f32>;
@group(0) @binding(2) var<storage, read> XK: array<f32>;
@group(0) @binding(3) var<storage, read_write> YK: array<f32>;
@group(0) @binding(4) var<storage, read> XV: array<f32>;
@group(0) @binding(5) var<storage, read_write> KC: array<{{KV_TY}}>;
@group(0) @binding(6) var<storage, read_write> VC: array<{{KV_TY}}>;
@group(0) @binding(7) var<storage, read> S: array<u32>;
@group(0) @binding(8) var<storage, read> FF: array<f32>;
@group(0) @binding(9) var<storage, read> WQ: array<f32>;
@group(0) @binding(10) var<storage, read> WK: array<f32>;

const WG: u32 = 64u;
// Largest head dim.
const MAXD: u32 = {{MAXD}}u;
var<workgroup> hs: array<f32, MAXD>;
var<workgroup> ro: array<f32, MAXD>;
var<workgroup> red: array<f32, WG>;

// Element i of input `which` (0 Q, 1 K, 2 V, of row width `w`): the sum of its planes.
fn planes(which: u32, i: u32, w: u32) -> f32 {
    let n = (pc.parts >> (8u * which)) & 0xffu;
    let stride = pc.n_tokens * w;
    var v = 0.0;
    if which == 0u {
        v = XQ[i];
        for (var p = 1u; p < n; p++) {
            v += XQ[p * stride + i];
        }
    } else if which == 1u {
        v = XK[i];
        for (var p = 1u; p < n; p++) {
            v += XK[p * stride + i];
        }
    } else {
        v = XV[i];
        for (var p = 1u; p < n; p++) {
            v += XV[p * stride + i];
        }
    }
    return v;
}

// The cache slot of token `tok` (paged: pages[pos / page_size] * page_size + pos % page_size).
fn cache_slot(tok: u32, pos: u32) -> u32 {
    return S[S[pc.pt_off + tok] + pos / pc.page_size] * pc.page_size + pos % pc.page_size;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let lin = wg_linear(wid, nwg);
    var heads = pc.n_head + pc.n_kv_head;
    if pc.write_kv != 0u {
        heads += pc.n_kv_head;
    }
    let tok = lin / heads;
    if tok >= pc.n_tokens {
        return;
    }
    let hh = lin % heads;
    let pos = S[pc.pos_off + tok];
    if hh >= pc.n_head + pc.n_kv_head {
        // A V head: straight into the cache.
        let slot = cache_slot(tok, pos);
        let vo = (hh - pc.n_head - pc.n_kv_head) * pc.dv;
        var vs = 1.0;
        if pc.v_norm != 0u {
            var sv = 0.0;
            for (var i = t; i < pc.dv; i += WG) {
                let x = planes(2u, tok * pc.vw + vo + i, pc.vw);
                sv += x * x;
            }
            vs = 1.0 / sqrt(tree_sum(t, sv) / f32(pc.dv) + pc.v_eps);
        }
        for (var i = 2u * t; i < pc.dv; i += 2u * WG) {
            let e = vo + i;
            var a = planes(2u, tok * pc.vw + e, pc.vw);
            var b = planes(2u, tok * pc.vw + e + 1u, pc.vw);
            if pc.v_norm != 0u {
                a = a * vs;
                b = b * vs;
            }
            {{STORE_V}}
        }
        return;
    }
    let is_q = hh < pc.n_head;
    var row = 0u;
    var mode = pc.k_norm;
    var eps = pc.k_eps;
    if is_q {
        row = (tok * pc.n_head + hh) * pc.dk;
        mode = pc.q_norm;
        eps = pc.q_eps;
    } else {
        row = (tok * pc.n_kv_head + hh - pc.n_head) * pc.dk;
    }
    // Where this head's input starts (Q read in place from a wider tensor when q_period is set).
    var src = row;
    if is_q && pc.q_period != 0u {
        src = (tok * pc.n_head + hh) * pc.q_period + pc.q_off;
    }
    var s = 0.0;
    for (var i = t; i < pc.dk; i += WG) {
        var x = 0.0;
        if is_q {
            x = planes(0u, src + i, pc.n_head * pc.dk);
        } else {
            x = planes(1u, src + i, pc.kw);
        }
        hs[i] = x;
        s += x * x;
    }
    if mode != 0u {
        let scale = 1.0 / sqrt(tree_sum(t, s) / f32(pc.dk) + eps);
        for (var i = t; i < pc.dk; i += WG) {
            var v = hs[i] * scale;
            if mode == 2u {
                if is_q {
                    v *= WQ[i];
                } else {
                    v *= WK[i];
                }
            }
            hs[i] = v;
        }
    }
    workgroupBarrier();
    for (var jj = t; jj < pc.dk / 2u; jj += WG) {
        if jj < pc.rope.n_rot / 2u {
            let ix = rope_pair(jj);
            let r = rope_rotate(hs[ix.x], hs[ix.y], jj, pos);
            ro[ix.x] = r.x;
            ro[ix.y] = r.y;
        } else {
            ro[2u * jj] = hs[2u * jj];
            ro[2u * jj + 1u] = hs[2u * jj + 1u];
        }
    }
    workgroupBarrier();
    if is_q {
        for (var i = t; i < pc.dk; i += WG) {
            YQ[row + i] = ro[i];
        }
        return;
    }
    for (var i = t; i < pc.dk; i += WG) {
        YK[row + i] = ro[i];
    }
    if pc.write_kv != 0u {
        let slot = cache_slot(tok, pos);
        let ko = (hh - pc.n_head) * pc.dk;
        for (var i = 2u * t; i < pc.dk; i += 2u * WG) {
            let e = ko + i;
            let a = ro[i];
            let b = ro[i + 1u];
            {{STORE_K}}
        }
    }
}
