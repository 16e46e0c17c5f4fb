// Sixteen consecutive elements of a Q4_K or Q6_K super-block as f16, for the kernels that
// stage f16 weights (coop_load_quant.wgsl, dequant_f16.wgsl); they provide `wload`.

// Q4_K elements e0..e0+15 of a super-block (e0 a multiple of 16): one scale/min pair.
fn deq16_q4_k(qb: u32, sb: u32, e0: u32) -> array<vec4<f16>, 4> {
    let g = e0 >> 5u;
    let sm = scale_min_k4(sb, g);
    let dd = unpack2x16float(wload(sb >> 2u));
    let d1 = dd.x * sm.x;
    let m1 = dd.y * sm.y;
    let w0 = qb + 8u * (e0 >> 6u) + ((e0 & 31u) >> 2u);
    let sh = 4u * (g & 1u);
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        out[q] = vec4<f16>(d1 * nib4(wload(w0 + q), sh) - m1);
    }
    return out;
}

// Q6_K elements e0..e0+15 of a super-block (e0 a multiple of 16): one scale.
fn deq16_q6_k(qb: u32, sb: u32, e0: u32) -> array<vec4<f16>, 4> {
    let n = e0 >> 7u;
    let t = (e0 & 127u) >> 5u;
    let l = e0 & 31u;
    let sc = f32(i32(sbyte(sb, 8u * n + (l >> 4u) + 2u * t) << 24u) >> 24u);
    let ds = sf16(sb, 16u) * sc;
    let lw = qb + (64u * n + 32u * (t & 1u) + l) / 4u;
    let hw = qb + 32u + (32u * n + l) / 4u;
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        let lo = nib4(wload(lw + q), 4u * (t >> 1u));
        let hi = crumb4(wload(hw + q), 2u * t);
        out[q] = vec4<f16>(ds * (lo + 16.0 * hi - 32.0));
    }
    return out;
}

