// Routing of a mixture-of-experts FFN by rank: per token, every expert's rank in the order
// (higher router logit first, the lower id on ties; NaN counts as -inf) is counted against all
// the others at once, and the experts ranked below k are the picks, already in pick order: no
// serial rounds of argmax (moe_route.wgsl takes one workgroup-wide reduction per pick). Then
// the weights in parallel over the picks: softmax over all experts (gating 0, with the sum of
// exp(logit - max)), sigmoid (1) or softmax over the chosen (2), renormalised to sum 1 (sum
// clamped at 2^-14), scaled per expert; ROUTE[t*k + s] = expert id and
// ROUTE[n*k + t*k + s] = weight bits, as moe_gating.wgsl's write_route. Up to MAX_E experts.

const WG: u32 = 256u;
const MAX_E: u32 = {{MAX_E}}u;

var<workgroup> lg: array<f32, MAX_E>;
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
    for (var e = li; e < n; e += WG) {
        let v = LOGITS[base + e];
        lg[e] = select(bitcast<f32>(0xff800000u), v, v == v);
    }
    workgroupBarrier();
    for (var e = li; e < n; e += WG) {
        let v = lg[e];
        var rank = 0u;
        for (var j = 0u; j < n; j++) {
            let u = lg[j];
            rank += select(0u, 1u, u > v || (u == v && j < e));
        }
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
            part += exp(lg[e] - mx);
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
    if pc.shared_slot != 0u {
        var g = 1.0;
        if pc.shared_slot == 2u {
            g = shared_gate(tok, li);
        }
        if li == 0u {
            let slot = tok * pairs_per_token() + k;
            ROUTE[slot] = SHARED_SLOT;
            ROUTE[pc.n_tokens * pairs_per_token() + slot] = bitcast<u32>(g);
        }
    }
}
