// X loader part of `matmul_coop.wgsl` for activations already in f16 (X16 from `round_act16`,
// row-major with row stride k, a multiple of 16), read 16 elements (two 16-byte words) at a
// time (opened by `f16_words.wgsl`); `coop_load_f16.wgsl` reads its f16 weight slice through
// the same helpers.

@group(0) @binding(1) var<storage, read> X: array<vec4<u32>>;

// Loader unit `u` of a slice starting at row r0 and inner element k0: the index of its first
// 16-byte word (row r0 + u / KU, clamped to the operand's `rows`; 16 elements from
// k0 + 16·(u % KU)), and 1 where those elements lie inside this workgroup's k range (0 past
// it: the unit is zeros).
fn unit_word(u: u32, r0: u32, rows: u32, k0: u32) -> vec2<u32> {
    let ke = k0 + 16u * (u % KU);
    return vec2<u32>((min(r0 + u / KU, rows - 1u) * pc.k + ke) / 8u, u32(ke < k_end));
}

// A loader unit as read: two 16-byte words, opened into f16 only when staged, so that the
// words of the next slices stay in flight while the current ones are multiplied (a
// conversion next to the load waits for it there: on an H200, 8B pp512 ran at 8,223 t/s
// with the conversion at the load, 10,339 with the words kept until staged).
alias XUnit = array<vec4<u32>, 2>;

fn fetch_x(u: u32, c0: u32, k0: u32) -> XUnit {
    let w = unit_word(u, c0, pc.n, k0);
    if w.y == 0u {
        return XUnit();
    }
    return XUnit(X[w.x], X[w.x + 1u]);
}

fn open_x(v: XUnit) -> array<vec4<f16>, 4> {
    return halves16(v[0], v[1]);
}
