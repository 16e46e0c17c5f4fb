// RoPE math as ggml computes it (`rope_yarn` in ggml-cpu): theta = pos * theta_scale^i by
// repeated multiplication, optional frequency factors and the YaRN ramp. The including
// shader's push constants `pc` hold a `Rope` as `pc.rope` (`RopeGpu` on the Rust side) and
// it binds the frequency factors as FF.

struct Rope {
    theta_scale: f32,
    freq_scale: f32,
    ext_factor: f32,
    mscale0: f32,
    corr0: f32,
    corr1: f32,
    yarn_mul: f32,
    has_ff: u32,
    n_rot: u32,
    neox: u32,
}

// sin and cos of an angle of any size, accurate to a few ulp on every driver (the Vulkan spec lets
// native sin/cos be off by 2^-11, which real GPUs use): Cody-Waite reduction by pi/2 (split in
// three so q * C1 is exact for |q| < 2^16) to [-pi/4, pi/4], then Taylor polynomials whose
// truncation error there is below 2e-9.
fn sincos(x: f32) -> vec2<f32> {
    let q = round(x * 0.6366197723675814);
    let r = ((x - q * 1.5703125) - q * 4.837512969970703125e-4) - q * 7.54978995489188216e-8;
    let r2 = r * r;
    let s = r + r * r2 * (-1.6666666666666666e-1 + r2 * (8.333333333333333e-3 + r2 * (-1.984126984126984e-4 + r2 * 2.7557319223985893e-6)));
    let c = 1.0 + r2 * (-0.5 + r2 * (4.1666666666666664e-2 + r2 * (-1.388888888888889e-3 + r2 * (2.48015873015873e-5 - r2 * 2.755731922398589e-7))));
    let k = i32(q) & 3;
    if k == 0 {
        return vec2<f32>(s, c);
    }
    if k == 1 {
        return vec2<f32>(c, -s);
    }
    if k == 2 {
        return vec2<f32>(-s, -c);
    }
    return vec2<f32>(-c, s);
}

// Element indices of rotation pair jj (< n_rot / 2) of a head: (2jj, 2jj+1), or (jj,
// jj + n_rot/2) for NeoX.
fn rope_pair(jj: u32) -> vec2<u32> {
    if pc.rope.neox != 0u {
        return vec2<u32>(jj, jj + pc.rope.n_rot / 2u);
    }
    return vec2<u32>(2u * jj, 2u * jj + 1u);
}

// The pair (x0, x1) rotated for pair index jj at position `pos`.
fn rope_rotate(x0: f32, x1: f32, jj: u32, pos: u32) -> vec2<f32> {
    var theta = f32(pos);
    for (var i = 0u; i < jj; i++) {
        theta *= pc.rope.theta_scale;
    }
    var ff = 1.0;
    if pc.rope.has_ff != 0u {
        ff = FF[jj];
    }
    let theta_extrap = theta / ff;
    let theta_interp = pc.rope.freq_scale * theta_extrap;
    var th = theta_interp;
    var mscale = pc.rope.mscale0;
    if pc.rope.ext_factor != 0.0 {
        let y = (f32(jj) - pc.rope.corr0) / max(0.001, pc.rope.corr1 - pc.rope.corr0);
        let ramp = 1.0 - clamp(y, 0.0, 1.0);
        let mix = ramp * pc.rope.ext_factor;
        th = theta_interp * (1.0 - mix) + theta_extrap * mix;
        mscale *= pc.rope.yarn_mul;
    }
    let sc = sincos(th);
    let c = sc.y * mscale;
    let s = sc.x * mscale;
    return vec2<f32>(x0 * c - x1 * s, x0 * s + x1 * c);
}
