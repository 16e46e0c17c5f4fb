// The f16 operand of the split-K cooperative matmul (skinny_matmul.rs), written by the kernel
// that produces its input instead of a `round_act16` dispatch after it: v quantized as
// `quant_vec4` quantizes it and scaled back (q · d, Q8_0's d rounded to f16), stored as f16 —
// the values `round_act16` writes from the f32 output. The including shader declares
// Q: array<vec2<u32>> (four f16 per vec4 of a row); `scale_off` is unused (same signature as
// `quant_vec4`, so the kernels call either). Call in uniform control flow.
fn round16_vec4(u: u32, v: vec4<f32>, valid: bool, word: u32, group: u32, scale_off: u32, sgs: u32) {
    let ds = quant_scale(u, v, group, sgs);
    var d = ds.x;
    if group == 1u {
        d = round_f16(d);
    }
    if valid {
        Q[word] = pack_f16x4(round(v * ds.y) * d);
    }
    // The next call may overwrite amax_t.
    workgroupBarrier();
}
