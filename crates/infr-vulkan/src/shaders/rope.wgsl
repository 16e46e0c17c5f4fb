// Rotary position embedding as ggml computes it: theta = pos * theta_scale^i by repeated
// multiplication, optional frequency factors and YaRN ramp. One thread per column pair.

struct Params {
    cols: u32,
    head_dim: u32,
    n_rot: u32,
    neox: u32,
    theta_scale: f32,
    freq_scale: f32,
    ext_factor: f32,
    mscale0: f32,
    corr0: f32,
    corr1: f32,
    yarn_mul: f32,
    has_ff: u32,
    n_rows: u32,
    pos_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> S: array<u32>;
@group(0) @binding(3) var<storage, read> FF: array<f32>;

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

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    let half_cols = pc.cols / 2u;
    let row = g / half_cols;
    if row >= pc.n_rows {
        return;
    }
    let j = g % half_cols;
    let hh = pc.head_dim / 2u;
    let head = j / hh;
    let jj = j % hh;
    let base = row * pc.cols + head * pc.head_dim;
    if jj >= pc.n_rot / 2u {
        Y[base + 2u * jj] = X[base + 2u * jj];
        Y[base + 2u * jj + 1u] = X[base + 2u * jj + 1u];
        return;
    }
    var theta = f32(S[pc.pos_off + row]);
    for (var i = 0u; i < jj; i++) {
        theta *= pc.theta_scale;
    }
    var ff = 1.0;
    if pc.has_ff != 0u {
        ff = FF[jj];
    }
    let theta_extrap = theta / ff;
    let theta_interp = pc.freq_scale * theta_extrap;
    var th = theta_interp;
    var mscale = pc.mscale0;
    if pc.ext_factor != 0.0 {
        let y = (f32(jj) - pc.corr0) / max(0.001, pc.corr1 - pc.corr0);
        let ramp = 1.0 - clamp(y, 0.0, 1.0);
        let mix = ramp * pc.ext_factor;
        th = theta_interp * (1.0 - mix) + theta_extrap * mix;
        mscale *= pc.yarn_mul;
    }
    let sc = sincos(th);
    let c = sc.y * mscale;
    let s = sc.x * mscale;
    var i0 = 2u * jj;
    var i1 = 2u * jj + 1u;
    if pc.neox != 0u {
        i0 = jj;
        i1 = jj + pc.n_rot / 2u;
    }
    let x0 = X[base + i0];
    let x1 = X[base + i1];
    Y[base + i0] = x0 * c - x1 * s;
    Y[base + i1] = x0 * s + x1 * c;
}
