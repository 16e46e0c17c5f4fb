// weight_io.wgsl for kernels that bind the weight as `W: array<vec4<u32>>` (16-byte loads of
// whole quant runs; the cooperative matmul's loader): the same word accessors and constants.

fn wload(i: u32) -> u32 {
    return W[i >> 2u][i & 3u];
}

fn tload(i: u32) -> u32 {
    return TBL[i];
}

const QW: u32 = {{QW}}u;
const SB: u32 = {{SB}}u;
const BLOCK: u32 = {{BLOCK}}u;
