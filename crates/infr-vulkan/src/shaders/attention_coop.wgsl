// Cooperative-matrix attention for prefill over the paged f16 KV cache. A workgroup takes
// 64 consecutive tokens of one head, four subgroups of 16 query rows each; keys come in
// tiles of BC shared by the whole workgroup. Two passes over the keys: the first computes
// each row's softmax max and sum from S = Q·Kᵀ, the second recomputes S, forms the
// normalized probabilities P in f16 and accumulates O = P·V in f32 cooperative matrices, so
// the output never needs rescaling. A row is handled here only when its sequence's page
// table is that of the block's first token (all rows of a prefill chunk of one sequence);
// `attention.wgsl` runs after this kernel and computes exactly the other rows.

enable f16;
enable wgpu_cooperative_matrix;

const WG: u32 = {{WG}}u;
const SGS: u32 = {{SGS}}u;
// Lanes per query row in the softmax passes.
const LPR: u32 = SGS / 16u;
const D: u32 = {{D}}u;
const BR: u32 = 64u;
const BC: u32 = 32u;
// Row stride (f16) of staged Q, K and V rows: D plus 8 to spread the banks.
const KS: u32 = D + 8u;
// The V tile follows the K tile, transposed (d-major, row stride VS) so that P·V reads it
// as a column-major operand.
const VOFF: u32 = BC * KS;
const VS: u32 = BC + 8u;

// K tile then V tile; at the start, the block's 64 query rows (64·KS ≤ BC·KS + D·VS).
var<workgroup> kv: array<f16, {{KV_LEN}}>;
// Per subgroup: a 16×BC f32 score tile, column-major (two 16×16 fragments), and the
// 16×16 output staging at the end.
var<workgroup> ss: array<f32, {{SS_LEN}}>;
// Per subgroup: 16×BC f16 probabilities.
var<workgroup> ps: array<f16, {{SS_LEN}}>;
// The block's key range (x: first key, y: end). A vec4, not two u32: every workgroup variable
// must be a multiple of 16 bytes so that the f16/f32 tiles above stay 16-byte aligned, as the
// cooperative-matrix loads and stores require (VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986).
// With two u32 here the NVIDIA driver placed the tiles off 16-byte boundaries and every
// fragment load/store read or wrote shifted data (max error 0.15 on an H200).
var<workgroup> kr: vec4<u32>;

// Keys kb..kb+BC of kv head `kvh` (K, and V when `with_v`) into the tiles; keys at or past
// `khi` read as zero. Each thread writes whole 32-bit words of the f16 tiles (two keys × two
// dims), so no two threads ever store into the same word.
fn load_tile(t: u32, pt0: u32, kvh: u32, kb: u32, khi: u32, with_v: bool) {
    for (var i = t; i < (BC / 2u) * (D / 2u); i += WG) {
        let key = 2u * (i / (D / 2u));
        let d2 = i % (D / 2u);
        var k0 = vec2<f32>(0.0);
        var k1 = vec2<f32>(0.0);
        var v0 = vec2<f32>(0.0);
        var v1 = vec2<f32>(0.0);
        let j = kb + key;
        if j < khi {
            let slot = S[pt0 + j / pc.page_size] * pc.page_size + j % pc.page_size;
            k0 = unpack2x16float(KC[(slot * pc.kw + kvh * pc.dk) / 2u + d2]);
            if with_v {
                v0 = unpack2x16float(VC[(slot * pc.vw + kvh * pc.dv) / 2u + d2]);
            }
        }
        if j + 1u < khi {
            let slot = S[pt0 + (j + 1u) / pc.page_size] * pc.page_size + (j + 1u) % pc.page_size;
            k1 = unpack2x16float(KC[(slot * pc.kw + kvh * pc.dk) / 2u + d2]);
            if with_v {
                v1 = unpack2x16float(VC[(slot * pc.vw + kvh * pc.dv) / 2u + d2]);
            }
        }
        kv[key * KS + 2u * d2] = f16(k0.x);
        kv[key * KS + 2u * d2 + 1u] = f16(k0.y);
        kv[(key + 1u) * KS + 2u * d2] = f16(k1.x);
        kv[(key + 1u) * KS + 2u * d2 + 1u] = f16(k1.y);
        if with_v {
            kv[VOFF + (2u * d2) * VS + key] = f16(v0.x);
            kv[VOFF + (2u * d2) * VS + key + 1u] = f16(v1.x);
            kv[VOFF + (2u * d2 + 1u) * VS + key] = f16(v0.y);
            kv[VOFF + (2u * d2 + 1u) * VS + key + 1u] = f16(v1.y);
        }
    }
}

// Scaled (and soft-capped) score of element c of this lane's row in the subgroup's tile.
fn score(sb: u32, r: u32, c: u32) -> f32 {
    var s = ss[sb + (c / 16u) * 256u + (c % 16u) * 16u + r] * pc.scale;
    if pc.softcap != 0.0 {
        s = tanh_exp(s / pc.softcap) * pc.softcap;
    }
    return s;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let lin = wg_linear(wid, nwg);
    let h = lin % pc.n_head;
    let tok0 = (lin / pc.n_head) * BR;
    // Padding workgroups cannot return early (uniform control flow for the cooperative
    // operations): they see no handled rows and write nothing.
    let tok0c = min(tok0, pc.n_tokens - 1u);
    let kvh = h / pc.group;
    let pt0 = S[pc.pt_off + tok0c];
    if t == 0u {
        var a = 0xffffffffu;
        var b = 0u;
        for (var i = 0u; i < BR; i++) {
            let tk = tok0 + i;
            if tk < pc.n_tokens && S[pc.pt_off + tk] == pt0 {
                let p = S[pc.pos_off + tk];
                var w = 0u;
                if pc.window != 0u && p + 1u > pc.window {
                    w = p + 1u - pc.window;
                }
                a = min(a, w);
                b = max(b, p + 1u);
            }
        }
        kr = vec4<u32>(a, b, 0u, 0u);
    }
    // This lane's query row in its subgroup, and which of the row's keys it scores.
    let r = sgi / LPR;
    let part = sgi % LPR;
    let tok = tok0 + 16u * sgid + r;
    var handled = false;
    var pos = 0u;
    var lo = 0u;
    if tok < pc.n_tokens {
        handled = S[pc.pt_off + tok] == pt0;
        pos = S[pc.pos_off + tok];
        if pc.window != 0u && pos + 1u > pc.window {
            lo = pos + 1u - pc.window;
        }
    }
    // The block's query rows, rounded to f16 as the cache's keys are.
    // Two dims per thread: whole 32-bit words of the f16 array.
    for (var i = t; i < BR * D / 2u; i += WG) {
        let row = i / (D / 2u);
        let d = 2u * (i % (D / 2u));
        let qt = min(tok0 + row, pc.n_tokens - 1u);
        let qb = (qt * pc.n_head + h) * pc.dk + d;
        kv[row * KS + d] = f16(round_f16(Q[qb]));
        kv[row * KS + d + 1u] = f16(round_f16(Q[qb + 1u]));
    }
    let krv = workgroupUniformLoad(&kr);
    let klo = krv.x;
    let khi = krv.y;
    let qrow = 16u * sgid * KS;
{{Q_LOAD}}
    var zero: coop_mat16x16<f32, C>;
{{O_DECL}}
    let sb = sgid * 16u * BC;
    workgroupBarrier();

    // Pass 1: row max and sum.
    var m = -1e30;
    var l = 0.0;
    for (var kb = klo; kb < khi; kb += BC) {
        load_tile(t, pt0, kvh, kb, khi, false);
        workgroupBarrier();
{{S_TILE}}
        workgroupBarrier();
        for (var c = part * (BC / LPR); c < (part + 1u) * (BC / LPR); c++) {
            let j = kb + c;
            if handled && j >= lo && j <= pos {
                let s = score(sb, r, c);
                let mn = max(m, s);
                l = l * exp(m - mn) + exp(s - mn);
                m = mn;
            }
        }
        workgroupBarrier();
    }
    for (var x = 1u; x < LPR; x <<= 1u) {
        let mo = subgroupShuffleXor(m, x);
        let lo2 = subgroupShuffleXor(l, x);
        let mn = max(m, mo);
        l = l * exp(m - mn) + lo2 * exp(mo - mn);
        m = mn;
    }
    var inv_l = 0.0;
    if l > 0.0 {
        inv_l = 1.0 / l;
    }

    // Pass 2: O = softmax(S)·V.
    for (var kb = klo; kb < khi; kb += BC) {
        load_tile(t, pt0, kvh, kb, khi, true);
        workgroupBarrier();
{{S_TILE}}
        workgroupBarrier();
        for (var c = part * (BC / LPR); c < (part + 1u) * (BC / LPR); c++) {
            let j = kb + c;
            var p = 0.0;
            if handled && j >= lo && j <= pos {
                p = exp(score(sb, r, c) - m) * inv_l;
            }
            ps[sb + r * BC + c] = f16(p);
        }
        workgroupBarrier();
        let p0 = coopLoadT<coop_mat16x16<f16, A>>(&ps[sb], BC);
        let p1 = coopLoadT<coop_mat16x16<f16, A>>(&ps[sb + 16u], BC);
{{PV}}
        workgroupBarrier();
    }

    // Outputs through `ss` (column-major fragments), masked per row.
{{O_STORE}}
}

// Write one 16×16 output fragment staged column-major at ss[sb..] (columns d0..d0+15).
fn store_rows(sb: u32, sgi: u32, tok_base: u32, h: u32, pt0: u32, d0: u32) {
    for (var e = sgi; e < 256u; e += SGS) {
        let tk = tok_base + e % 16u;
        if tk < pc.n_tokens && S[pc.pt_off + tk] == pt0 {
            O[(tk * pc.n_head + h) * pc.dv + d0 + e / 16u] = ss[sb + e];
        }
    }
}
