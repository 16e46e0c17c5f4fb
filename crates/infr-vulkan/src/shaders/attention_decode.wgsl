// Decode attention over an f16 cache (flash decoding): a workgroup takes one (token, group of G
// query heads, key split); its invocations form key groups of L lanes, each key group walks
// every NKG-th run of U keys of the split. Within a key group each head has LPH lanes (the G
// heads padded to HP): they split the key's K and V rows into 4-element chunks (LPH chunks side
// by side) and sum their partial dot products with shuffles, so each invocation holds one
// head's query and output chunks and one (m, l) pair. The G heads share a KV head
// (grouped-query attention): the K and V rows of a key are read by one key group for all of
// them (the same addresses across its head lanes), as llama.cpp's Vulkan flash attention puts
// the heads of a KV head in the rows of one workgroup. Keys need no workgroup barrier: only
// the final merge of the key groups synchronizes.
//
// Rows whose keys fit one split take two passes as attention.wgsl's do (llama.cpp's CPU rounds
// the normalized probabilities to f16 before P·V): the first finds each head's max and sum
// (kept scores in `scs` where they fit), the second weighs V by f16(exp(s - max) / sum). Split
// rows write attention.wgsl's partial records, merged by `attention_combine(_q8)`.

const WG: u32 = {{WG}}u;
// Lanes per key, key groups per workgroup, keys per key group and step.
const L: u32 = {{LANES}}u;
const NKG: u32 = WG / L;
const U: u32 = {{UNROLL}}u;
// Query heads per workgroup, padded to a power of two, and lanes per head.
const G: u32 = {{G}}u;
const HP: u32 = {{HP}}u;
const LPH: u32 = L / HP;
const DKC: u32 = {{DK}}u;
const DVC: u32 = {{DV}}u;
// 4-element chunks per lane of a K row and of a V row.
const CK: u32 = DKC / (4u * LPH);
const CV: u32 = DVC / (4u * LPH);
// Keys of a split whose scores the two-pass rows keep (per head).
const SC_CAP: u32 = {{SC_CAP}}u;

var<workgroup> scs: array<f32, {{SCS}}>;
// Per key group and head: m, l.
var<workgroup> mls: array<vec2<f32>, {{MLS}}>;
// The key groups' outputs of every head.
var<workgroup> osh: array<vec4<f32>, {{OSH}}>;

fn unpack4(w: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}

// The sum of `v` over the LPH lanes of this head in this key group, in every one of them.
fn head_sum(v: f32) -> f32 {
    var s = v;
    for (var o = LPH / 2u; o > 0u; o >>= 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}

// This lane's head's scaled (soft-capped) score of the key in `slot` (first chunk `kb`).
fn score(q: array<vec4<f32>, CK>, kb: u32) -> f32 {
    var d = 0.0;
    for (var c = 0u; c < CK; c++) {
        d += dot(q[c], unpack4(KC[kb + c * LPH]));
    }
    var sc = head_sum(d) * pc.scale;
    if pc.softcap != 0.0 {
        sc = tanh_exp(sc / pc.softcap) * pc.softcap;
    }
    return sc;
}

// Head g's max and sum over the key groups (their (m, l) in `mls`): M, Σ l e^(m - M).
fn merged_ml(g: u32) -> vec2<f32> {
    var mx = -1e30;
    for (var i = 0u; i < NKG; i++) {
        mx = max(mx, mls[i * HP + g].x);
    }
    var sum = 0.0;
    for (var i = 0u; i < NKG; i++) {
        let e = mls[i * HP + g];
        sum += e.y * exp(e.x - mx);
    }
    return vec2<f32>(mx, sum);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_size) sgs: u32) {
    let u = sgid * sgs + sgi;
    let kg = u / L;
    let gi = (u % L) / LPH;
    let li = u % LPH;
    let lin0 = wg_linear(wid, nwg);
    let split = lin0 % pc.n_split;
    let lin = lin0 / pc.n_split;
    let n_grp = pc.n_head / G;
    let tok = lin / n_grp;
    if tok >= pc.n_tokens {
        return;
    }
    let h0 = (lin % n_grp) * G;
    let kvh = h0 / pc.group;
    let pt = S[pc.pt_off + tok];
    let range = split_keys(tok, split);
    let n_active = range.z;
    if split >= n_active {
        return;
    }
    let begin = range.x;
    let end = range.y;
    // Padding lanes (gi >= G) shadow the last head; what they store is never read.
    let h = h0 + min(gi, G - 1u);
    var q: array<vec4<f32>, CK>;
    for (var c = 0u; c < CK; c++) {
        let o = (tok * pc.n_head + h) * DKC + 4u * (c * LPH + li);
        var x = vec4<f32>(Q[o], Q[o + 1u], Q[o + 2u], Q[o + 3u]);
        if pc.round_q == 1u {
            x = vec4<f32>(round_f16(x.x), round_f16(x.y), round_f16(x.z), round_f16(x.w));
        }
        q[c] = x;
    }
    var acc: array<vec4<f32>, CV>;
    for (var c = 0u; c < CV; c++) {
        acc[c] = vec4<f32>(0.0);
    }
    var m = -1e30;
    var l = 0.0;
    // The sink counts once per row: in split 0's first key group.
    if pc.has_sinks != 0u && split == 0u && kg == 0u {
        m = SINKS[h];
        l = 1.0;
    }
    // First 4-element chunk of this lane in a K row and in a V row.
    let k_lane = kvh * DKC / 4u + li;
    let v_lane = kvh * DVC / 4u + li;
    let exact = n_active == 1u && pc.round_q == 1u;
    let stride = NKG * U;
    if exact {
        // First pass: the head's max and sum over the row, scores kept where they fit.
        for (var j0 = begin + kg * U; j0 < end; j0 += stride) {
            for (var k = 0u; k < U; k++) {
                // Past the end: the last key again, unused (the lanes' shuffles stay together).
                let j = min(j0 + k, end - 1u);
                let s = score(q, key_slot(pt, j) * pc.kw / 4u + k_lane);
                if j0 + k < end {
                    if j - begin < SC_CAP && li == 0u {
                        scs[gi * SC_CAP + j - begin] = s;
                    }
                    let m_new = max(m, s);
                    l = l * exp(m - m_new) + exp(s - m_new);
                    m = m_new;
                }
            }
        }
        if li == 0u {
            mls[kg * HP + gi] = vec2<f32>(m, l);
        }
        workgroupBarrier();
        let ml = merged_ml(gi);
        m = ml.x;
        let inv = 1.0 / ml.y;
        // Second pass: V weighed by the rounded normalized probabilities.
        for (var j0 = begin + kg * U; j0 < end; j0 += stride) {
            for (var k = 0u; k < U; k++) {
                let j = min(j0 + k, end - 1u);
                let slot = key_slot(pt, j);
                var s: f32;
                if j - begin < SC_CAP {
                    s = scs[gi * SC_CAP + j - begin];
                } else {
                    s = score(q, slot * pc.kw / 4u + k_lane);
                }
                let p = select(0.0, round_f16(exp(s - m) * inv), j0 + k < end);
                let vb = slot * pc.vw / 4u + v_lane;
                for (var c = 0u; c < CV; c++) {
                    acc[c] += p * unpack4(VC[vb + c * LPH]);
                }
            }
        }
    } else {
        // One pass, online softmax over runs of U keys.
        for (var j0 = begin + kg * U; j0 < end; j0 += stride) {
            var s: array<f32, U>;
            var slots: array<u32, U>;
            var mx = m;
            for (var k = 0u; k < U; k++) {
                slots[k] = key_slot(pt, min(j0 + k, end - 1u));
                s[k] = score(q, slots[k] * pc.kw / 4u + k_lane);
                if j0 + k < end {
                    mx = max(mx, s[k]);
                }
            }
            let alpha = exp(m - mx);
            for (var c = 0u; c < CV; c++) {
                acc[c] *= alpha;
            }
            l *= alpha;
            for (var k = 0u; k < U; k++) {
                let p = select(0.0, exp(s[k] - mx), j0 + k < end);
                l += p;
                let vb = slots[k] * pc.vw / 4u + v_lane;
                for (var c = 0u; c < CV; c++) {
                    acc[c] += p * unpack4(VC[vb + c * LPH]);
                }
            }
            m = mx;
        }
        if li == 0u {
            mls[kg * HP + gi] = vec2<f32>(m, l);
        }
        workgroupBarrier();
    }
    // Merge the key groups: out = Σ acc e^(m - M), sum = Σ l e^(m - M), per head.
    let ml = merged_ml(gi);
    // Two-pass rows: every key group already has the row's max, and acc is normalized.
    let f = select(exp(mls[kg * HP + gi].x - ml.x), 1.0, exact);
    for (var c = 0u; c < CV; c++) {
        osh[(kg * HP + gi) * (DVC / 4u) + c * LPH + li] = acc[c] * f;
    }
    workgroupBarrier();
    for (var i = t; i < G * DVC / 4u; i += WG) {
        let g = i / (DVC / 4u);
        let e = i % (DVC / 4u);
        var o = vec4<f32>(0.0);
        for (var k = 0u; k < NKG; k++) {
            o += osh[(k * HP + g) * (DVC / 4u) + e];
        }
        let row = tok * pc.n_head + h0 + g;
        if n_active == 1u {
            let inv = select(1.0 / merged_ml(g).y, 1.0, exact);
            let r = row * DVC + 4u * e;
            O[r] = o.x * inv;
            O[r + 1u] = o.y * inv;
            O[r + 2u] = o.z * inv;
            O[r + 3u] = o.w * inv;
        } else {
            let r = (row * pc.n_split + split) * (DVC + 2u) + 2u + 4u * e;
            PART[r] = o.x;
            PART[r + 1u] = o.y;
            PART[r + 2u] = o.z;
            PART[r + 3u] = o.w;
        }
    }
    if n_active > 1u && t < G {
        let row = tok * pc.n_head + h0 + t;
        let rec = (row * pc.n_split + split) * (DVC + 2u);
        let mt = merged_ml(t);
        PART[rec] = mt.x;
        PART[rec + 1u] = mt.y;
    }
}
