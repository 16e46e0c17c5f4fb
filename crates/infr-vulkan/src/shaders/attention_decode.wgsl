// Decode attention over an f16 cache (flash decoding): a workgroup takes one (token, group of G
// query heads, key split); its invocations form key groups of L lanes, each key group walks
// every NKG-th run of U keys of the split, and the L lanes of a key group share one key: each
// reads its 4-element chunks of the K and V rows (L chunks side by side, so a key group's loads
// are one contiguous span), the dot products are summed across the lanes with shuffles. The G
// heads share a KV head (grouped-query attention), so each K and V row is read once for all of
// them, as llama.cpp's Vulkan flash attention puts the heads of a KV head in the rows of one
// workgroup. Per key group an online softmax (m, l, output) per head; the key groups are merged
// at the end. Keys need no workgroup barrier: only the final merge synchronizes.
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
// Query heads per workgroup.
const G: u32 = {{G}}u;
const DKC: u32 = {{DK}}u;
const DVC: u32 = {{DV}}u;
// 4-element chunks per lane of a K row and of a V row.
const CK: u32 = DKC / (4u * L);
const CV: u32 = DVC / (4u * L);
// Keys of a split whose scores the two-pass rows keep (per head).
const SC_CAP: u32 = {{SC_CAP}}u;

// The G queries (head-major), staged for the lanes' registers.
var<workgroup> qsh: array<vec4<f32>, {{QSH}}>;
var<workgroup> scs: array<f32, {{SCS}}>;
// Per key group and head: m, l.
var<workgroup> mls: array<vec2<f32>, {{MLS}}>;
// One head's key-group outputs at a time.
var<workgroup> osh: array<vec4<f32>, {{OSH}}>;

// This lane's query chunks and output accumulators, head-major.
var<private> q: array<vec4<f32>, {{QR}}>;
var<private> acc: array<vec4<f32>, {{AR}}>;
var<private> m: array<f32, G>;
var<private> l: array<f32, G>;

fn unpack4(w: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}

// The sum of `v` over the L lanes of this key group, in every one of them.
fn lanes_sum(v: f32) -> f32 {
    var s = v;
    for (var o = L / 2u; o > 0u; o >>= 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}

// The G scaled (soft-capped) scores of the key in `slot`, in every lane of the key group.
fn scores(slot: u32, kvh: u32, lane: u32) -> array<f32, G> {
    let kb = (slot * pc.kw + kvh * DKC) / 4u + lane;
    var kc: array<vec4<f32>, CK>;
    for (var c = 0u; c < CK; c++) {
        kc[c] = unpack4(KC[kb + c * L]);
    }
    var s: array<f32, G>;
    for (var g = 0u; g < G; g++) {
        var d = 0.0;
        for (var c = 0u; c < CK; c++) {
            d += dot(q[g * CK + c], kc[c]);
        }
        var sc = lanes_sum(d) * pc.scale;
        if pc.softcap != 0.0 {
            sc = tanh_exp(sc / pc.softcap) * pc.softcap;
        }
        s[g] = sc;
    }
    return s;
}

// acc[g] += p[g] · (this lane's chunks of the V row in `slot`).
fn add_v(slot: u32, kvh: u32, lane: u32, p: array<f32, G>) {
    let vb = (slot * pc.vw + kvh * DVC) / 4u + lane;
    for (var c = 0u; c < CV; c++) {
        let v = unpack4(VC[vb + c * L]);
        for (var g = 0u; g < G; g++) {
            acc[g * CV + c] += p[g] * v;
        }
    }
}

// Head g's max and sum over the key groups (their (m, l) in `mls`): M, Σ l e^(m - M).
fn merged_ml(g: u32) -> vec2<f32> {
    var mx = -1e30;
    for (var i = 0u; i < NKG; i++) {
        mx = max(mx, mls[i * G + g].x);
    }
    var sum = 0.0;
    for (var i = 0u; i < NKG; i++) {
        let e = mls[i * G + g];
        sum += e.y * exp(e.x - mx);
    }
    return vec2<f32>(mx, sum);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_size) sgs: u32) {
    let u = sgid * sgs + sgi;
    let kg = u / L;
    let lane = u % L;
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
    for (var i = t; i < G * DKC / 4u; i += WG) {
        let o = (tok * pc.n_head + h0) * DKC + 4u * i;
        var x = vec4<f32>(Q[o], Q[o + 1u], Q[o + 2u], Q[o + 3u]);
        if pc.round_q == 1u {
            x = vec4<f32>(round_f16(x.x), round_f16(x.y), round_f16(x.z), round_f16(x.w));
        }
        qsh[i] = x;
    }
    workgroupBarrier();
    for (var g = 0u; g < G; g++) {
        for (var c = 0u; c < CK; c++) {
            q[g * CK + c] = qsh[(g * DKC) / 4u + c * L + lane];
        }
        for (var c = 0u; c < CV; c++) {
            acc[g * CV + c] = vec4<f32>(0.0);
        }
        m[g] = -1e30;
        l[g] = 0.0;
        // The sink counts once per row: in split 0's first key group.
        if pc.has_sinks != 0u && split == 0u && kg == 0u {
            m[g] = SINKS[h0 + g];
            l[g] = 1.0;
        }
    }
    let exact = n_active == 1u && pc.round_q == 1u;
    let stride = NKG * U;
    if exact {
        // First pass: each head's max and sum over the row, scores kept where they fit.
        for (var j0 = begin + kg * U; j0 < end; j0 += stride) {
            for (var k = 0u; k < U; k++) {
                // Past the end: the last key again, unused (the lanes' shuffles stay together).
                let j = min(j0 + k, end - 1u);
                let s = scores(key_slot(pt, j), kvh, lane);
                if j0 + k < end {
                    for (var g = 0u; g < G; g++) {
                        if j - begin < SC_CAP && lane == 0u {
                            scs[g * SC_CAP + j - begin] = s[g];
                        }
                        let m_new = max(m[g], s[g]);
                        l[g] = l[g] * exp(m[g] - m_new) + exp(s[g] - m_new);
                        m[g] = m_new;
                    }
                }
            }
        }
        for (var g = 0u; g < G; g++) {
            if lane == 0u {
                mls[kg * G + g] = vec2<f32>(m[g], l[g]);
            }
        }
        workgroupBarrier();
        var inv: array<f32, G>;
        for (var g = 0u; g < G; g++) {
            let ml = merged_ml(g);
            m[g] = ml.x;
            l[g] = ml.y;
            inv[g] = 1.0 / ml.y;
        }
        // Second pass: V weighed by the rounded normalized probabilities.
        for (var j0 = begin + kg * U; j0 < end; j0 += stride) {
            for (var k = 0u; k < U; k++) {
                let j = min(j0 + k, end - 1u);
                let slot = key_slot(pt, j);
                var s: array<f32, G>;
                if j - begin < SC_CAP {
                    for (var g = 0u; g < G; g++) {
                        s[g] = scs[g * SC_CAP + j - begin];
                    }
                } else {
                    s = scores(slot, kvh, lane);
                }
                var p: array<f32, G>;
                for (var g = 0u; g < G; g++) {
                    p[g] = select(0.0, round_f16(exp(s[g] - m[g]) * inv[g]), j0 + k < end);
                }
                add_v(slot, kvh, lane, p);
            }
        }
    } else {
        // One pass, online softmax over runs of U keys.
        for (var j0 = begin + kg * U; j0 < end; j0 += stride) {
            var s: array<array<f32, G>, U>;
            var slots: array<u32, U>;
            for (var k = 0u; k < U; k++) {
                let j = min(j0 + k, end - 1u);
                slots[k] = key_slot(pt, j);
                s[k] = scores(slots[k], kvh, lane);
            }
            var p: array<array<f32, G>, U>;
            for (var g = 0u; g < G; g++) {
                var mx = m[g];
                for (var k = 0u; k < U; k++) {
                    if j0 + k < end {
                        mx = max(mx, s[k][g]);
                    }
                }
                let alpha = exp(m[g] - mx);
                var sum = l[g] * alpha;
                for (var k = 0u; k < U; k++) {
                    p[k][g] = select(0.0, exp(s[k][g] - mx), j0 + k < end);
                    sum += p[k][g];
                }
                for (var c = 0u; c < CV; c++) {
                    acc[g * CV + c] *= alpha;
                }
                m[g] = mx;
                l[g] = sum;
            }
            for (var k = 0u; k < U; k++) {
                add_v(slots[k], kvh, lane, p[k]);
            }
        }
        for (var g = 0u; g < G; g++) {
            if lane == 0u {
                mls[kg * G + g] = vec2<f32>(m[g], l[g]);
            }
        }
        workgroupBarrier();
    }
    // Merge the key groups one head at a time: out = Σ acc e^(m - M), sum = Σ l e^(m - M).
    for (var g = 0u; g < G; g++) {
        let ml = merged_ml(g);
        let mx = ml.x;
        let sum = ml.y;
        // Two-pass rows: every key group already has the row's max, and acc is normalized.
        let f = select(exp(mls[kg * G + g].x - mx), 1.0, exact);
        for (var c = 0u; c < CV; c++) {
            osh[kg * (DVC / 4u) + c * L + lane] = acc[g * CV + c] * f;
        }
        workgroupBarrier();
        let row = tok * pc.n_head + h0 + g;
        let rec = (row * pc.n_split + split) * (DVC + 2u);
        for (var i = t; i < DVC / 4u; i += WG) {
            var o = vec4<f32>(0.0);
            for (var k = 0u; k < NKG; k++) {
                o += osh[k * (DVC / 4u) + i];
            }
            if n_active == 1u {
                let inv = select(1.0 / sum, 1.0, exact);
                let r = row * DVC + 4u * i;
                O[r] = o.x * inv;
                O[r + 1u] = o.y * inv;
                O[r + 2u] = o.z * inv;
                O[r + 3u] = o.w * inv;
            } else {
                let r = rec + 2u + 4u * i;
                PART[r] = o.x;
                PART[r + 1u] = o.y;
                PART[r + 2u] = o.z;
                PART[r + 3u] = o.w;
            }
        }
        if n_active > 1u && t == 0u {
            PART[rec] = mx;
            PART[rec + 1u] = sum;
        }
        workgroupBarrier();
    }
}
