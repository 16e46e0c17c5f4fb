// Routing of a mixture-of-experts FFN (`build_moe_ffn` up to the expert matmuls): per token,
// the top-k experts by router logit (ties to the lower id; softmax and sigmoid keep the
// order), then their weights: softmax over all experts (gating 0), sigmoid (1) or softmax
// over the chosen (2); renormalised to sum 1 (sum clamped at 2^-14) and scaled per expert.
// Writes the route through moe_gating.wgsl's write_route. One workgroup per
// token: each pick is a workgroup argmax over the experts (a thread per token took ~260 us on
// an H200 for 128 experts, top-8: more than the layer's expert matmuls).

const WG: u32 = 64u;
const NONE: u32 = 0xffffffffu;

var<workgroup> red: array<f32, WG>;
var<workgroup> red_i: array<u32, WG>;
var<workgroup> chosen: array<u32, MAX_K>;
var<workgroup> chosen_v: array<f32, MAX_K>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let tok = wg_linear(wid, nwg);
    if tok >= pc.n_tokens {
        return;
    }
    let base = tok * pc.n_expert;
    for (var s = 0u; s < pc.k; s++) {
        // This thread's best untaken expert (strict > keeps the lower id on ties).
        var best = NONE;
        var best_v = 0.0;
        for (var e = li; e < pc.n_expert; e += WG) {
            var taken = false;
            for (var j = 0u; j < s; j++) {
                taken = taken || chosen[j] == e;
            }
            let v = LOGITS[base + e];
            if !taken && (best == NONE || v > best_v) {
                best = e;
                best_v = v;
            }
        }
        red[li] = best_v;
        red_i[li] = best;
        workgroupBarrier();
        for (var h = WG / 2u; h > 0u; h >>= 1u) {
            if li < h {
                let oi = red_i[li + h];
                let ov = red[li + h];
                let mi = red_i[li];
                let mv = red[li];
                if oi != NONE && (mi == NONE || ov > mv || (ov == mv && oi < mi)) {
                    red_i[li] = oi;
                    red[li] = ov;
                }
            }
            workgroupBarrier();
        }
        if li == 0u {
            chosen[s] = red_i[0];
            chosen_v[s] = red[0];
        }
        workgroupBarrier();
    }
    // Softmax over all experts needs their sum: the first pick is the maximum.
    var part = 0.0;
    if pc.gating == 0u {
        let mx = chosen_v[0];
        for (var e = li; e < pc.n_expert; e += WG) {
            part += exp(LOGITS[base + e] - mx);
        }
    }
    let total = tree_sum(li, part);
    if li != 0u {
        return;
    }
    var picks: array<u32, MAX_K>;
    var picks_v: array<f32, MAX_K>;
    for (var s = 0u; s < pc.k; s++) {
        picks[s] = chosen[s];
        picks_v[s] = chosen_v[s];
    }
    write_route(tok, picks, picks_v, total);
}
