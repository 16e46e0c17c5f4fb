// X loader part of `matmul_coop.wgsl` for a plain product over f32 activations (with
// `coop_load_quant.wgsl`): row c0 + j of X, converted to f16 as it is read.

@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;

alias XUnit = array<vec4<f16>, 4>;

fn open_x(v: XUnit) -> array<vec4<f16>, 4> {
    return v;
}

fn fetch_x(u: u32, c0: u32, k0: u32) -> XUnit {
    let row = u / KU;
    let ke = k0 + 16u * (u % KU);
    let base = min(c0 + row, pc.n - 1u) * (pc.k / 4u) + ke / 4u;
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        if ke + 4u * q < k_end {
            out[q] = vec4<f16>(X[base + q]);
        } else {
            out[q] = vec4<f16>(0.0);
        }
    }
    return out;
}
