// What dequant.wgsl (and dequant_iq.wgsl) read through, for kernels that bind the weight as
// `W: array<u32>` and the i-quant tables as `TBL: array<u32>`: word accessors and the weight
// layout's constants (templated by `kernels::with_layout`).

fn wload(i: u32) -> u32 {
    return W[i];
}

fn tload(i: u32) -> u32 {
    return TBL[i];
}

const QW: u32 = {{QW}}u;
const SB: u32 = {{SB}}u;
const BLOCK: u32 = {{BLOCK}}u;
