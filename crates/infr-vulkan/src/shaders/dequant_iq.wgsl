// i-quant dequantizers. Grids and sign tables live in the table buffer (`tload(word)`), at
// the word offsets templated below (see tables.rs).

const T_IQ2XXS: u32 = {{T_IQ2XXS}};
const T_IQ2XS: u32 = {{T_IQ2XS}};
const T_IQ2S: u32 = {{T_IQ2S}};
const T_IQ3XXS: u32 = {{T_IQ3XXS}};
const T_IQ3S: u32 = {{T_IQ3S}};
const T_IQ1S: u32 = {{T_IQ1S}};
const T_KSIGNS: u32 = {{T_KSIGNS}};
const T_IQ4NL: u32 = {{T_IQ4NL}};

// Byte `b` of the quant plane of a block.
fn qbyte(qb: u32, b: u32) -> u32 {
    return (wload(qb + (b >> 2u)) >> ((b & 3u) * 8u)) & 0xffu;
}

// Halfword `h` of the quant plane of a block.
fn qhalf(qb: u32, h: u32) -> u32 {
    return (wload(qb + (h >> 1u)) >> ((h & 1u) * 16u)) & 0xffffu;
}

fn tbyte(base: u32, i: u32) -> u32 {
    return (tload(base + (i >> 2u)) >> ((i & 3u) * 8u)) & 0xffu;
}

// ±1 for sign bits `first..first+3` of `signs` (set = negative).
fn signs4(signs: u32, first: u32) -> vec4<f32> {
    let s = (signs >> first) & 0xfu;
    return vec4<f32>(1.0) - 2.0 * vec4<f32>(f32(s & 1u), f32((s >> 1u) & 1u), f32((s >> 2u) & 1u), f32(s >> 3u));
}

// Unsigned bytes of a grid word.
fn ubytes4(w: u32) -> vec4<f32> {
    return vec4<f32>(f32(w & 0xffu), f32((w >> 8u) & 0xffu), f32((w >> 16u) & 0xffu), f32(w >> 24u));
}

fn ksigns(i: u32) -> u32 {
    return tbyte(T_KSIGNS, i);
}

fn iq4nl_value(q: u32) -> f32 {
    return f32(i32(tbyte(T_IQ4NL, q) << 24u) >> 24u);
}

// e = 4i: group of 32 `ib`, group of 8 `l`, half `hf` of it.
fn deq4_iq2_xxs(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let ib = e >> 5u;
    let l = (e & 31u) >> 3u;
    let hf = (e & 7u) >> 2u;
    let aux1 = wload(qb + 2u * ib + 1u);
    let db = sf16(sb, 0u) * (0.5 + f32(aux1 >> 28u)) * 0.25;
    let idx = qbyte(qb, 8u * ib + l);
    let grid = ubytes4(tload(T_IQ2XXS + 2u * idx + hf));
    let signs = ksigns((aux1 >> (7u * l)) & 127u);
    return db * grid * signs4(signs, 4u * hf);
}

fn deq4_iq2_xs(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let ib = e >> 5u;
    let l = (e & 31u) >> 3u;
    let hf = (e & 7u) >> 2u;
    let sc = (sbyte(sb, 2u + ib) >> (4u * (l >> 1u))) & 0xfu;
    let db = sf16(sb, 0u) * (0.5 + f32(sc)) * 0.25;
    let q = qhalf(qb, 4u * ib + l);
    let grid = ubytes4(tload(T_IQ2XS + 2u * (q & 511u) + hf));
    return db * grid * signs4(ksigns(q >> 9u), 4u * hf);
}

fn deq4_iq2_s(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let ib = e >> 5u;
    let l = (e & 31u) >> 3u;
    let hf = (e & 7u) >> 2u;
    let sc = (sbyte(sb, 2u + ib) >> (4u * (l >> 1u))) & 0xfu;
    let db = sf16(sb, 0u) * (0.5 + f32(sc)) * 0.25;
    let qh = qbyte(qb, 64u + ib);
    let idx = qbyte(qb, 4u * ib + l) | ((qh << (8u - 2u * l)) & 0x300u);
    let grid = ubytes4(tload(T_IQ2S + 2u * idx + hf));
    return db * grid * signs4(qbyte(qb, 32u + 4u * ib + l), 4u * hf);
}

fn deq4_iq3_xxs(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let ib = e >> 5u;
    let l = (e & 31u) >> 3u;
    let hf = (e & 7u) >> 2u;
    let aux = wload(qb + 16u + ib);
    let db = sf16(sb, 0u) * (0.5 + f32(aux >> 28u)) * 0.5;
    let grid = ubytes4(tload(T_IQ3XXS + qbyte(qb, 8u * ib + 2u * l + hf)));
    return db * grid * signs4(ksigns((aux >> (7u * l)) & 127u), 4u * hf);
}

// quants: qs (bytes 0..63), qh (64..71), signs (72..103); scales: d at 0, 4 bytes at 2.
fn deq4_iq3_s(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let k = e >> 6u;
    let h = (e & 63u) >> 5u;
    let l = (e & 31u) >> 3u;
    let hf = (e & 7u) >> 2u;
    let sc = (sbyte(sb, 2u + k) >> (4u * h)) & 0xfu;
    let db = sf16(sb, 0u) * f32(1u + 2u * sc);
    let hb = qbyte(qb, 64u + 2u * k + h);
    let idx = qbyte(qb, 16u * k + 8u * h + 2u * l + hf) | ((hb << (8u - 2u * l - hf)) & 256u);
    let grid = ubytes4(tload(T_IQ3S + idx));
    return db * grid * signs4(qbyte(qb, 72u + 8u * k + 4u * h + l), 4u * hf);
}

fn iq1_grid4(idx: u32, hf: u32) -> vec4<f32> {
    return sbytes4(tload(T_IQ1S + 2u * idx + hf));
}

// quants: qs (bytes 0..31), qh u16[8] (bytes 32..47); scales: d.
fn deq4_iq1_s(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let ib = e >> 5u;
    let l = (e & 31u) >> 3u;
    let hf = (e & 7u) >> 2u;
    let qh = qhalf(qb, 16u + ib);
    let dl = sf16(sb, 0u) * f32(2u * ((qh >> 12u) & 7u) + 1u);
    let delta = select(0.125, -0.125, (qh & 0x8000u) != 0u);
    let idx = qbyte(qb, 4u * ib + l) | (((qh >> (3u * l)) & 7u) << 8u);
    return dl * (iq1_grid4(idx, hf) + delta);
}

// quants: qs (bytes 0..31), qh (32..47); scales: four u16 with the f16 scale in their top nibbles.
fn deq4_iq1_m(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let ib = e >> 5u;
    let l = (e & 31u) >> 3u;
    let hf = (e & 7u) >> 2u;
    let s0 = sbyte(sb, 0u) | (sbyte(sb, 1u) << 8u);
    let s1 = sbyte(sb, 2u) | (sbyte(sb, 3u) << 8u);
    let s2 = sbyte(sb, 4u) | (sbyte(sb, 5u) << 8u);
    let s3 = sbyte(sb, 6u) | (sbyte(sb, 7u) << 8u);
    let dbits = (s0 >> 12u) | ((s1 >> 8u) & 0xf0u) | ((s2 >> 4u) & 0xf00u) | (s3 & 0xf000u);
    let d = unpack2x16float(dbits).x;
    let sc = sbyte(sb, 2u * (ib >> 1u)) | (sbyte(sb, 2u * (ib >> 1u) + 1u) << 8u);
    let shift = 6u * (ib & 1u) + 3u * (l >> 1u);
    let dl = d * f32(2u * ((sc >> shift) & 7u) + 1u);
    let qhb = qbyte(qb, 32u + 2u * ib + (l >> 1u));
    let odd = (l & 1u) != 0u;
    let idx = qbyte(qb, 4u * ib + l) | ((qhb << select(8u, 4u, odd)) & 0x700u);
    let delta = select(0.125, -0.125, (qhb & select(0x08u, 0x80u, odd)) != 0u);
    return dl * (iq1_grid4(idx, hf) + delta);
}

fn iq4_4(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(
        iq4nl_value((w >> shift) & 0xfu),
        iq4nl_value((w >> (shift + 8u)) & 0xfu),
        iq4nl_value((w >> (shift + 16u)) & 0xfu),
        iq4nl_value((w >> (shift + 24u)) & 0xfu),
    );
}

fn deq4_iq4_nl(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    return sf16(sb, 0u) * iq4_4(wload(qb + (i & 3u)), (i >> 2u) * 4u);
}

// scales: d at 0, scales_h (u16) at 2, scales_l at 4; quants: 16 bytes per group of 32.
fn deq4_iq4_xs(qb: u32, sb: u32, i: u32) -> vec4<f32> {
    let e = 4u * i;
    let ib = e >> 5u;
    let j = e & 31u;
    let sh = sbyte(sb, 2u) | (sbyte(sb, 3u) << 8u);
    let lo = (sbyte(sb, 4u + (ib >> 1u)) >> (4u * (ib & 1u))) & 0xfu;
    let ls = lo | (((sh >> (2u * ib)) & 3u) << 4u);
    let dl = sf16(sb, 0u) * f32(i32(ls) - 32);
    return dl * iq4_4(wload(qb + 4u * ib + ((j & 15u) >> 2u)), (j >> 4u) * 4u);
}
