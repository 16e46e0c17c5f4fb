// Weight loader of `matmul_coop.wgsl` for a weight already in f16: W16 (rows of a weight
// slice, `dequant_f16.wgsl`), row-major with row stride k, read as `coop_x_f16.wgsl` reads
// X16 (whose helpers it uses).

@group(0) @binding(0) var<storage, read> W: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;

alias WUnit = array<vec4<u32>, 2>;

fn fetch_w(u: u32, r0: u32, k0: u32) -> WUnit {
    let w = unit_word(u, r0, pc.m, k0);
    if w.y == 0u {
        return WUnit();
    }
    return WUnit(W[w.x], W[w.x + 1u]);
}

fn open_w(v: WUnit) -> array<vec4<f16>, 4> {
    return halves16(v[0], v[1]);
}
