// The weights of a token's chosen experts (moe_route.wgsl, moe_route_sg.wgsl): softmax over
// all experts given the sum of exp(logit - max) (gating 0), sigmoid (1) or softmax over the
// chosen (2), renormalised to sum 1 (sum clamped at 2^-14) and scaled per expert; written as
// ROUTE[t*k + s] = expert id and ROUTE[n*k + t*k + s] = weight bits.
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
    let n_pairs = pc.n_tokens * pc.k;
    for (var s = 0u; s < pc.k; s++) {
        var v = w[s];
        if pc.has_scale != 0u {
            v *= SCALE[chosen[s]];
        }
        ROUTE[tok * pc.k + s] = chosen[s];
        ROUTE[n_pairs + tok * pc.k + s] = bitcast<u32>(v);
    }
}
