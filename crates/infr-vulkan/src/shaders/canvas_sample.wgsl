// DiffusionGemma's sampler on the device (engine `diffusion.rs` does the same on the host):
// per canvas row of logits x at temperature t, the probabilities p = softmax(x / t) (kept in the
// embedding-mixture buffer for the next step's self-conditioning), the entropy
// H = -sum p log p, the argmax (first index of the maximum) and one draw by inverse CDF with the
// row's uniform u (the first i whose running sum of p exceeds u * sum p). Only H, the argmax
// and the draw are read back. Three passes ({{PASS}}), each row cut into chunks of E * WG:
//   1. per chunk: max m, its first index, S = sum exp(s - m), W = sum exp(s - m) (s - m);
//   2. per chunk: the row's log-sum-exp from the chunk stats, p written out, the chunk's sum of p;
//   3. per row: H = ln S - W / S (S, W rescaled to the row max), argmax, the draw.

struct Params {
    n_vocab: u32,
    n_rows: u32,
    chunks: u32,
}

var<immediate> pc: Params;

// Logits rows; chunk stats (4 words per chunk, then one probability sum per chunk); the
// mixture buffer (word 0: 1 = holds probabilities, then rows of n_vocab); temperature and one
// uniform per row; per row (entropy, argmax, draw, 0).
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> PART: array<f32>;
@group(0) @binding(2) var<storage, read_write> MIX: array<f32>;
@group(0) @binding(3) var<storage, read> IN: array<f32>;
@group(0) @binding(4) var<storage, read_write> OUT: array<u32>;

const WG: u32 = 256u;
const E: u32 = {{E}}u;
const PASS: u32 = {{PASS}}u;
const NONE: u32 = 0xffffffffu;

var<workgroup> red_a: array<f32, 256>;
var<workgroup> red_b: array<f32, 256>;
var<workgroup> red_i: array<u32, 256>;

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

// Workgroup max with the first index among equals (result in red_a[0], red_i[0]).
fn reduce_max(t: u32, v: f32, i: u32) {
    red_a[t] = v;
    red_i[t] = i;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if t < s {
            let bv = red_a[t + s];
            let bi = red_i[t + s];
            if bv > red_a[t] || (bv == red_a[t] && bi < red_i[t]) {
                red_a[t] = bv;
                red_i[t] = bi;
            }
        }
        workgroupBarrier();
    }
}

// Workgroup sums of two values (results in red_a[0], red_b[0]).
fn reduce_sum2(t: u32, a: f32, b: f32) {
    red_a[t] = a;
    red_b[t] = b;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if t < s {
            red_a[t] += red_a[t + s];
            red_b[t] += red_b[t + s];
        }
        workgroupBarrier();
    }
}

// The row's max and its first index, and S, W rescaled to that max, from its chunk stats.
struct RowStats {
    m: f32,
    idx: u32,
    s: f32,
    w: f32,
}

fn row_stats(row: u32) -> RowStats {
    var r = RowStats(neg_inf(), 0u, 0.0, 0.0);
    for (var c = 0u; c < pc.chunks; c++) {
        let o = (row * pc.chunks + c) * 4u;
        // Chunks are in index order: a later chunk wins only with a larger max.
        if PART[o] > r.m {
            r.m = PART[o];
            r.idx = bitcast<u32>(PART[o + 1u]);
        }
    }
    for (var c = 0u; c < pc.chunks; c++) {
        let o = (row * pc.chunks + c) * 4u;
        let mc = PART[o];
        if mc == neg_inf() {
            continue;
        }
        let f = exp(mc - r.m);
        r.s += f * PART[o + 2u];
        r.w += f * (PART[o + 3u] + (mc - r.m) * PART[o + 2u]);
    }
    return r;
}

// Scaled logit `i` of `row` (NaN counts as -inf).
fn scaled(row: u32, i: u32) -> f32 {
    let s = X[row * pc.n_vocab + i] / IN[0];
    return select(neg_inf(), s, s == s);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let lin = wg_linear(wid, nwg);
    let parts = select(pc.chunks, 1u, PASS == 3u);
    let row = lin / parts;
    if row >= pc.n_rows {
        return;
    }
    let c = lin % parts;
    let base = c * E * WG;
    if PASS == 1u {
        var v: array<f32, E>;
        var m = neg_inf();
        var mi = NONE;
        for (var e = 0u; e < E; e++) {
            let i = base + e * WG + t;
            v[e] = neg_inf();
            if i < pc.n_vocab {
                v[e] = scaled(row, i);
                if mi == NONE || v[e] > m {
                    m = v[e];
                    mi = i;
                }
            }
        }
        reduce_max(t, m, mi);
        let cm = red_a[0];
        let ci = red_i[0];
        workgroupBarrier();
        var s = 0.0;
        var w = 0.0;
        if cm != neg_inf() {
            for (var e = 0u; e < E; e++) {
                if v[e] != neg_inf() {
                    let d = v[e] - cm;
                    let x = exp(d);
                    s += x;
                    w += x * d;
                }
            }
        }
        reduce_sum2(t, s, w);
        if t == 0u {
            let o = lin * 4u;
            PART[o] = cm;
            PART[o + 1u] = bitcast<f32>(ci);
            PART[o + 2u] = red_a[0];
            PART[o + 3u] = red_b[0];
        }
    } else if PASS == 2u {
        let r = row_stats(row);
        let lse = r.m + log(r.s);
        var ps = 0.0;
        for (var e = 0u; e < E; e++) {
            let i = base + e * WG + t;
            if i < pc.n_vocab {
                let p = exp(scaled(row, i) - lse);
                MIX[1u + row * pc.n_vocab + i] = p;
                ps += p;
            }
        }
        reduce_sum2(t, ps, 0.0);
        if t == 0u {
            PART[pc.n_rows * pc.chunks * 4u + lin] = red_a[0];
        }
    } else {
        // One workgroup per row: thread 0 finds the chunk, every thread sums E consecutive
        // probabilities of it, thread 0 finds the thread's run, then the token.
        let r = row_stats(row);
        let sums = pc.n_rows * pc.chunks * 4u + row * pc.chunks;
        var total = 0.0;
        for (var k = 0u; k < pc.chunks; k++) {
            total += PART[sums + k];
        }
        var rest = IN[1u + row] * total;
        var chunk = NONE;
        for (var k = 0u; k < pc.chunks; k++) {
            let pk = PART[sums + k];
            if chunk == NONE {
                if rest - pk < 0.0 {
                    chunk = k;
                } else {
                    rest -= pk;
                }
            }
        }
        // Rounding left a sliver past the last chunk: draw from the last chunk with mass.
        let past_end = chunk == NONE;
        if past_end {
            chunk = 0u;
            for (var k = 0u; k < pc.chunks; k++) {
                if PART[sums + k] > 0.0 {
                    chunk = k;
                }
            }
        }
        let first = chunk * E * WG + t * E;
        var q = 0.0;
        for (var e = 0u; e < E; e++) {
            let i = first + e;
            if i < pc.n_vocab {
                q += MIX[1u + row * pc.n_vocab + i];
            }
        }
        red_a[t] = q;
        workgroupBarrier();
        if t == 0u {
            let c0 = chunk * E * WG;
            var pick = NONE;
            if !past_end {
                for (var u = 0u; u < WG && pick == NONE; u++) {
                    if rest - red_a[u] >= 0.0 {
                        rest -= red_a[u];
                        continue;
                    }
                    for (var e = 0u; e < E; e++) {
                        let i = c0 + u * E + e;
                        if i < pc.n_vocab {
                            rest -= MIX[1u + row * pc.n_vocab + i];
                            if rest < 0.0 {
                                pick = i;
                                break;
                            }
                        }
                    }
                }
            }
            if pick == NONE {
                // Rounding again: the chunk's last token with mass.
                for (var i = min(c0 + E * WG, pc.n_vocab); i > c0; i--) {
                    if MIX[1u + row * pc.n_vocab + i - 1u] > 0.0 {
                        pick = i - 1u;
                        break;
                    }
                }
                pick = select(pick, c0, pick == NONE);
            }
            OUT[row * 4u] = bitcast<u32>(log(r.s) - r.w / r.s);
            OUT[row * 4u + 1u] = r.idx;
            OUT[row * 4u + 2u] = pick;
            OUT[row * 4u + 3u] = 0u;
            if row == 0u {
                MIX[0] = bitcast<f32>(1u);
            }
        }
    }
}
