// Causal attention of one (token, head, key split) per workgroup over the paged KV cache,
// with online softmax over tiles of WG keys: scores = q·k * scale (softcap), window, GQA head
// mapping. Decode splits the keys of a (token, head) over up to n_split workgroups of at
// least 64 keys each (`attn_chunk`; short contexts use fewer). A lone split writes the
// normalized output; several each write their partial (max, sum, unnormalized output) to
// the scratch buffer and `attention_combine` merges them. After `attention_coop.wgsl`
// (`flash_rows` != 0) it computes only the rows that kernel left.

const WG: u32 = {{WG}}u;
const DPT: u32 = {{DPT}}u;
// The key head dim (pc.dk), as a constant so the score loop unrolls.
const DKC: u32 = {{DK}}u;
// K elements per read of the score loop.
const KSTEP: u32 = {{KSTEP}}u;
// V elements per read of the output loop: VSTEP (16 bytes) with RPT invocations per V row
// and NG key groups, or 0 where the head dim does not allow it (one element per read).
const VSTEP: u32 = {{VSTEP}}u;
const RPT: u32 = {{RPT}}u;
const NG: u32 = WG / RPT;

var<workgroup> qs: array<f32, {{DK}}>;
var<workgroup> red: array<f32, {{WG}}>;
var<workgroup> ps: array<f32, {{WG}}>;
var<workgroup> slots: array<u32, {{WG}}>;
// Scores of the first SCORE_TILES tiles of a two-pass (exact) row, each invocation's own: the
// second pass reads them instead of reading K again.
const SCORE_TILES: u32 = {{SCORE_TILES}}u;
var<workgroup> scs: array<f32, {{SCS}}>;
// The key groups' partial outputs (VSTEP != 0), folded at the end.
var<workgroup> vsum: array<f32, {{VSUM}}>;
// This invocation's VSTEP output dims of its key group (VSTEP != 0).
var<private> va: array<f32, {{VA}}>;

// Two consecutive K elements at element index i (even).
fn k2(i: u32) -> vec2<f32> {
    {{K2}}
}

// `acc` plus the dot of q[d..d+KSTEP] with the K elements from index i.
fn kdot(acc: f32, i: u32, d: u32) -> f32 {
    {{KDOT}}
}

// One V element at index i.
fn v1(i: u32) -> f32 {
    {{V1}}
}

// va += p · (VSTEP V elements from index i), masked by `live` (keys past the tile read
// slot 0, whose values may be anything).
fn vadd(i: u32, p: f32, live: bool) {
    {{VADD}}
}

// Subgroup of this invocation (set by main when the kernel has subgroup operations).
var<private> sg_i: u32;
var<private> sg_id: u32;
var<private> n_sg: u32;

fn reduce_max(t: u32, v: f32) -> f32 {
{{REDUCE_MAX}}
}

fn reduce_sum(t: u32, v: f32) -> f32 {
{{REDUCE_SUM}}
}

// The scaled (and soft-capped) score of the key in cache slot `slot` for this workgroup's
// query in `qs`.
fn score(slot: u32, kvh: u32) -> f32 {
    let kb = slot * pc.kw + kvh * pc.dk;
    var dotv = 0.0;
    for (var d = 0u; d < DKC; d += KSTEP) {
        dotv = kdot(dotv, kb + d, d);
    }
    var sc = dotv * pc.scale;
    if pc.softcap != 0.0 {
        sc = tanh_exp(sc / pc.softcap) * pc.softcap;
    }
    return sc;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{{SG_PARAMS}}) {
{{SG_INIT}}
    let lin0 = wg_linear(wid, nwg);
    let split = lin0 % pc.n_split;
    let lin = lin0 / pc.n_split;
    let tok = lin / pc.n_head;
    if tok >= pc.n_tokens {
        return;
    }
    // Rows `attention_coop.wgsl` computed: they share the page table of their block's first
    // token, and so does the block's second token.
    if pc.flash_rows != 0u {
        let b0 = tok - tok % pc.flash_rows;
        let pt0 = S[pc.pt_off + b0];
        if S[pc.pt_off + tok] == pt0 && b0 + 1u < pc.n_tokens && S[pc.pt_off + b0 + 1u] == pt0 {
            return;
        }
    }
    let h = lin % pc.n_head;
    let kvh = h / pc.group;
    let pt = S[pc.pt_off + tok];
    let range = split_keys(tok, split);
    let n_active = range.z;
    if split >= n_active {
        return;
    }
    for (var d = t; d < pc.dk; d += WG) {
        var q = Q[(tok * pc.n_head + h) * pc.dk + d];
        if pc.round_q == 1u {
            q = round_f16(q);
        }
        qs[d] = q;
    }
    workgroupBarrier();
    // A q8_0 cache: the query goes through q8_0 too (as ggml's flash attention converts it
    // for the dot products with a q8_0 K), block by block.
    if pc.round_q == 2u {
        for (var b = t; b < pc.dk / 32u; b += WG) {
            var amax = 0.0;
            for (var j = 0u; j < 32u; j++) {
                amax = max(amax, abs(qs[32u * b + j]));
            }
            let dq = amax / 127.0;
            let id = select(0.0, 1.0 / dq, dq != 0.0);
            let df = round_f16(dq);
            for (var j = 0u; j < 32u; j++) {
                let v = qs[32u * b + j] * id;
                qs[32u * b + j] = sign(v) * floor(abs(v) + 0.5) * df;
            }
        }
        workgroupBarrier();
    }
    let begin = range.x;
    let end = range.y;
    var acc: array<f32, {{DPT}}>;
    var m = -1e30;
    var l = 0.0;
    // The sink counts once per row: in split 0 (the combine merges it with the others).
    if pc.has_sinks != 0u && split == 0u {
        m = SINKS[h];
        l = 1.0;
    }
    // With an f16 cache llama.cpp's CPU rounds the normalized probabilities to f16 before
    // P·V (`kq` converted for the f16 `mul_mat` with V). A row whose keys fit one split does the
    // same: a first pass finds the row's max and sum, the second weighs V by
    // f16(exp(s - max) / sum). Split rows keep the one-pass online softmax.
    let exact = n_active == 1u && pc.round_q == 1u;
    if exact {
        var tile = 0u;
        for (var base = begin; base < end; base += WG) {
            let j = base + t;
            var sc = -1e30;
            if j < end {
                sc = score(key_slot(pt, j), kvh);
            }
            if tile < SCORE_TILES {
                scs[tile * WG + t] = sc;
            }
            tile++;
            let m_new = max(m, reduce_max(t, sc));
            var p = 0.0;
            if j < end {
                p = exp(sc - m_new);
            }
            l = l * exp(m - m_new) + reduce_sum(t, p);
            m = m_new;
        }
    }
    let inv_exact = 1.0 / l;
    var tile = 0u;
    for (var base = begin; base < end; base += WG) {
        let j = base + t;
        var sc = -1e30;
        var slot = 0u;
        if j < end {
            slot = key_slot(pt, j);
            if exact && tile < SCORE_TILES {
                sc = scs[tile * WG + t];
            } else {
                sc = score(slot, kvh);
            }
        }
        tile++;
        slots[t] = slot;
        if exact {
            // Max and sum are final: probabilities as the reference rounds them, no rescaling.
            var p = 0.0;
            if j < end {
                p = round_f16(exp(sc - m) * inv_exact);
            }
            ps[t] = p;
            workgroupBarrier();
        }
        var alpha = 1.0;
        if !exact {
            let tile_max = reduce_max(t, sc);
            let m_new = max(m, tile_max);
            alpha = exp(m - m_new);
            var p = 0.0;
            if j < end {
                p = exp(sc - m_new);
            }
            ps[t] = p;
            let tile_sum = reduce_sum(t, p);
            l = l * alpha + tile_sum;
            m = m_new;
        }
        let cnt = min(WG, end - base);
        if VSTEP != 0u {
            // RPT invocations read a V row 16 bytes each; key group t / RPT takes every
            // NG-th key of the tile (an eighth of the loads of reading one element each).
            for (var e = 0u; e < VSTEP; e++) {
                va[e] *= alpha;
            }
            let vo = kvh * pc.dv + (t % RPT) * VSTEP;
            for (var jj = t / RPT; jj < WG; jj += NG) {
                vadd(slots[jj] * pc.vw + vo, ps[jj], jj < cnt);
            }
        } else {
            for (var ii = 0u; ii < DPT; ii++) {
                let d = t + ii * WG;
                if d < pc.dv {
                    var a = acc[ii] * alpha;
                    let vo = kvh * pc.dv + d;
                    // Constant trip count even for a partial tile (short decode contexts), so
                    // the loads are issued together instead of one memory round trip per key;
                    // keys past the tile read slot 0 and are masked out.
                    for (var jj = 0u; jj < WG; jj++) {
                        let pv = ps[jj] * v1(slots[jj] * pc.vw + vo);
                        a += select(0.0, pv, jj < cnt);
                    }
                    acc[ii] = a;
                }
            }
        }
        workgroupBarrier();
    }
    if VSTEP != 0u {
        for (var e = 0u; e < VSTEP; e++) {
            vsum[(t / RPT) * pc.dv + (t % RPT) * VSTEP + e] = va[e];
        }
        workgroupBarrier();
        for (var ii = 0u; ii < DPT; ii++) {
            let d = t + ii * WG;
            if d < pc.dv {
                var a = 0.0;
                for (var g = 0u; g < NG; g++) {
                    a += vsum[g * pc.dv + d];
                }
                acc[ii] = a;
            }
        }
    }
    if n_active == 1u {
        // Exact rows already weighed V by normalized probabilities.
        let inv = select(1.0 / l, 1.0, exact);
        for (var ii = 0u; ii < DPT; ii++) {
            let d = t + ii * WG;
            if d < pc.dv {
                O[(tok * pc.n_head + h) * pc.dv + d] = acc[ii] * inv;
            }
        }
        return;
    }
    // Partial record of this split: [m, l, acc[0..dv]].
    let rec = lin0 * (pc.dv + 2u);
    if t == 0u {
        PART[rec] = m;
        PART[rec + 1u] = l;
    }
    for (var ii = 0u; ii < DPT; ii++) {
        let d = t + ii * WG;
        if d < pc.dv {
            PART[rec + 2u + d] = acc[ii];
        }
    }
}
