// X loader part of `matmul_coop.wgsl` for activations already in f16 (X16 from `round_act16`,
// row-major with row stride k, a multiple of 16), read 16 elements (two 16-byte words) at a
// time; `coop_load_f16.wgsl` reads its f16 weight slice through the same helpers.

@group(0) @binding(1) var<storage, read> X: array<vec4<u32>>;

// The 16 f16 held by two 16-byte words, as four vec4 (through f32, exact: naga 30 mistypes
// a bitcast from u32 to vec2<f16>). Reading the operands as f16 instead (vec4<f16> or
// mat2x4<f16> storage, or the words a component at a time) measured ~32% slower on the H200
// (8B pp512 4,990 against 7,342 t/s): whole 16-byte words are what keeps the loads few.
fn halves4(w0: u32, w1: u32) -> vec4<f16> {
    return vec4<f16>(vec4<f32>(unpack2x16float(w0), unpack2x16float(w1)));
}

fn halves16(a: vec4<u32>, b: vec4<u32>) -> array<vec4<f16>, 4> {
    return array<vec4<f16>, 4>(halves4(a.x, a.y), halves4(a.z, a.w), halves4(b.x, b.y), halves4(b.z, b.w));
}

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
