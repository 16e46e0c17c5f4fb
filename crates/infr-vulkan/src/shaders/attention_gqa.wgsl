// Decode attention of one (token, KV head, key split) per workgroup for all G query heads that
// share the KV head (grouped-query attention): each key's K row and V row are read once for
// the G heads instead of once per head, as llama.cpp's Vulkan flash attention groups the
// heads of a KV head into the rows of one workgroup. Same arithmetic, in the same order, as
// attention.wgsl for an f16 cache (16-byte K and V reads) per head: the online softmax over
// tiles of WG keys, the exact two-pass rows of one split, sinks, window and softcap; split
// rows write their partials where attention.wgsl's (token, head, split) workgroup would, so
// `attention_combine` merges them unchanged.

const WG: u32 = {{WG}}u;
// Query heads per KV head.
const G: u32 = {{G}}u;
const DPT: u32 = {{DPT}}u;
const DKC: u32 = {{DK}}u;
const DVC: u32 = {{DV}}u;
// V elements per 16-byte read, invocations per V row, key groups of a tile.
const VSTEP: u32 = 8u;
const RPT: u32 = DVC / VSTEP;
const NG: u32 = WG / RPT;
const SCORE_TILES: u32 = {{SCORE_TILES}}u;

// The G queries, head-major, four elements a read.
var<workgroup> qs: array<vec4<f32>, {{QS4}}>;
// Per head: each subgroup's partial of a reduction.
var<workgroup> red: array<f32, {{RED}}>;
var<workgroup> ps: array<f32, {{PS}}>;
var<workgroup> slots: array<u32, {{WG}}>;
// The kept scores of exact rows (head-major; rows split automatically are exact only when
// they have at most one tile of keys), then at the end one head's key-group partial outputs.
var<workgroup> buf: array<f32, {{BUF}}>;
var<private> va: array<f32, {{VA}}>;

var<private> sg_i: u32;
var<private> sg_id: u32;
var<private> n_sg: u32;

// Per head: the maximum (`take_max`) or the sum over the workgroup of each invocation's value
// (subgroups first, then the subgroups in order, as attention.wgsl's reductions).
fn reduce_g(v: array<f32, G>, take_max: bool) -> array<f32, G> {
    for (var g = 0u; g < G; g++) {
        var s: f32;
        if take_max {
            s = subgroupMax(v[g]);
        } else {
            s = subgroupAdd(v[g]);
        }
        if sg_i == 0u {
            red[g * WG + sg_id] = s;
        }
    }
    workgroupBarrier();
    var r: array<f32, G>;
    for (var g = 0u; g < G; g++) {
        var x = red[g * WG];
        for (var i = 1u; i < n_sg; i++) {
            x = select(x + red[g * WG + i], max(x, red[g * WG + i]), take_max);
        }
        r[g] = x;
    }
    workgroupBarrier();
    return r;
}

// The scores of keys past the range (every head's -1e30).
fn no_scores() -> array<f32, G> {
    var sc: array<f32, G>;
    for (var g = 0u; g < G; g++) {
        sc[g] = -1e30;
    }
    return sc;
}

// The scaled (and soft-capped) scores of the key in cache slot `slot` for the G queries in
// `qs`: the key's row read once, 16 bytes at a time.
fn scores(slot: u32, kvh: u32) -> array<f32, G> {
    let kb = slot * pc.kw + kvh * pc.dk;
    var dotv: array<f32, G>;
    for (var d = 0u; d < DKC; d += 8u) {
        let w = KC[(kb + d) >> 3u];
        let a = unpack2x16float(w.x);
        let b = unpack2x16float(w.y);
        let c = unpack2x16float(w.z);
        let e = unpack2x16float(w.w);
        for (var g = 0u; g < G; g++) {
            let q0 = qs[(g * DKC + d) / 4u];
            let q1 = qs[(g * DKC + d) / 4u + 1u];
            var s = dotv[g] + (q0.x * a.x + q0.y * a.y);
            s += q0.z * b.x + q0.w * b.y;
            s += q1.x * c.x + q1.y * c.y;
            dotv[g] = s + (q1.z * e.x + q1.w * e.y);
        }
    }
    for (var g = 0u; g < G; g++) {
        var sc = dotv[g] * pc.scale;
        if pc.softcap != 0.0 {
            sc = tanh_exp(sc / pc.softcap) * pc.softcap;
        }
        dotv[g] = sc;
    }
    return dotv;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(num_subgroups) nsg: u32) {
    sg_i = sgi;
    sg_id = sgid;
    n_sg = nsg;
    let lin0 = wg_linear(wid, nwg);
    let split = lin0 % pc.n_split;
    let lin = lin0 / pc.n_split;
    let n_kv = pc.n_head / G;
    let tok = lin / n_kv;
    if tok >= pc.n_tokens {
        return;
    }
    let kvh = lin % n_kv;
    let h0 = kvh * G;
    let pt = S[pc.pt_off + tok];
    let range = split_keys(tok, split);
    let n_active = range.z;
    if split >= n_active {
        return;
    }
    for (var i = t; i < G * DKC / 4u; i += WG) {
        let o = (tok * pc.n_head + h0) * DKC + 4u * i;
        var q = vec4<f32>(Q[o], Q[o + 1u], Q[o + 2u], Q[o + 3u]);
        if pc.round_q == 1u {
            q = vec4<f32>(round_f16(q.x), round_f16(q.y), round_f16(q.z), round_f16(q.w));
        }
        qs[i] = q;
    }
    workgroupBarrier();
    let begin = range.x;
    let end = range.y;
    var m: array<f32, G>;
    var l: array<f32, G>;
    for (var g = 0u; g < G; g++) {
        m[g] = -1e30;
        l[g] = 0.0;
        if pc.has_sinks != 0u && split == 0u {
            m[g] = SINKS[h0 + g];
            l[g] = 1.0;
        }
    }
    let exact = n_active == 1u && pc.round_q == 1u;
    if exact {
        var tile = 0u;
        for (var base = begin; base < end; base += WG) {
            let j = base + t;
            var sc = no_scores();
            if j < end {
                sc = scores(key_slot(pt, j), kvh);
            }
            if tile < SCORE_TILES {
                for (var g = 0u; g < G; g++) {
                    buf[(g * SCORE_TILES + tile) * WG + t] = sc[g];
                }
            }
            tile++;
            let tmax = reduce_g(sc, true);
            var p: array<f32, G>;
            var m_new: array<f32, G>;
            for (var g = 0u; g < G; g++) {
                m_new[g] = max(m[g], tmax[g]);
                p[g] = 0.0;
                if j < end {
                    p[g] = exp(sc[g] - m_new[g]);
                }
            }
            let tsum = reduce_g(p, false);
            for (var g = 0u; g < G; g++) {
                l[g] = l[g] * exp(m[g] - m_new[g]) + tsum[g];
                m[g] = m_new[g];
            }
        }
    }
    var inv_exact: array<f32, G>;
    for (var g = 0u; g < G; g++) {
        inv_exact[g] = 1.0 / l[g];
    }
    var tile = 0u;
    for (var base = begin; base < end; base += WG) {
        let j = base + t;
        var sc = no_scores();
        var slot = 0u;
        if j < end {
            slot = key_slot(pt, j);
            if exact && tile < SCORE_TILES {
                for (var g = 0u; g < G; g++) {
                    sc[g] = buf[(g * SCORE_TILES + tile) * WG + t];
                }
            } else {
                sc = scores(slot, kvh);
            }
        }
        tile++;
        slots[t] = slot;
        var alpha: array<f32, G>;
        if exact {
            for (var g = 0u; g < G; g++) {
                var p = 0.0;
                if j < end {
                    p = round_f16(exp(sc[g] - m[g]) * inv_exact[g]);
                }
                ps[g * WG + t] = p;
                alpha[g] = 1.0;
            }
            workgroupBarrier();
        } else {
            let tmax = reduce_g(sc, true);
            var p: array<f32, G>;
            for (var g = 0u; g < G; g++) {
                let m_new = max(m[g], tmax[g]);
                alpha[g] = exp(m[g] - m_new);
                p[g] = 0.0;
                if j < end {
                    p[g] = exp(sc[g] - m_new);
                }
                ps[g * WG + t] = p[g];
                m[g] = m_new;
            }
            let tsum = reduce_g(p, false);
            for (var g = 0u; g < G; g++) {
                l[g] = l[g] * alpha[g] + tsum[g];
            }
        }
        let cnt = min(WG, end - base);
        // RPT invocations read a V row 16 bytes each; key group t / RPT takes every NG-th
        // key of the tile; each read serves the G heads.
        for (var g = 0u; g < G; g++) {
            for (var e = 0u; e < VSTEP; e++) {
                va[g * VSTEP + e] *= alpha[g];
            }
        }
        let vo = kvh * pc.dv + (t % RPT) * VSTEP;
        // jj = t / RPT, + NG, ... (a constant trip count, so the loads can be issued together).
        for (var k = 0u; k < RPT; k++) {
            let jj = t / RPT + k * NG;
            let live = jj < cnt;
            let w = VC[(slots[jj] * pc.vw + vo) >> 3u];
            let q = array<vec2<f32>, 4>(unpack2x16float(w.x), unpack2x16float(w.y), unpack2x16float(w.z), unpack2x16float(w.w));
            for (var g = 0u; g < G; g++) {
                let p = ps[g * WG + jj];
                for (var e = 0u; e < 4u; e++) {
                    va[g * VSTEP + 2u * e] += select(0.0, p * q[e].x, live);
                    va[g * VSTEP + 2u * e + 1u] += select(0.0, p * q[e].y, live);
                }
            }
        }
        workgroupBarrier();
    }
    // Fold the key groups' partial outputs one head at a time (workgroup memory of one head).
    for (var g = 0u; g < G; g++) {
        for (var e = 0u; e < VSTEP; e++) {
            buf[(t / RPT) * DVC + (t % RPT) * VSTEP + e] = va[g * VSTEP + e];
        }
        workgroupBarrier();
        let h = h0 + g;
        let row = tok * pc.n_head + h;
        for (var ii = 0u; ii < DPT; ii++) {
            let d = t + ii * WG;
            if d < DVC {
                var a = 0.0;
                for (var k = 0u; k < NG; k++) {
                    a += buf[k * DVC + d];
                }
                if n_active == 1u {
                    let inv = select(1.0 / l[g], 1.0, exact);
                    O[row * DVC + d] = a * inv;
                } else {
                    let rec = (row * pc.n_split + split) * (DVC + 2u);
                    PART[rec + 2u + d] = a;
                }
            }
        }
        if n_active > 1u && t == 0u {
            let rec = (row * pc.n_split + split) * (DVC + 2u);
            PART[rec] = m[g];
            PART[rec + 1u] = l[g];
        }
        workgroupBarrier();
    }
}
