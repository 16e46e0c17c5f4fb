// Dequantizers of the repacked weight layout (see repack.rs): `deq4_<type>(qb, sb, i)` returns
// elements 4i..4i+3 of one block, where `qb` is the word offset of the block's quant data and
// `sb` the byte offset of its scale data. `wload(word) -> u32` comes from weight_io.wgsl
// or, where the weight is bound otherwise, from the kernel.

fn sbyte(sb: u32, b: u32) -> u32 {
    let o = sb + b;
    return (wload(o >> 2u) >> ((o & 3u) * 8u)) & 0xffu;
}

// An f16 at an even byte offset of the scale plane.
fn sf16(sb: u32, b: u32) -> f32 {
    let o = sb + b;
    return unpack2x16float(wload(o >> 2u) >> ((o & 2u) * 8u)).x;
}

// The four nibbles at `shift` (0 or 4) of the four bytes of `w`.
fn nib4(w: u32, shift: u32) -> vec4<f32> {
    let v = (w >> shift) & 0x0f0f0f0fu;
    return vec4<f32>(f32(v & 0xffu), f32((v >> 8u) & 0xffu), f32((v >> 16u) & 0xffu), f32(v >> 24u));
}

// Two-bit fields at `shift` of the four bytes of `w`.
fn crumb4(w: u32, shift: u32) -> vec4<f32> {
    let v = (w >> shift) & 0x03030303u;
    return vec4<f32>(f32(v & 0xffu), f32((v >> 8u) & 0xffu), f32((v >> 16u) & 0xffu), f32(v >> 24u));
}

// The four signed bytes of `w`.
fn sbytes4(w: u32) -> vec4<f32> {
    let i = bitcast<i32>(w);
    return vec4<f32>(f32((i << 24u) >> 24u), f32((i << 16u) >> 24u), f32((i << 8u) >> 24u), f32(i >> 24u));
}

// Bit `bit` of each byte of `w`, as 0.0 / 1.0.
fn bits4(w: u32, bit: u32) -> vec4<f32> {
    let v = (w >> bit) & 0x01010101u;
    return vec4<f32>(f32(v & 0xffu), f32((v >> 8u) & 0xffu), f32((v >> 16u) & 0xffu), f32(v >> 24u));
}

fn deq4_f32(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(wload(qb)), bitcast<f32>(wload(qb + 1u)), bitcast<f32>(wload(qb + 2u)), bitcast<f32>(wload(qb + 3u)));
}

fn deq4_f16(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(wload(qb)), unpack2x16float(wload(qb + 1u)));
}

fn deq4_bf16(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let a = wload(qb);
    let b = wload(qb + 1u);
    return vec4<f32>(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xffff0000u), bitcast<f32>(b << 16u), bitcast<f32>(b & 0xffff0000u));
}

// Low nibbles for elements 0..15, high nibbles for 16..31 (Q4_0, Q4_1, IQ4_NL, MXFP4).
fn q4_legacy_nibbles(qb: u32, i: u32) -> vec4<f32> {
    return nib4(wload(qb + (i & 3u)), (i >> 2u) * 4u);
}

fn deq4_q4_0(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return (q4_legacy_nibbles(qb, i) - 8.0) * sf16(sb, 0u);
}

fn deq4_q4_1(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return q4_legacy_nibbles(qb, i) * sf16(sb, 0u) + sf16(sb, 2u);
}

// Q5: word 0 holds the fifth bits (bit e of element e), words 1..4 the nibbles.
fn q5_quants(qb: u32, i: u32) -> vec4<f32> {
    let lo = nib4(wload(qb + 1u + (i & 3u)), (i >> 2u) * 4u);
    let h = (wload(qb) >> (4u * i)) & 0xfu;
    let hv = vec4<f32>(f32(h & 1u), f32((h >> 1u) & 1u), f32((h >> 2u) & 1u), f32(h >> 3u));
    return lo + hv * 16.0;
}

fn deq4_q5_0(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return (q5_quants(qb, i) - 16.0) * sf16(sb, 0u);
}

fn deq4_q5_1(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return q5_quants(qb, i) * sf16(sb, 0u) + sf16(sb, 2u);
}

fn deq4_q8_0(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return sbytes4(wload(qb + i)) * sf16(sb, 0u);
}

// scales[16] at 0, d at 16, dmin at 18; quants: 32 bytes per 128 elements, 2 bits per group of 32.
fn deq4_q2_k(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let n = e >> 7u;
    let j = (e & 127u) >> 5u;
    let l = e & 31u;
    let sc = sbyte(sb, e >> 4u);
    let dl = sf16(sb, 16u) * f32(sc & 0xfu);
    let ml = sf16(sb, 18u) * f32(sc >> 4u);
    return dl * crumb4(wload(qb + 8u * n + (l >> 2u)), 2u * j) - ml;
}

// quants: hmask (words 0..7) then qs (words 8..23); scales: 12 packed bytes, d at 12.
fn deq4_q3_k(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let n = e >> 7u;
    let j = (e & 127u) >> 5u;
    let l = e & 31u;
    let s = e >> 4u;
    let lo = (sbyte(sb, s & 7u) >> (4u * (s >> 3u))) & 0xfu;
    let hi = (sbyte(sb, 8u + (s & 3u)) >> (2u * (s >> 2u))) & 3u;
    let dl = sf16(sb, 12u) * f32(i32(lo | (hi << 4u)) - 32);
    let q = crumb4(wload(qb + 8u + 8u * n + (l >> 2u)), 2u * j);
    let h = bits4(wload(qb + (l >> 2u)), 4u * n + j);
    return dl * (q - 4.0 + 4.0 * h);
}

// Byte j of the 12 packed Q4_K/Q5_K scale bytes held in three words.
fn kbyte(s: vec3<u32>, j: u32) -> u32 {
    return (s[j >> 2u] >> ((j & 3u) * 8u)) & 0xffu;
}

// get_scale_min_k4 over those bytes.
fn kscale_min(s: vec3<u32>, j: u32) -> vec2<f32> {
    if j < 4u {
        return vec2<f32>(f32(kbyte(s, j) & 63u), f32(kbyte(s, j + 4u) & 63u));
    }
    let a = kbyte(s, j + 4u);
    return vec2<f32>(f32((a & 0xfu) | ((kbyte(s, j - 4u) >> 6u) << 4u)), f32((a >> 4u) | ((kbyte(s, j) >> 6u) << 4u)));
}

// get_scale_min_k4 over the 12 scale bytes at `sb + 4`.
fn scale_min_k4(sb: u32, j: u32) -> vec2<f32> {
    if j < 4u {
        return vec2<f32>(f32(sbyte(sb, 4u + j) & 63u), f32(sbyte(sb, 8u + j) & 63u));
    }
    let a = sbyte(sb, 8u + j);
    return vec2<f32>(f32((a & 0xfu) | ((sbyte(sb, j) >> 6u) << 4u)), f32((a >> 4u) | ((sbyte(sb, 4u + j) >> 6u) << 4u)));
}

// d at 0, dmin at 2, scales at 4; quants: 32 bytes per 64 elements (low nibbles, then high).
fn deq4_q4_k(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let g = e >> 5u;
    let sm = scale_min_k4(sb, g);
    let d1 = sf16(sb, 0u) * sm.x;
    let m1 = sf16(sb, 2u) * sm.y;
    let q = nib4(wload(qb + 8u * (e >> 6u) + ((e & 31u) >> 2u)), 4u * (g & 1u));
    return d1 * q - m1;
}

// As Q4_K; quants: qh (words 0..7, bit g of byte l) then the nibbles (words 8..39).
fn deq4_q5_k(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let g = e >> 5u;
    let l = e & 31u;
    let sm = scale_min_k4(sb, g);
    let d1 = sf16(sb, 0u) * sm.x;
    let m1 = sf16(sb, 2u) * sm.y;
    let q = nib4(wload(qb + 8u + 8u * (e >> 6u) + (l >> 2u)), 4u * (g & 1u)) + 16.0 * bits4(wload(qb + (l >> 2u)), g);
    return d1 * q - m1;
}

// quants: ql (words 0..31) then qh (words 32..47); scales: 16 signed bytes, d at 16.
fn deq4_q6_k(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let n = e >> 7u;
    let r = e & 127u;
    let t = r >> 5u;
    let l = r & 31u;
    let lo = nib4(wload(qb + (64u * n + 32u * (t & 1u) + l) / 4u), 4u * (t >> 1u));
    let hi = crumb4(wload(qb + 32u + (32u * n + l) / 4u), 2u * t);
    let sc = f32(i32(sbyte(sb, 8u * n + (l >> 4u) + 2u * t) << 24u) >> 24u);
    let ds = sf16(sb, 16u) * sc;
    return ds * (lo + 16.0 * hi - 32.0);
}

// Ternary, five trits per byte: trit n of byte q is ((q * 3^n mod 256) * 3) >> 8.
fn deq4_tq1_0(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    var word: u32;
    var n: u32;
    if e < 160u {
        n = e >> 5u;
        word = (e & 31u) >> 2u;
    } else if e < 240u {
        n = (e - 160u) >> 4u;
        word = 8u + ((e - 160u) & 15u) / 4u;
    } else {
        n = (e - 240u) >> 2u;
        word = 12u;
    }
    var p = 1u;
    for (var k = 0u; k < n; k++) {
        p *= 3u;
    }
    let w = wload(qb + word);
    var out: vec4<f32>;
    for (var k = 0u; k < 4u; k++) {
        let q = (((w >> (8u * k)) & 0xffu) * p) & 0xffu;
        out[k] = f32(i32((q * 3u) >> 8u) - 1);
    }
    return out * sf16(sb, 0u);
}

fn deq4_tq2_0(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let j = e >> 7u;
    let l = (e & 127u) >> 5u;
    let m = e & 31u;
    return (crumb4(wload(qb + 8u * j + (m >> 2u)), 2u * l) - 1.0) * sf16(sb, 0u);
}

// Magnitude of E2M1 code c, doubled (0, 1, 2, 3, 4, 6, 8, 12: kvalues_mxfp4).
fn e2m1x2_abs(c: u32) -> u32 {
    let mag = c & 7u;
    if mag < 4u {
        return mag;
    }
    return (2u + (mag & 1u)) << ((mag >> 1u) - 1u);
}

// E2M1 code → value doubled (kvalues_mxfp4).
fn e2m1x2(c: u32) -> f32 {
    let v = f32(e2m1x2_abs(c));
    return select(v, -v, (c & 8u) != 0u);
}

// E8M0 scale byte x, halved (2^(x - 128), as the doubled E2M1 values need).
fn e8m0_half(x: u32) -> f32 {
    if x < 2u {
        return bitcast<f32>(0x00200000u << x);
    }
    return bitcast<f32>((x - 1u) << 23u);
}

fn e2m1x2_4(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(e2m1x2((w >> shift) & 0xfu), e2m1x2((w >> (shift + 8u)) & 0xfu), e2m1x2((w >> (shift + 16u)) & 0xfu), e2m1x2((w >> (shift + 24u)) & 0xfu));
}

fn pow2(e: i32) -> f32 {
    return bitcast<f32>(u32(e + 127) << 23u);
}

fn deq4_mxfp4(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return e2m1x2_4(wload(qb + (i & 3u)), (i >> 2u) * 4u) * e8m0_half(sbyte(sb, 0u));
}

// UE4M3 scale, halved (ggml_ue4m3_to_fp32 * 0.5).
fn ue4m3_half(x: u32) -> f32 {
    if x == 0u || x == 0x7fu {
        return 0.0;
    }
    let ex = i32((x >> 3u) & 0xfu);
    let man = f32(x & 7u);
    var raw: f32;
    if ex == 0 {
        raw = man * pow2(-9);
    } else {
        raw = (1.0 + man / 8.0) * pow2(ex - 7);
    }
    return raw * 0.5;
}

// Four sub-blocks of 16 (8 bytes each, low nibbles then high), one UE4M3 scale each.
fn deq4_nvfp4(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let s = i >> 2u;
    let jj = (i & 3u) * 4u;
    let d = ue4m3_half(sbyte(sb, s));
    return e2m1x2_4(wload(qb + 2u * s + ((jj & 7u) >> 2u)), (jj >> 3u) * 4u) * d;
}

fn deq4_q1_0(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let b = (wload(qb + (e >> 5u)) >> (e & 31u)) & 0xfu;
    let d = sf16(sb, 0u);
    let v = vec4<f32>(f32(b & 1u), f32((b >> 1u) & 1u), f32((b >> 2u) & 1u), f32(b >> 3u));
    return (v * 2.0 - 1.0) * d;
}

fn deq4_q2_0(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let b = (wload(qb + (i >> 2u)) >> (8u * (i & 3u))) & 0xffu;
    let v = vec4<f32>(f32(b & 3u), f32((b >> 2u) & 3u), f32((b >> 4u) & 3u), f32(b >> 6u));
    return (v - 1.0) * sf16(sb, 0u);
}
