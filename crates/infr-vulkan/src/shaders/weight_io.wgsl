// What dequant.wgsl (and dequant_iq.wgsl) read through, for kernels that bind the weight as
// `W` and the i-quant tables as `TBL: array<u32>`: word accessors and the weight layout's
// constants (templated by `kernels::with_layout`). `W_WORD` reads word `i`: `W[i]` where W is
// an `array<u32>`; the cooperative matmul's loader, where it reads raw Q4_K/Q6_K units, binds
// `array<vec4<u32>>` (16-byte loads of whole quant runs) and redefines it.

fn wload(i: u32) -> u32 {
    return {{W_WORD}};
}

fn tload(i: u32) -> u32 {
    return TBL[i];
}

const QW: u32 = {{QW}}u;
const SB: u32 = {{SB}}u;
const BLOCK: u32 = {{BLOCK}}u;
