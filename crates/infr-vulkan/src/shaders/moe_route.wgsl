// Routing of a mixture-of-experts FFN (`build_moe_ffn` up to the expert matmuls): per token,
// the top-k experts by router logit (ties to the lower id; softmax and sigmoid keep the
// order), then their weights: softmax over all experts (gating 0), sigmoid (1) or softmax
// over the chosen (2); renormalised to sum 1 (sum clamped at 2^-14) and scaled per expert.
// Writes ROUTE[t*k + s] = expert id and ROUTE[n*k + t*k + s] = weight bits. One thread per token.

struct Params {
    n_tokens: u32,
    n_expert: u32,
    k: u32,
    gating: u32,
    renorm: u32,
    has_scale: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> LOGITS: array<f32>;
@group(0) @binding(1) var<storage, read> SCALE: array<f32>;
@group(0) @binding(2) var<storage, read_write> ROUTE: array<u32>;

const MAX_K: u32 = {{MAX_K}}u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let tok = wg_linear(wid, nwg) * 64u + li;
    if tok >= pc.n_tokens {
        return;
    }
    let base = tok * pc.n_expert;
    var ids: array<u32, MAX_K>;
    var w: array<f32, MAX_K>;
    for (var s = 0u; s < pc.k; s++) {
        var best = 0xffffffffu;
        var best_v = 0.0;
        for (var e = 0u; e < pc.n_expert; e++) {
            var taken = false;
            for (var j = 0u; j < s; j++) {
                taken = taken || ids[j] == e;
            }
            let v = LOGITS[base + e];
            if !taken && (best == 0xffffffffu || v > best_v) {
                best = e;
                best_v = v;
            }
        }
        ids[s] = best;
        w[s] = best_v;
    }
    if pc.gating == 0u {
        let mx = w[0];
        var sum = 0.0;
        for (var e = 0u; e < pc.n_expert; e++) {
            sum += exp(LOGITS[base + e] - mx);
        }
        for (var s = 0u; s < pc.k; s++) {
            w[s] = exp(w[s] - mx) / sum;
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
    let n_pairs = pc.n_tokens * pc.k;
    for (var s = 0u; s < pc.k; s++) {
        var v = w[s];
        if pc.has_scale != 0u {
            v *= SCALE[ids[s]];
        }
        ROUTE[tok * pc.k + s] = ids[s];
        ROUTE[n_pairs + tok * pc.k + s] = bitcast<u32>(v);
    }
}
