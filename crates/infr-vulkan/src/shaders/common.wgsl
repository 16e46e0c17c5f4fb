// Shared helpers for every kernel.

// Linear index of this workgroup in a 2-D dispatch grid (x is at most 65535 wide).
fn wg_linear(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Round an f32 to the nearest f16 and back (ggml rounds some intermediates to f16).
fn round_f16(x: f32) -> f32 {
    return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x;
}

// tanh through exp (accurate on every driver, unlike some native tanh approximations), finite
// for any argument.
fn tanh_exp(x: f32) -> f32 {
    let a = min(abs(x), 15.0);
    let t = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    return select(t, -t, x < 0.0);
}
