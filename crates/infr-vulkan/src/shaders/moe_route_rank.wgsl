// Routing of a mixture-of-experts FFN by rank: per token, every expert's rank in the order
// (higher router logit first, the lower id on ties; NaN counts as -inf) is counted against all
// the others at once, and the experts ranked below k are the picks, already in pick order: no
// serial rounds of argmax (moe_route.wgsl takes one workgroup-wide reduction per pick). Then
// the weights in parallel over the picks: softmax over all experts (gating 0, with the sum of
// exp(logit - max)), sigmoid (1) or softmax over the chosen (2), renormalised to sum 1 (sum
// clamped at 2^-14), scaled per expert; ROUTE[t*k + s] = expert id and
// ROUTE[n*k + t*k + s] = weight bits, as moe_gating.wgsl's write_route. Up to MAX_E experts.
// The logits sit in shared memory four to a vector (padded with -inf, which ranks after every
// expert), so counting a rank takes one load per four experts: with one load per expert,
// Qwen3.6-35B-A3B's 256-expert routing took ~11 µs on an H100, mostly that loop's latency.

const WG: u32 = 256u;
const MAX_E: u32 = {{MAX_E}}u;

var<workgroup> lg: array<vec4<f32>, MAX_E / 4u>;
var<workgroup> red: array<f32, WG>;
var<workgroup> pick_v: array<f32, MAX_K>;
var<workgroup> pick_i: array<u32, MAX_K>;
var<workgroup> pick_w: array<f32, MAX_K>;

// tree_sum, after which `red` may be written again at once.
fn sum_all(li: u32, x: f32) -> f32 {
    let s = tree_sum(li, x);
    workgroupBarrier();
    return s;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let tok = wg_linear(wid, nwg);
    if tok >= pc.n_tokens {
        return;
    }
    let n = pc.n_expert;
    let k = pc.k;
    let base = tok * n;
    let n4 = (n + 3u) / 4u;
    let neg_inf = bitcast<f32>(0xff800000u);
    // The shared expert's gate first: its loads then overlap the logits' and the ranking.
    var gate = 1.0;
    if pc.shared_slot == 2u {
        gate = shared_gate(tok, li);
        workgroupBarrier();
    }
    for (var e = li; e < 4u * n4; e += WG) {
        var v = neg_inf;
        if e < n {
            v = LOGITS[base + e];
        }
        lg[e / 4u][e % 4u] = select(neg_inf, v, v == v);
    }
    workgroupBarrier();
    let lanes = vec4<u32>(0u, 1u, 2u, 3u);
    for (var e = li; e < n; e += WG) {
        let v = lg[e / 4u][e % 4u];
        let vv = vec4<f32>(v);
        let ev = vec4<u32>(e);
        var ranks = vec4<u32>(0u);
        for (var j = 0u; j < n4; j++) {
            let u = lg[j];
            let ahead = (u > vv) | ((u == vv) & (vec4<u32>(4u * j) + lanes < ev));
            ranks += select(vec4<u32>(0u), vec4<u32>(1u), ahead);
        }
        let rank = ranks.x + ranks.y + ranks.z + ranks.w;
        if rank < k {
            pick_v[rank] = v;
            pick_i[rank] = e;
        }
    }
    workgroupBarrier();
    let mx = pick_v[0];
    // Softmax over all experts needs their sum.
    var part = 0.0;
    if pc.gating == 0u {
        for (var e = li; e < n; e += WG) {
            part += exp(lg[e / 4u][e % 4u] - mx);
        }
    }
    let total = sum_all(li, part);
    var w = 0.0;
    if li < k {
        let v = pick_v[li];
        if pc.gating == 0u {
            w = exp(v - mx) / total;
        } else if pc.gating == 1u {
            w = 1.0 / (1.0 + exp(-v));
        } else {
            w = exp(v - mx);
        }
    }
    let wsum = sum_all(li, w);
    if pc.gating == 2u {
        w /= wsum;
    }
    if pc.renorm != 0u {
        // The chosen weights' sum after gating (softmax over the chosen already sums to 1,
        // up to rounding, as the reference's second division sees it).
        var s = wsum;
        if pc.gating == 2u {
            s = sum_all(li, w);
        }
        w /= max(s, 6.103515625e-5);
    }
    if li < k {
        let e = pick_i[li];
        if pc.has_scale != 0u {
            w *= SCALE[e];
        }
        store_pair(tok * pairs_per_token() + li, e, w);
    }
    // The shared expert's slot after the routed ones, weighted by its gate (or 1).
    if pc.shared_slot != 0u && li == 0u {
        let slot = tok * pairs_per_token() + k;
        ROUTE[slot] = SHARED_SLOT;
        ROUTE[pc.n_tokens * pairs_per_token() + slot] = bitcast<u32>(gate);
    }
}
