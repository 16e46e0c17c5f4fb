// Integer-dot matrix-vector product for decode: weights against int8-quantized activations
// (q8_block.wgsl) with dot4I8Packed. Same workgroup shape and reduction as matmul_vec.wgsl;
// TPB lanes per weight block, each lane covering whole 32-element activation blocks so their
// precomputed sums handle the weight offsets (Q4_K mins, Q6_K's -32).
// Up to four weights of one type that read the same activations (q/k/v, gate/up, a DeltaNet
// layer's qkv/z/beta/alpha) can run as jobs of one dispatch: workgroups from tile1 on belong
// to job 1 (W1/Y1/BIAS1), from tile2 on to job 2, and so on; job 0 uses the plain bindings. The mixture-of-experts variant
// (`matmul_vec_q8_moe`) runs a grid of weight-row tiles × routed pairs through the same
// hooks: its JOB_SELECT points `wrow0` at the pair's expert and `xrow0` at its input row.

struct Params {
    k: u32,
    m: u32,
    n: u32,
    out_stride: u32,
    out_col0: u32,
    soff: u32,
    has_bias: u32,
    tiles_m: u32,
    qs_off: u32,
{{JOB_FIELDS}}}

var<immediate> pc: Params;

// Weights and quantized activations as 16-byte words: the quant runs a lane reads are 16-byte
// aligned (quant planes are multiples of 32 bytes per block), so they load 128 bits at a time.
@group(0) @binding(0) var<storage, read> W: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> XQ: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read> XS: array<vec4<f32>>;
{{JOB_BINDINGS}}
// Which weight this workgroup multiplies (0 without jobs).
var<private> job: u32;
// First weight row and activation row of this workgroup's product (0 but for experts).
{{ROW0}}

// Four consecutive weight words from word `i` (a multiple of 4).
fn wload4(i: u32) -> vec4<u32> {
{{WLOAD4}}
}

fn wload(i: u32) -> u32 {
    return wload4(i)[i & 3u];
}

const WG: u32 = {{WG}}u;
const R: u32 = {{R}}u;
const C: u32 = {{C}}u;
const QW: u32 = {{QW}}u;
const SB: u32 = {{SB}}u;
const BLOCK: u32 = {{BLOCK}}u;
const TPB: u32 = {{TPB}}u;
// Weight-row slots of the tiled layout (1 in the plain one).
const S: u32 = {{S}}u;

var<workgroup> red: array<f32, {{RED}}>;

// Activation words w..w+3 (elements 4w..4w+15, w a multiple of 4) of column c.
fn xw4(c: u32, w: u32) -> vec4<u32> {
    return XQ[((xrow0 + min(c, pc.n - 1u)) * (pc.k / 4u) + w) >> 2u];
}

// Block scales of activation block `xb` of column c.
fn xs(c: u32, xb: u32) -> vec4<f32> {
    return XS[pc.qs_off + (xrow0 + min(c, pc.n - 1u)) * (pc.k / 32u) + xb];
}

fn idot(a: u32, b: u32) -> i32 {
    return dot4I8Packed(a, b);
}

// Σ over four word pairs.
fn idot4(a: vec4<u32>, b: vec4<u32>) -> i32 {
    return idot(a.x, b.x) + idot(a.y, b.y) + idot(a.z, b.z) + idot(a.w, b.w);
}

// Each weight type has three parts, so that a workgroup of several activation rows loads a
// lane's weight words once for all rows (wprep), each row's activation words once for all
// weight rows (xload), and multiplies any pair (wdot). vdot8 is their composition.

// Q8_0, one lane per block.
struct WQ8_0 {
    w0: vec4<u32>,
    w1: vec4<u32>,
    d: f32,
}

struct XQ8_0 {
    a: vec4<u32>,
    b: vec4<u32>,
    s: f32,
}

fn wprep_q8_0(qb: u32, sb: u32, lane: u32) -> WQ8_0 {
    return WQ8_0(wload4(qb), wload4(qb + 4u), sf16(sb, 0u));
}

fn xload_q8_0(c: u32, xb0: u32, lane: u32) -> XQ8_0 {
    return XQ8_0(xw4(c, 8u * xb0), xw4(c, 8u * xb0 + 4u), xs(c, xb0).x);
}

fn wdot_q8_0(w: WQ8_0, x: XQ8_0) -> f32 {
    let s = idot4(w.w0, x.a) + idot4(w.w1, x.b);
    return w.d * x.s * f32(s);
}

// Q4_0, one lane per block: unsigned nibbles (low for elements 0..15, high for 16..31), the
// offset 8 taken out through the activation block's sum (ggml_vec_dot_q4_0_q8_0).
struct WQ4_0 {
    lo: vec4<u32>,
    hi: vec4<u32>,
    d: f32,
}

// An activation block with its sums (scale, Σq of the first and of the last 16).
struct XSUM {
    a: vec4<u32>,
    b: vec4<u32>,
    s: vec4<f32>,
}

fn wprep_q4_0(qb: u32, sb: u32, lane: u32) -> WQ4_0 {
    let q = wload4(qb);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    return WQ4_0(q & m4, (q >> vec4<u32>(4u)) & m4, sf16(sb, 0u));
}

fn xload_q4_0(c: u32, xb0: u32, lane: u32) -> XSUM {
    return XSUM(xw4(c, 8u * xb0), xw4(c, 8u * xb0 + 4u), xs(c, xb0));
}

fn wdot_q4_0(w: WQ4_0, x: XSUM) -> f32 {
    let s = idot4(w.lo, x.a) + idot4(w.hi, x.b) - 8 * i32(x.s.y + x.s.z);
    return w.d * x.s.x * f32(s);
}

// Q5_0, one lane per block (ggml_vec_dot_q5_0_q8_0): quant words qh, then 16 bytes of
// nibbles (20 bytes a block, so loaded a word at a time); element j's fifth bit is bit j of
// qh; values 0..31 with the offset 16 taken out through the activation sums.
fn spread4(b: u32) -> u32 {
    return ((b & 1u) << 4u) | ((b & 2u) << 11u) | ((b & 4u) << 18u) | ((b & 8u) << 25u);
}

fn wprep_q5_0(qb: u32, sb: u32, lane: u32) -> WQ4_0 {
    let qh = wload(qb);
    let q = vec4<u32>(wload(qb + 1u), wload(qb + 2u), wload(qb + 3u), wload(qb + 4u));
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let hl = vec4<u32>(spread4(qh), spread4(qh >> 4u), spread4(qh >> 8u), spread4(qh >> 12u));
    let hh = vec4<u32>(spread4(qh >> 16u), spread4(qh >> 20u), spread4(qh >> 24u), spread4(qh >> 28u));
    return WQ4_0((q & m4) | hl, ((q >> vec4<u32>(4u)) & m4) | hh, sf16(sb, 0u));
}

fn xload_q5_0(c: u32, xb0: u32, lane: u32) -> XSUM {
    return xload_q4_0(c, xb0, lane);
}

fn wdot_q5_0(w: WQ4_0, x: XSUM) -> f32 {
    let s = idot4(w.lo, x.a) + idot4(w.hi, x.b) - 16 * i32(x.s.y + x.s.z);
    return w.d * x.s.x * f32(s);
}

// Q4_1 / Q5_1 (ggml_vec_dot_q4_1_q8_1, _q5_1_): Q4_0's / Q5_0's unsigned values with a
// scale d and a minimum m per block: d dx Σ v q + m dx Σ q (llama.cpp's q8_1 activations
// carry dx Σ q rounded to f16; here it is not rounded, as in the float kernels).
struct WQ4_1 {
    lo: vec4<u32>,
    hi: vec4<u32>,
    d: f32,
    m: f32,
}

// A Q4_0 / Q5_0 lane's values with the block's minimum (the f16 after d).
fn with_min(w: WQ4_0, sb: u32) -> WQ4_1 {
    return WQ4_1(w.lo, w.hi, w.d, sf16(sb, 2u));
}

fn wprep_q4_1(qb: u32, sb: u32, lane: u32) -> WQ4_1 {
    return with_min(wprep_q4_0(qb, sb, lane), sb);
}

fn xload_q4_1(c: u32, xb0: u32, lane: u32) -> XSUM {
    return xload_q4_0(c, xb0, lane);
}

fn wdot_q4_1(w: WQ4_1, x: XSUM) -> f32 {
    let s = idot4(w.lo, x.a) + idot4(w.hi, x.b);
    return w.d * x.s.x * f32(s) + w.m * x.s.x * (x.s.y + x.s.z);
}

fn wprep_q5_1(qb: u32, sb: u32, lane: u32) -> WQ4_1 {
    return with_min(wprep_q5_0(qb, sb, lane), sb);
}

fn xload_q5_1(c: u32, xb0: u32, lane: u32) -> XSUM {
    return xload_q4_0(c, xb0, lane);
}

fn wdot_q5_1(w: WQ4_1, x: XSUM) -> f32 {
    return wdot_q4_1(w, x);
}

// MXFP4, one lane per block: E2M1 codes as their doubled values in int8 (kvalues_mxfp4),
// low nibbles for elements 0..15, high for 16..31; the E8M0 scale halved (as the doubled
// values need). llama.cpp's ggml_vec_dot_mxfp4_q8_0.
struct WMXFP4 {
    lo: vec4<u32>,
    hi: vec4<u32>,
    d: f32,
}

// The doubled value of E2M1 code c as an int8 byte.
fn e2m1_i8(c: u32) -> u32 {
    let v = e2m1x2_abs(c);
    return select(v, (256u - v) & 0xffu, (c & 8u) != 0u);
}

// The four codes at `shift` (0 or 4) of the four bytes of `w`, as packed int8.
fn e2m1_i8x4(w: u32, shift: u32) -> u32 {
    return e2m1_i8((w >> shift) & 0xfu) | (e2m1_i8((w >> (shift + 8u)) & 0xfu) << 8u)
        | (e2m1_i8((w >> (shift + 16u)) & 0xfu) << 16u) | (e2m1_i8((w >> (shift + 24u)) & 0xfu) << 24u);
}

fn wprep_mxfp4(qb: u32, sb: u32, lane: u32) -> WMXFP4 {
    let q = wload4(qb);
    let d = e8m0_half(sbyte(sb, 0u));
    let lo = vec4<u32>(e2m1_i8x4(q.x, 0u), e2m1_i8x4(q.y, 0u), e2m1_i8x4(q.z, 0u), e2m1_i8x4(q.w, 0u));
    let hi = vec4<u32>(e2m1_i8x4(q.x, 4u), e2m1_i8x4(q.y, 4u), e2m1_i8x4(q.z, 4u), e2m1_i8x4(q.w, 4u));
    return WMXFP4(lo, hi, d);
}

fn xload_mxfp4(c: u32, xb0: u32, lane: u32) -> XQ8_0 {
    return xload_q8_0(c, xb0, lane);
}

fn wdot_mxfp4(w: WMXFP4, x: XQ8_0) -> f32 {
    let s = idot4(w.lo, x.a) + idot4(w.hi, x.b);
    return w.d * x.s * f32(s);
}

// Q4_K, 4 lanes per super-block: lane c covers the 32-byte chunk c = groups 2c (low nibbles)
// and 2c+1 (high nibbles), i.e. activation blocks 2c and 2c+1.
struct WQ4_K {
    la: vec4<u32>,
    lb: vec4<u32>,
    ha: vec4<u32>,
    hb: vec4<u32>,
    dd: vec2<f32>,
    lo: vec2<f32>,
    hi: vec2<f32>,
}

struct XQ4_K {
    la: vec4<u32>,
    lb: vec4<u32>,
    ha: vec4<u32>,
    hb: vec4<u32>,
    xa: vec4<f32>,
    xb: vec4<f32>,
}

fn wprep_q4_k(qb: u32, sb: u32, lane: u32) -> WQ4_K {
    let sw = sb >> 2u;
    let s = vec3<u32>(wload(sw + 1u), wload(sw + 2u), wload(sw + 3u));
    let wa = wload4(qb + 8u * lane);
    let wb = wload4(qb + 8u * lane + 4u);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    return WQ4_K(
        wa & m4,
        wb & m4,
        (wa >> vec4<u32>(4u)) & m4,
        (wb >> vec4<u32>(4u)) & m4,
        unpack2x16float(wload(sw)),
        kscale_min(s, 2u * lane),
        kscale_min(s, 2u * lane + 1u),
    );
}

fn xload_q4_k(c: u32, xb0: u32, lane: u32) -> XQ4_K {
    let xl = xb0 + 2u * lane;
    return XQ4_K(
        xw4(c, 8u * xl),
        xw4(c, 8u * xl + 4u),
        xw4(c, 8u * (xl + 1u)),
        xw4(c, 8u * (xl + 1u) + 4u),
        xs(c, xl),
        xs(c, xl + 1u),
    );
}

fn wdot_q4_k(w: WQ4_K, x: XQ4_K) -> f32 {
    let sl = idot4(w.la, x.la) + idot4(w.lb, x.lb);
    let sh = idot4(w.ha, x.ha) + idot4(w.hb, x.hb);
    let xa = x.xa;
    let xb = x.xb;
    return w.dd.x * (w.lo.x * xa.x * f32(sl) + w.hi.x * xb.x * f32(sh))
        - w.dd.y * (w.lo.y * xa.x * (xa.y + xa.z) + w.hi.y * xb.x * (xb.y + xb.z));
}

// Q5_K: Q4_K's lanes, scales and sums, each nibble with its fifth bit from the qh plane
// (quant words 0..7, qs from word 8): bit 2c of qh byte l for the low nibbles of lane c's
// chunk, bit 2c + 1 for the high ones.
fn wprep_q5_k(qb: u32, sb: u32, lane: u32) -> WQ4_K {
    var w = wprep_q4_k(qb + 8u, sb, lane);
    let ha = wload4(qb);
    let hb = wload4(qb + 4u);
    let one = vec4<u32>(0x01010101u);
    let lo_shift = vec4<u32>(2u * lane);
    let hi_shift = vec4<u32>(2u * lane + 1u);
    w.la |= ((ha >> lo_shift) & one) << vec4<u32>(4u);
    w.lb |= ((hb >> lo_shift) & one) << vec4<u32>(4u);
    w.ha |= ((ha >> hi_shift) & one) << vec4<u32>(4u);
    w.hb |= ((hb >> hi_shift) & one) << vec4<u32>(4u);
    return w;
}

fn xload_q5_k(c: u32, xb0: u32, lane: u32) -> XQ4_K {
    return xload_q4_k(c, xb0, lane);
}

fn wdot_q5_k(w: WQ4_K, x: XQ4_K) -> f32 {
    return wdot_q4_k(w, x);
}

// Q2_K and Q3_K, 4 lanes per super-block as Q4_K: lane c covers activation blocks 2c and
// 2c+1, i.e. quant half n = c / 2 at crumb positions j0 = 2 (c % 2) and j0 + 1, and the
// 16-element groups 4c..4c+3 (one scale each). The 2-bit (Q3_K: 3-bit, with the hmask bit)
// values go through the int8 dot unsigned; the offsets come out through the activation
// sums (ggml_vec_dot_q2_K_q8_K, _q3_K_q8_K).
struct WK16 {
    la: vec4<u32>,
    lb: vec4<u32>,
    ha: vec4<u32>,
    hb: vec4<u32>,
    // Each group's scale (times d).
    sc: vec4<f32>,
    // Each group's minimum (times dmin; Q3_K: 4 x its scale, the offset of -4).
    mn: vec4<f32>,
}

// Lane `lane`'s 2-bit values of a Q2_K-layout quant run from word `qw` (32 bytes per half):
// quant half lane / 2 at crumb positions 2 (lane % 2) (la, lb) and the next (ha, hb).
fn k16_crumbs(qw: u32, lane: u32) -> array<vec4<u32>, 4> {
    let n = lane >> 1u;
    let s1 = vec4<u32>(4u * (lane & 1u));
    let s2 = s1 + vec4<u32>(2u);
    let wa = wload4(qw + 8u * n);
    let wb = wload4(qw + 8u * n + 4u);
    let m2 = vec4<u32>(0x03030303u);
    return array<vec4<u32>, 4>((wa >> s1) & m2, (wb >> s1) & m2, (wa >> s2) & m2, (wb >> s2) & m2);
}

fn wprep_q2_k(qb: u32, sb: u32, lane: u32) -> WK16 {
    let q = k16_crumbs(qb, lane);
    let d = sf16(sb, 16u);
    let dmin = sf16(sb, 18u);
    let g = 4u * lane;
    let sc = vec4<u32>(sbyte(sb, g), sbyte(sb, g + 1u), sbyte(sb, g + 2u), sbyte(sb, g + 3u));
    return WK16(q[0], q[1], q[2], q[3], d * vec4<f32>(sc & vec4<u32>(0xfu)), dmin * vec4<f32>(sc >> vec4<u32>(4u)));
}

fn xload_q2_k(c: u32, xb0: u32, lane: u32) -> XQ4_K {
    return xload_q4_k(c, xb0, lane);
}

fn wdot_q2_k(w: WK16, x: XQ4_K) -> f32 {
    let s = vec4<f32>(f32(idot4(w.la, x.la)), f32(idot4(w.lb, x.lb)), f32(idot4(w.ha, x.ha)), f32(idot4(w.hb, x.hb)));
    let xa = x.xa;
    let xb = x.xb;
    return xa.x * (w.sc.x * s.x + w.sc.y * s.y - w.mn.x * xa.y - w.mn.y * xa.z)
        + xb.x * (w.sc.z * s.z + w.sc.w * s.w - w.mn.z * xb.y - w.mn.w * xb.z);
}

// Q3_K's 6-bit scale of group g (packed as in `deq4_q3_k`), minus 32.
fn q3_k_scale(sb: u32, g: u32) -> f32 {
    let lo = (sbyte(sb, g & 7u) >> (4u * (g >> 3u))) & 0xfu;
    let hi = (sbyte(sb, 8u + (g & 3u)) >> (2u * (g >> 2u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

// Q3_K: quant words 0..7 the hmask (bit 4n + j of byte l for element l of half n, crumb j),
// words 8..23 the low two bits as Q2_K's; values q + 4 h - 4, the -4 through the sums.
fn wprep_q3_k(qb: u32, sb: u32, lane: u32) -> WK16 {
    let q = k16_crumbs(qb + 8u, lane);
    // The hmask bit 4n + j of each byte, n = lane / 2 and j = 2 (lane % 2) or the next.
    let h0 = vec4<u32>(2u * lane);
    let h1 = h0 + vec4<u32>(1u);
    let ha = wload4(qb);
    let hb = wload4(qb + 4u);
    let one = vec4<u32>(0x01010101u);
    let two = vec4<u32>(2u);
    let d = sf16(sb, 12u);
    let g = 4u * lane;
    let sc = d * vec4<f32>(q3_k_scale(sb, g), q3_k_scale(sb, g + 1u), q3_k_scale(sb, g + 2u), q3_k_scale(sb, g + 3u));
    return WK16(
        q[0] | (((ha >> h0) & one) << two),
        q[1] | (((hb >> h0) & one) << two),
        q[2] | (((ha >> h1) & one) << two),
        q[3] | (((hb >> h1) & one) << two),
        sc,
        4.0 * sc,
    );
}

fn xload_q3_k(c: u32, xb0: u32, lane: u32) -> XQ4_K {
    return xload_q4_k(c, xb0, lane);
}

fn wdot_q3_k(w: WK16, x: XQ4_K) -> f32 {
    return wdot_q2_k(w, x);
}

fn sc_i8(sb: u32, j: u32) -> f32 {
    return f32(i32(sbyte(sb, j) << 24u) >> 24u);
}

// Q6_K, 8 lanes per super-block: lane (hn, t) covers the 32 elements 128hn + 32t + l,
// i.e. activation block 4hn + t, with scales for l < 16 and l >= 16.
struct WQ6_K {
    va: vec4<u32>,
    vb: vec4<u32>,
    sc0: f32,
    sc1: f32,
}

struct XQ6_K {
    a: vec4<u32>,
    b: vec4<u32>,
    x: vec4<f32>,
}

fn wprep_q6_k(qb: u32, sb: u32, lane: u32) -> WQ6_K {
    let hn = lane >> 2u;
    let t = lane & 3u;
    let d = sf16(sb, 16u);
    let si = 8u * hn + 2u * t;
    let qlw = (64u * hn + 32u * (t & 1u)) / 4u;
    let qhw = 32u + (32u * hn) / 4u;
    let ls = vec4<u32>(4u * (t >> 1u));
    let hs = vec4<u32>(2u * t);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m2 = vec4<u32>(0x03030303u);
    let va = ((wload4(qb + qlw) >> ls) & m4) | (((wload4(qb + qhw) >> hs) & m2) << vec4<u32>(4u));
    let vb = ((wload4(qb + qlw + 4u) >> ls) & m4) | (((wload4(qb + qhw + 4u) >> hs) & m2) << vec4<u32>(4u));
    return WQ6_K(va, vb, d * sc_i8(sb, si), d * sc_i8(sb, si + 1u));
}

fn xload_q6_k(c: u32, xb0: u32, lane: u32) -> XQ6_K {
    let xb = xb0 + 4u * (lane >> 2u) + (lane & 3u);
    return XQ6_K(xw4(c, 8u * xb), xw4(c, 8u * xb + 4u), xs(c, xb));
}

fn wdot_q6_k(w: WQ6_K, x: XQ6_K) -> f32 {
    let s0 = idot4(w.va, x.a);
    let s1 = idot4(w.vb, x.b);
    return x.x.x * (w.sc0 * (f32(s0) - 32.0 * x.x.y) + w.sc1 * (f32(s1) - 32.0 * x.x.z));
}

// The tiled layout (`matmul_rows_q8`, S slots of R / S weight rows each): thread t is lane
// t % TPB of slot (t / TPB) % S, and walks the blocks b ≡ t / (TPB S) of its rows; a
// subgroup's threads then read the same activation words for different weight rows.
fn tile_slot(t: u32) -> u32 {
    return (t / TPB) % S;
}

fn tile_group(t: u32) -> u32 {
    return t / (TPB * S);
}

// One weight row's block against every activation row.
fn vdot8(qb: u32, sb: u32, lane: u32, xb0: u32) -> array<f32, {{C}}> {
    var out: array<f32, {{C}}>;
    let w = wprep_{{VDEQ}}(qb, sb, lane);
    for (var c = 0u; c < C; c++) {
        out[c] = wdot_{{VDEQ}}(w, xload_{{VDEQ}}(c, xb0, lane));
    }
    return out;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{{SG_PARAMS}}) {
    let lin0 = wg_linear(wid, nwg);
    if lin0 >= {{GRID}} {
        return;
    }
    job = 0u;
    var lin = lin0;
    var m = pc.m;
    var soff = pc.soff;
    var has_bias = pc.has_bias;
    var out_stride = pc.out_stride;
    var out_col0 = pc.out_col0;
{{JOB_SELECT}}
    let r0 = lin * R;
    var acc: array<f32, {{ACC}}>;
    let bpr = pc.k / BLOCK;
    let lane = t % TPB;
    let sbase = soff * 4u;
{{LOOP_HEAD}} {
        let xb0 = b * (BLOCK / 32u);
{{BODY}}
    }
    {{REDUCE}}
    if t < R * C {
        let r = t / C;
        let c = t % C;
        if r0 + r < m && c < pc.n {
            let col = out_col0 + r0 + r;
            let at = c * out_stride + col;
            var v = total;
{{STORE}}
        }
    }
}
