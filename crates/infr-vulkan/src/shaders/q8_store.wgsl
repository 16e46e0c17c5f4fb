// The int8 store of q8_block.wgsl (its header describes it): Q and QS bindings of the
// including shader.

var<workgroup> sum_t: array<i32, QWG>;

// Quantize v into Q[word] and the block's scale and sums into QS (see above).
fn quant_vec4(u: u32, v: vec4<f32>, valid: bool, word: u32, group: u32, scale_off: u32, sgs: u32) {
    let ds = quant_scale(u, v, group, sgs);
    var d = ds.x;
    let id = ds.y;
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
