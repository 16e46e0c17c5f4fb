// Loader of `matmul_coop.wgsl` for quantized (or plain float) weights and f32 activations:
// W tiles are dequantized and X converted to f16 as they are staged.

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read> TBL: array<u32>;

// Loader units are dequantized (converted) when read.
alias WUnit = array<vec4<f16>, 4>;
alias XUnit = array<vec4<f16>, 4>;

fn open_w(v: WUnit) -> array<vec4<f16>, 4> {
    return v;
}

fn open_x(v: XUnit) -> array<vec4<f16>, 4> {
    return v;
}

fn fetch_w(u: u32, r0: u32, k0: u32) -> WUnit {
    let row = u / KU;
    let ke = k0 + 16u * (u % KU);
    if ke >= pc.k {
        return WUnit();
    }
    let bpr = pc.k / BLOCK;
    let row_blk = min(r0 + row, pc.m - 1u) * bpr;
    {{LOAD_W}}
}

fn fetch_x(u: u32, c0: u32, k0: u32) -> XUnit {
    let row = u / KU;
    let ke = k0 + 16u * (u % KU);
    let base = min(c0 + row, pc.n - 1u) * (pc.k / 4u) + ke / 4u;
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        if ke + 4u * q < pc.k {
            out[q] = vec4<f16>(X[base + q]);
        } else {
            out[q] = vec4<f16>(0.0);
        }
    }
    return out;
}

