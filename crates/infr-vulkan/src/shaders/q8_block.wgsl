// Int8 quantization of activations for the integer-dot matrix-vector kernels, shared by every
// kernel that produces their input. Each invocation holds one vec4 of a row; eight
// consecutive invocations make a block of 32, 64 make a group of eight blocks. With group 1
// each block gets its own f16 scale (`quantize_row_q8_0_ref`); with group 8 the eight blocks
// share one f32 scale (`quantize_row_q8_K_ref`, llama.cpp's activations for k-quants).
// `quant_scale` finds the scale; `quant_vec4` (q8_store.wgsl) writes the packed int8 word
// Q[word] and, per block, QS[scale_off + word / 8] = vec4(d, Σq of the first 16, Σq of the
// last 16, 0) with x ≈ d * q; `round16_vec4` (q8_round16.wgsl) writes d * q as f16 instead.
// The including shader declares the Q and QS bindings and `QWG`, its workgroup size (a
// multiple of 64 and of the subgroup size), and gives each invocation the vec4 of index
// `u = subgroup_id * subgroup_size + subgroup_invocation_id` (so a block's invocations are
// neighbouring lanes of one subgroup, or whole subgroups); call in uniform control flow.

var<workgroup> amax_t: array<f32, QWG>;

// The invocation's index as its subgroup numbering gives it.
fn lane_index(sgid: u32, sgs: u32, sgi: u32) -> u32 {
    return sgid * sgs + sgi;
}

// The scale d of the block (group 1) or group of eight blocks (group 8) holding this
// invocation's vec4 v, and the factor 1/d quantizing by (quantize_row_q8_0_ref's /
// quantize_row_q8_K_ref's order of operations; 0 for an all-zero span).
fn quant_scale(u: u32, v: vec4<f32>, group: u32, sgs: u32) -> vec2<f32> {
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
    return vec2<f32>(d, id);
}
