// The k largest values of each output row with their indices, best first (ties: the lower
// index first; NaN counts as -inf), for sampling on the device: only the candidates are read
// back. Two passes of one kernel: pass 1 keeps the k best of every E·WG-element chunk of a
// logits row, pass 2 the k best of a row's chunk winners. A workgroup takes its k winners in
// k rounds of a workgroup-wide arg-max (subgroup max, then the smallest index among equals).
// Candidates are (value bits, index) pairs.

struct Params {
    // Inputs per row: the row width (pass 1) or the chunk winners (pass 2).
    n_in: u32,
    n_rows: u32,
    k: u32,
    // Workgroups per row (pass 1: chunks; pass 2: 1).
    parts: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> XC: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> OUT: array<vec2<u32>>;

const WG: u32 = 256u;
const E: u32 = {{E}}u;
const NONE: u32 = 0xffffffffu;

var<workgroup> best_v: array<f32, 64>;
var<workgroup> best_i: array<u32, 64>;

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

fn better(av: f32, ai: u32, bv: f32, bi: u32) -> bool {
    return av > bv || (av == bv && ai < bi);
}

// Input `i` of row `row` as (value, index).
fn load(row: u32, i: u32) -> vec2<u32> {
{{LOAD}}
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(num_subgroups) nsg: u32) {
    let lin = wg_linear(wid, nwg);
    let row = lin / pc.parts;
    if row >= pc.n_rows {
        return;
    }
    let part = lin % pc.parts;
    let base = part * E * WG;
    var vals: array<f32, E>;
    var idx: array<u32, E>;
    for (var e = 0u; e < E; e++) {
        let i = base + t + e * WG;
        vals[e] = neg_inf();
        idx[e] = NONE;
        if i < pc.n_in {
            let c = load(row, i);
            let v = bitcast<f32>(c.x);
            if v == v {
                vals[e] = v;
            }
            idx[e] = c.y;
        }
    }
    for (var r = 0u; r < pc.k; r++) {
        var lv = neg_inf();
        var li = NONE;
        var le = E;
        for (var e = 0u; e < E; e++) {
            if better(vals[e], idx[e], lv, li) {
                lv = vals[e];
                li = idx[e];
                le = e;
            }
        }
        let mv = subgroupMax(lv);
        let mi = subgroupMin(select(NONE, li, lv == mv));
        if sgi == 0u {
            best_v[sgid] = mv;
            best_i[sgid] = mi;
        }
        workgroupBarrier();
        var gv = best_v[0];
        var gi = best_i[0];
        for (var s = 1u; s < nsg; s++) {
            if better(best_v[s], best_i[s], gv, gi) {
                gv = best_v[s];
                gi = best_i[s];
            }
        }
        workgroupBarrier();
        if t == 0u {
            OUT[lin * pc.k + r] = vec2<u32>(bitcast<u32>(gv), gi);
        }
        if le < E && li == gi && gi != NONE {
            vals[le] = neg_inf();
            idx[le] = NONE;
        }
    }
}
