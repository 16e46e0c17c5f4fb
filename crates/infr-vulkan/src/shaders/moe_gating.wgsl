// The parameters and bindings of the routing kernels (moe_route.wgsl, moe_route_rank.wgsl),
// and moe_route.wgsl's end: the weights of a token's chosen experts, softmax over all experts
// given the sum of exp(logit - max) (gating 0), sigmoid (1) or softmax over the chosen (2),
// renormalised to sum 1 (sum clamped at 2^-14) and scaled per expert; written as
// ROUTE[t*k + s] = expert id (local to the op's slice of experts) and
// ROUTE[n*k + t*k + s] = weight bits.

struct Params {
    n_tokens: u32,
    n_expert: u32,
    k: u32,
    gating: u32,
    renorm: u32,
    has_scale: u32,
    first: u32,
    count: u32,
    // 1: each token's pairs end with the shared expert's slot (id SHARED_SLOT), weight 1;
    // 2: weighted by sigmoid(X[tok] . GATE) over in_cols columns (moe_route_rank.wgsl).
    shared_slot: u32,
    in_cols: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> LOGITS: array<f32>;
@group(0) @binding(1) var<storage, read> SCALE: array<f32>;
@group(0) @binding(2) var<storage, read_write> ROUTE: array<u32>;
// The MoE input and the shared expert's gate weights (read with shared_slot 2).
@group(0) @binding(3) var<storage, read> X: array<f32>;
@group(0) @binding(4) var<storage, read> GATE: array<f32>;

// The expert id of the shared expert's slot: the expert matmuls read its own weights there.
const SHARED_SLOT: u32 = 0xffffffffu;

// Pairs per token: the routed ones, and the shared expert's slot when it has one.
fn pairs_per_token() -> u32 {
    return pc.k + select(0u, 1u, pc.shared_slot != 0u);
}

const MAX_K: u32 = {{MAX_K}}u;

fn write_route(tok: u32, chosen: array<u32, MAX_K>, chosen_v: array<f32, MAX_K>, sum_all: f32) {
    var w: array<f32, MAX_K>;
    for (var s = 0u; s < pc.k; s++) {
        w[s] = chosen_v[s];
    }
    if pc.gating == 0u {
        let mx = chosen_v[0];
        for (var s = 0u; s < pc.k; s++) {
            w[s] = exp(w[s] - mx) / sum_all;
        }
    } else if pc.gating == 1u {
        for (var s = 0u; s < pc.k; s++) {
            w[s] = 1.0 / (1.0 + exp(-w[s]));
        }
    } else {
        let mx = w[0];
        var sum = 0.0;
        for (var s = 0u; s < pc.k; s++) {
            w[s] = exp(w[s] - mx);
            sum += w[s];
        }
        for (var s = 0u; s < pc.k; s++) {
            w[s] /= sum;
        }
    }
    if pc.renorm != 0u {
        var sum = 0.0;
        for (var s = 0u; s < pc.k; s++) {
            sum += w[s];
        }
        sum = max(sum, 6.103515625e-5);
        for (var s = 0u; s < pc.k; s++) {
            w[s] /= sum;
        }
    }
    for (var s = 0u; s < pc.k; s++) {
        var v = w[s];
        if pc.has_scale != 0u {
            v *= SCALE[chosen[s]];
        }
        store_pair(tok * pairs_per_token() + s, chosen[s], v);
    }
}

// Pair `i`: expert `e` with weight `w`, local to the op's slice of experts (expert
// parallelism); an expert outside it becomes local expert 0 with weight 0, so the expert
// matmuls compute nothing that counts for it.
fn store_pair(i: u32, e: u32, w: f32) {
    var id = e - pc.first;
    var v = w;
    if e < pc.first || id >= pc.count {
        id = 0u;
        v = 0.0;
    }
    ROUTE[i] = id;
    ROUTE[pc.n_tokens * pairs_per_token() + i] = bitcast<u32>(v);
}
