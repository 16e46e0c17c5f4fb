// Int8 quantization of activations for the integer-dot matrix-vector kernels, shared by every
// kernel that produces their input. Each invocation holds one vec4 of a row; eight
// consecutive invocations make a block of 32, 64 make a group of eight blocks. With group 1
// each block gets its own f16 scale (`quantize_row_q8_0_ref`); with group 8 the eight blocks
// share one f32 scale (`quantize_row_q8_K_ref`, llama.cpp's activations for k-quants).
// Writes the packed int8 word Q[word] and, per block, QS[scale_off + word / 8] =
// vec4(d, Σq of the first 16, Σq of the last 16, 0) with x ≈ d * q.
// The including shader declares the Q and QS bindings and `QWG`, its workgroup size (a
// multiple of 64 and of the subgroup size), and gives each invocation the vec4 of index
// `u = subgroup_id * subgroup_size + subgroup_invocation_id` (so a block's invocations are
// neighbouring lanes of one subgroup, or whole subgroups); call in uniform control flow.

var<workgroup> amax_t: array<f32, QWG>;
var<workgroup> sum_t: array<i32, QWG>;

// The invocation's index as its subgroup numbering gives it.
fn lane_index(sgid: u32, sgs: u32, sgi: u32) -> u32 {
    return sgid * sgs + sgi;
}

fn quant_vec4(u: u32, v: vec4<f32>, valid: bool, word: u32, group: u32, scale_off: u32, sgs: u32) {
    let a = abs(v);
    var amax = max(max(a.x, a.y), max(a.z, a.w));
    // Max over this invocation's block (group 1: 8 lanes) or its group of eight blocks (64):
    // butterfly within the subgroup, then across the subgroups a span covers.
    var span = 8u;
    if group > 1u {
        span = 64u;
    }
    for (var o = 1u; o < min(span, sgs); o <<= 1u) {
        amax = max(amax, subgroupShuffleXor(amax, o));
    }
    if span > sgs {
        amax_t[u] = amax;
        workgroupBarrier();
        let first = u - u % span;
        for (var i = first; i < first + span; i += sgs) {
            amax = max(amax, amax_t[i]);
        }
    }
    var d = div_rn(amax, 127.0);
    var id = 0.0;
    if group > 1u && amax > 0.0 {
        // quantize_row_q8_K_ref's order of operations.
        id = div_rn(127.0, amax);
        d = div_rn(1.0, id);
    } else if d > 0.0 {
        id = div_rn(1.0, d);
    }
    let q = vec4<i32>(round(v * id));
    if valid {
        Q[word] = (u32(q.x) & 0xffu) | ((u32(q.y) & 0xffu) << 8u) | ((u32(q.z) & 0xffu) << 16u) | ((u32(q.w) & 0xffu) << 24u);
    }
    sum_t[u] = q.x + q.y + q.z + q.w;
    workgroupBarrier();
    if valid && u % 8u == 0u {
        let s0 = sum_t[u] + sum_t[u + 1u] + sum_t[u + 2u] + sum_t[u + 3u];
        let s1 = sum_t[u + 4u] + sum_t[u + 5u] + sum_t[u + 6u] + sum_t[u + 7u];
        // Q8_0 / Q8_1 keep their scale as f16 (quantize_row_q8_0_ref); Q8_K keeps f32.
        if group == 1u {
            d = round_f16(d);
        }
        QS[scale_off + word / 8u] = vec4<f32>(d, f32(s0), f32(s1), 0.0);
    }
    // The next call may overwrite amax_t / sum_t.
    workgroupBarrier();
}
