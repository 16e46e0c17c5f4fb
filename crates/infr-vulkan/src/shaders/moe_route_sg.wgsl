// Routing of a mixture-of-experts FFN on devices with subgroup operations: the same result as
// moe_route.wgsl (top-k by router logit, ties to the lower id, then the gating weights), with
// each thread's logits held in registers and each pick an argmax through subgroup shuffles,
// then across the workgroup's subgroups with one barrier (moe_route.wgsl's tree of barriers
// per pick measured ~50 us per token on an H100 for 128 experts, top-8: about a quarter of
// the MoE layers' decode GPU time, 13.6% of the whole step).

const WG: u32 = 64u;
// Experts per thread held in registers: up to 32 * WG experts.
const EPT: u32 = 32u;
const NONE: u32 = 0xffffffffu;

// Per-subgroup candidates of a pick, double-buffered by the pick's parity (a pick writes the
// buffer the previous pick did not read), and per-subgroup partial sums.
var<workgroup> cand_v: array<f32, 2 * WG>;
var<workgroup> cand_i: array<u32, 2 * WG>;
var<workgroup> part_s: array<f32, WG>;

// Whether candidate (ov, oi) beats (v, i): higher logit, the lower id on ties, NONE loses.
fn beats(ov: f32, oi: u32, v: f32, i: u32) -> bool {
    return oi != NONE && (i == NONE || ov > v || (ov == v && oi < i));
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_size) sgs: u32, @builtin(num_subgroups) nsg: u32) {
    let tok = wg_linear(wid, nwg);
    if tok >= pc.n_tokens {
        return;
    }
    let base = tok * pc.n_expert;
    let mine = (pc.n_expert + WG - 1u - li) / WG;
    var lv: array<f32, EPT>;
    for (var j = 0u; j < mine; j++) {
        lv[j] = LOGITS[base + li + j * WG];
    }
    var taken = 0u;
    var chosen: array<u32, MAX_K>;
    var chosen_v: array<f32, MAX_K>;
    for (var s = 0u; s < pc.k; s++) {
        var best = NONE;
        var best_v = 0.0;
        for (var j = 0u; j < mine; j++) {
            if (taken & (1u << j)) == 0u && (best == NONE || lv[j] > best_v) {
                best = li + j * WG;
                best_v = lv[j];
            }
        }
        for (var o = 1u; o < sgs; o <<= 1u) {
            let ov = subgroupShuffleXor(best_v, o);
            let oi = subgroupShuffleXor(best, o);
            if beats(ov, oi, best_v, best) {
                best = oi;
                best_v = ov;
            }
        }
        let buf = (s & 1u) * WG;
        if sgi == 0u {
            cand_v[buf + sgid] = best_v;
            cand_i[buf + sgid] = best;
        }
        workgroupBarrier();
        for (var g = 0u; g < nsg; g++) {
            if beats(cand_v[buf + g], cand_i[buf + g], best_v, best) {
                best = cand_i[buf + g];
                best_v = cand_v[buf + g];
            }
        }
        chosen[s] = best;
        chosen_v[s] = best_v;
        if best != NONE && best % WG == li {
            taken |= 1u << (best / WG);
        }
    }
    // Softmax over all experts needs their sum: the first pick is the maximum.
    var part = 0.0;
    if pc.gating == 0u {
        for (var j = 0u; j < mine; j++) {
            part += exp(lv[j] - chosen_v[0]);
        }
    }
    part = subgroupAdd(part);
    if sgi == 0u {
        part_s[sgid] = part;
    }
    workgroupBarrier();
    if li != 0u {
        return;
    }
    var sum_all = 0.0;
    for (var g = 0u; g < nsg; g++) {
        sum_all += part_s[g];
    }
    write_route(tok, chosen, chosen_v, sum_all);
}
