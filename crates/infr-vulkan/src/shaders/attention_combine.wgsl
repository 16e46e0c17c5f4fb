// Merge the per-split partials of `attention.wgsl`: out = Σ acc_s e^(m_s - M) / Σ l_s e^(m_s - M)
// over the splits that had keys (a row whose keys fit one split was written directly). A
// workgroup per row: each split's (m, l) and weight e^(m_s - M) staged in workgroup memory,
// then four sets of 64 invocations each sum every fourth split's outputs, the sets' sums added
// at the end (a quarter of the serial reads of one set over all splits).

struct Params {
    n_rows: u32,
    dv: u32,
    n_split: u32,
    n_head: u32,
    window: u32,
    pos_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> PART: array<f32>;
@group(0) @binding(1) var<storage, read_write> O: array<f32>;
@group(0) @binding(2) var<storage, read> S: array<u32>;

const WG: u32 = 256u;
const SETS: u32 = WG / 64u;
// Most splits a row has (`attn_kernels::MAX_ATTENTION_SPLITS`).
const MAX_SPLITS: u32 = 256u;
// Output dims per block (`attn_kernels::ATTN_COMBINE_MAX_DV`).
const MAX_DV: u32 = {{MAX_DV}}u;

var<workgroup> split_m: array<f32, MAX_SPLITS>;
var<workgroup> split_w: array<f32, MAX_SPLITS>;
var<workgroup> set_o: array<f32, {{SET_O}}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg_linear(wid, nwg);
    if row >= pc.n_rows {
        return;
    }
    let pos = S[pc.pos_off + row / pc.n_head];
    let keys = attn_keys(pos, S[pc.pos_off], S[pc.pos_off + pc.n_rows / pc.n_head - 1u], pc.window);
    let n_active = attn_splits_used(keys.y - keys.x, pc.n_split);
    if n_active <= 1u {
        return;
    }
    let stride = pc.dv + 2u;
    let base = row * pc.n_split * stride;
    for (var s = t; s < n_active; s += WG) {
        split_m[s] = PART[base + s * stride];
        split_w[s] = PART[base + s * stride + 1u];
    }
    workgroupBarrier();
    var mx = -1e30;
    for (var s = 0u; s < n_active; s++) {
        mx = max(mx, split_m[s]);
    }
    var l = 0.0;
    for (var s = 0u; s < n_active; s++) {
        l += split_w[s] * exp(split_m[s] - mx);
    }
    workgroupBarrier();
    // The splits' weights e^(m_s - M) replace their sums.
    for (var s = t; s < n_active; s += WG) {
        split_w[s] = exp(split_m[s] - mx);
    }
    workgroupBarrier();
    let set_i = t / 64u;
    let inv = 1.0 / l;
    // Blocks of MAX_DV dims (one for every head dim up to it).
    for (var d0 = 0u; d0 < pc.dv; d0 += MAX_DV) {
        let dn = min(MAX_DV, pc.dv - d0);
        for (var d = t % 64u; d < dn; d += 64u) {
            var a = 0.0;
            for (var s = set_i; s < n_active; s += SETS) {
                a += PART[base + s * stride + 2u + d0 + d] * split_w[s];
            }
            set_o[set_i * MAX_DV + d] = a;
        }
        workgroupBarrier();
        for (var d = t; d < dn; d += WG) {
            var a = 0.0;
            for (var k = 0u; k < SETS; k++) {
                a += set_o[k * MAX_DV + d];
            }
            O[row * pc.dv + d0 + d] = a * inv;
        }
        workgroupBarrier();
    }
}
