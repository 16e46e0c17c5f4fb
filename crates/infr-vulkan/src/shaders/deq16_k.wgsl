// Sixteen consecutive elements of a Q4_K or Q6_K super-block as f16, for the kernels that
// stage f16 weights (coop_load_quant.wgsl, dequant_f16.wgsl). A unit is first read as raw
// words (`Raw*`: what the memory holds, no arithmetic on it) and opened into f16 later
// (`open_*`): the cooperative matmul keeps the raw words of the next k-steps in flight while it
// multiplies the current one, where dequantizing next to the load would wait for it there.
// The `deq16_*` forms read and open at once through `wload` (from the kernel).

// Q4_K elements 16j..16j+15 of a super-block: quant words of the 32-byte chunk holding them
// (low nibbles for even groups g, high for odd), the scale plane's four words (d and dmin,
// then the 12 packed scale bytes) and the group g = j / 2.
struct RawQ4K {
    q: vec4<u32>,
    s: vec4<u32>,
    g: u32,
}

// The quant word of element e0 (a multiple of 16) of a Q4_K block at quant word qb.
fn q4k_word(qb: u32, e0: u32) -> u32 {
    return qb + 8u * (e0 >> 6u) + ((e0 & 31u) >> 2u);
}

// dequantize_row_q4_K for one unit: d·scale·q − dmin·min of its group.
fn open_q4_k(v: RawQ4K) -> array<vec4<f16>, 4> {
    let sm = kscale_min(v.s.yzw, v.g);
    let dd = unpack2x16float(v.s.x);
    let d1 = dd.x * sm.x;
    let m1 = dd.y * sm.y;
    let sh = 4u * (v.g & 1u);
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        out[q] = vec4<f16>(d1 * nib4(v.q[q], sh) - m1);
    }
    return out;
}

// Q4_K elements e0..e0+15 of a super-block (e0 a multiple of 16; the scale plane at byte sb,
// a multiple of 4).
fn deq16_q4_k(qb: u32, sb: u32, e0: u32) -> array<vec4<f16>, 4> {
    let w0 = q4k_word(qb, e0);
    let sw = sb >> 2u;
    let q = vec4<u32>(wload(w0), wload(w0 + 1u), wload(w0 + 2u), wload(w0 + 3u));
    let s = vec4<u32>(wload(sw), wload(sw + 1u), wload(sw + 2u), wload(sw + 3u));
    return open_q4_k(RawQ4K(q, s, e0 >> 5u));
}

// Q6_K elements e0..e0+15: four words of low nibbles (ql) and four of high crumbs (qh), the
// words holding the unit's signed scale byte and the block's d, and where in those words the
// unit's fields sit (bytes of `sh`: ql shift, qh shift, scale shift, d shift).
struct RawQ6K {
    lo: vec4<u32>,
    hi: vec4<u32>,
    sc: u32,
    d: u32,
    sh: u32,
}

// Word offsets of a Q6_K unit's fields (quant plane at word qb, scale plane at byte sb):
// ql word, qh word, scale word, d word, and the packed shifts of `RawQ6K::sh`.
fn q6k_where(qb: u32, sb: u32, e0: u32) -> array<u32, 5> {
    let n = e0 >> 7u;
    let t = (e0 & 127u) >> 5u;
    let l = e0 & 31u;
    let so = sb + 8u * n + (l >> 4u) + 2u * t;
    let dof = sb + 16u;
    let sh = (4u * (t >> 1u)) | ((2u * t) << 8u) | (((so & 3u) * 8u) << 16u) | (((dof & 2u) * 8u) << 24u);
    return array<u32, 5>(qb + (64u * n + 32u * (t & 1u) + l) / 4u, qb + 32u + (32u * n + l) / 4u, so >> 2u, dof >> 2u, sh);
}

// dequantize_row_q6_K for one unit: d·scale·(q − 32).
fn open_q6_k(v: RawQ6K) -> array<vec4<f16>, 4> {
    let sc = f32(i32((v.sc >> ((v.sh >> 16u) & 0xffu)) << 24u) >> 24u);
    let ds = unpack2x16float(v.d >> (v.sh >> 24u)).x * sc;
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        let lo = nib4(v.lo[q], v.sh & 0xffu);
        let hi = crumb4(v.hi[q], (v.sh >> 8u) & 0xffu);
        out[q] = vec4<f16>(ds * (lo + 16.0 * hi - 32.0));
    }
    return out;
}

// Q6_K elements e0..e0+15 of a super-block (e0 a multiple of 16).
fn deq16_q6_k(qb: u32, sb: u32, e0: u32) -> array<vec4<f16>, 4> {
    let a = q6k_where(qb, sb, e0);
    let lo = vec4<u32>(wload(a[0]), wload(a[0] + 1u), wload(a[0] + 2u), wload(a[0] + 3u));
    let hi = vec4<u32>(wload(a[1]), wload(a[1] + 1u), wload(a[1] + 2u), wload(a[1] + 3u));
    return open_q6_k(RawQ6K(lo, hi, wload(a[2]), wload(a[3]), a[4]));
}

// Q4_K elements e0..e0+7 of a super-block (e0 a multiple of 8), for the striped f16
// dequantization: two quant words and the group's scale and minimum.
fn deq8_q4_k(qb: u32, sb: u32, e0: u32) -> array<vec4<f16>, 2> {
    let w0 = q4k_word(qb, e0);
    let sw = sb >> 2u;
    let s = vec4<u32>(wload(sw), wload(sw + 1u), wload(sw + 2u), wload(sw + 3u));
    let g = e0 >> 5u;
    let sm = kscale_min(s.yzw, g);
    let dd = unpack2x16float(s.x);
    let d1 = dd.x * sm.x;
    let m1 = dd.y * sm.y;
    let sh = 4u * (g & 1u);
    return array<vec4<f16>, 2>(vec4<f16>(d1 * nib4(wload(w0), sh) - m1), vec4<f16>(d1 * nib4(wload(w0 + 1u), sh) - m1));
}

// Q6_K elements e0..e0+7 (e0 a multiple of 8): half of the 16-element unit holding them.
fn deq8_q6_k(qb: u32, sb: u32, e0: u32) -> array<vec4<f16>, 2> {
    let a = q6k_where(qb, sb, e0 & ~15u);
    let half = 2u * ((e0 >> 3u) & 1u);
    let sc = f32(i32((wload(a[2]) >> ((a[4] >> 16u) & 0xffu)) << 24u) >> 24u);
    let ds = unpack2x16float(wload(a[3]) >> (a[4] >> 24u)).x * sc;
    var out: array<vec4<f16>, 2>;
    for (var q = 0u; q < 2u; q++) {
        let lo = nib4(wload(a[0] + half + q), a[4] & 0xffu);
        let hi = crumb4(wload(a[1] + half + q), (a[4] >> 8u) & 0xffu);
        out[q] = vec4<f16>(ds * (lo + 16.0 * hi - 32.0));
    }
    return out;
}
