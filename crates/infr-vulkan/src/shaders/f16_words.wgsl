// f16 values packed two to a u32 word, opened for the cooperative matmul's staging
// (`coop_x_f16.wgsl`, `coop_load_f16.wgsl`, `coop_load_moe.wgsl`).

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
