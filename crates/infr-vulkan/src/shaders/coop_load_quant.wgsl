// Weight loader of `matmul_coop.wgsl` for quantized (or plain float) weights, from weight row
// `wrow0` on (0 for a plain product; the expert loader sets its expert's first row). Units are
// dequantized as read, or (`W_UNIT` for Q4_K and Q6_K with the device's `raw_units`) read as
// raw words and dequantized when staged (deq16_k.wgsl), so the next k-steps' loads stay in
// flight while the current one is multiplied. Bindings 0 and 2-4; binding 1 (X) belongs to the X loader part:
// `coop_x_f32.wgsl`, `coop_x_f16.wgsl` or the expert loader's gather.

// Words (`u32`), or 16-byte words (`vec4<u32>`) where units are read raw.
@group(0) @binding(0) var<storage, read> W: array<{{W_ELEM}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read> TBL: array<u32>;

// First weight row of this workgroup's product.
var<private> wrow0: u32;

{{W_UNIT}}

fn fetch_w(u: u32, r0: u32, k0: u32) -> WUnit {
    let row = u / KU;
    let ke = k0 + 16u * (u % KU);
    if ke >= k_end {
        return WUnit();
    }
    let bpr = pc.k / BLOCK;
    let row_blk = (wrow0 + min(r0 + row, pc.m - 1u)) * bpr;
    {{LOAD_W}}
}
