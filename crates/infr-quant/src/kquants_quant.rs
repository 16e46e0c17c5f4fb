//! Reference quantizers for the k-quants (Q2_K … Q6_K), the paths llama-quantize takes
//! without an importance matrix.
//!
//! They mirror `quantize_row_q{2..6}_K_ref` and their helpers (`make_qx_quants`,
//! `make_q3_quants`, `make_qkx2_quants`) in llama.cpp's `ggml/src/ggml-quants.c`, keeping
//! every float operation in the same order so the output bytes are identical.

use crate::blocks::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K};
use crate::float::{f16_to_f32, f32_to_f16, read_f16, write_f16};
use crate::kquants::{get_scale_min_k4, nearest_int};
use crate::types::QK_K;

/// ggml's `GROUP_MAX_EPS`: groups whose largest magnitude is below this are all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Symmetric quantization of `x` to `L` in `0..2*nmax` (`make_qx_quants` with no importance
/// weights); returns the scale. `rmse_type` selects the error weighting as in ggml.
fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8], rmse_type: i32) -> f32 {
    let n = x.len();
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let mut iscale = -(nmax as f32) / max;
    if rmse_type == 0 {
        for (l, &v) in l_out.iter_mut().zip(x) {
            let q = nearest_int(iscale * v);
            *l = (nmax + q.clamp(-nmax, nmax - 1)) as i8;
        }
        return 1.0 / iscale;
    }
    let (rmse_type, return_early) = if rmse_type < 0 { (-rmse_type, true) } else { (rmse_type, false) };
    let weight = |v: f32| match rmse_type {
        1 => v * v,
        2 => 1.0,
        3 => v.abs(),
        _ => v.abs().sqrt(),
    };
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (l, &v) in l_out.iter_mut().zip(x) {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *l = (q + nmax) as i8;
        let w = weight(v);
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 { 0.5 * (scale + 1.0 / iscale) } else { 1.0 / iscale };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
            let w = weight(v);
            sumlx += w * v * q as f32;
            suml2 += w * q as f32 * q as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l, &v) in l_out.iter_mut().zip(x) {
                let q = nearest_int(iscale * v);
                *l = (nmax + q.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric 3-bit group quantization with iterative refinement (`make_q3_quants`).
fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..x.len()].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    if do_rmse {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for (l, &v) in l_out.iter_mut().zip(x) {
            let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
            *l = q as i8;
            let w = v * v;
            sumlx += w * v * q as f32;
            suml2 += w * q as f32 * q as f32;
        }
        for _ in 0..5 {
            let mut n_changed = 0;
            for (i, &v) in x.iter().enumerate() {
                let w = v * v;
                let li = l_out[i] as f32;
                let mut slx = sumlx - w * v * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                    if new_l != l_out[i] as i32 {
                        slx += w * v * new_l as f32;
                        sl2 += w * new_l as f32 * new_l as f32;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l_out[i] = new_l as i8;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for l in l_out[..x.len()].iter_mut() {
            *l += nmax as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for (l, &v) in l_out.iter_mut().zip(x) {
        *l = (nearest_int(iscale * v).clamp(-nmax, nmax - 1) + nmax) as i8;
    }
    1.0 / iscale
}

/// Asymmetric (scale + min) quantization of `x` to `0..=nmax` with a weighted search over
/// candidate scales (`make_qkx2_quants`); returns `(scale, -min)`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let dd = sum_w * sum_l2 - sum_l * sum_l;
        if dd > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / dd;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / dd;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Pack 2-bit quants `L[0..256]` into 64 bytes: byte `l` of chunk `c` holds elements
/// `128c + l + 32k` at bit `2k`.
fn pack_2bit(l: &[u8], qs: &mut [u8]) {
    for c in 0..2 {
        for i in 0..32 {
            let j = 128 * c + i;
            qs[32 * c + i] = l[j] | (l[j + 32] << 2) | (l[j + 64] << 4) | (l[j + 96] << 6);
        }
    }
}

pub(crate) fn quantize_q2_k(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 16];
    let mut weights = [0f32; 16];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ2_K::SIZE)) {
        let mut mins = [0f32; 16];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xg = &x[16 * j..16 * j + 16];
            for (w, &v) in weights.iter_mut().zip(xg) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(3, xg, &weights, &mut l[16 * j..16 * j + 16], &mut laux, -0.5, 0.1, 15, true);
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let sc = &mut b[BlockQ2_K::OFF_SCALES..BlockQ2_K::OFF_SCALES + 16];
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
        } else {
            sc.fill(0);
        }
        let d = if max_scale > 0.0 { max_scale / Q4SCALE } else { 0.0 };
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                sc[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
        }
        let dmin = if max_min > 0.0 { max_min / Q4SCALE } else { 0.0 };
        let sc: [u8; 16] = core::array::from_fn(|j| sc[j]);
        write_f16(b, BlockQ2_K::OFF_D, d);
        write_f16(b, BlockQ2_K::OFF_DMIN, dmin);
        let (dq, mq) = (read_f16(b, BlockQ2_K::OFF_D), read_f16(b, BlockQ2_K::OFF_DMIN));
        for j in 0..16 {
            let d = dq * (sc[j] & 0xF) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = mq * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((x[16 * j + ii] + dm) / d);
                l[16 * j + ii] = q.clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut b[BlockQ2_K::OFF_QS..BlockQ2_K::OFF_QS + 64]);
    }
}

pub(crate) fn quantize_q3_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0i8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ3_K::SIZE)) {
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16], true);
            let s = scales[j].abs();
            if s > amax {
                amax = s;
                max_scale = scales[j];
            }
        }
        let mut sc = [0u8; 12];
        let d = if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                let q = ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    sc[j] = q & 0xF;
                } else {
                    sc[j - 8] |= (q & 0xF) << 4;
                }
                sc[j % 4 + 8] |= (q >> 4) << (2 * (j / 4));
            }
            1.0 / iscale
        } else {
            0.0
        };
        b[BlockQ3_K::OFF_SCALES..BlockQ3_K::OFF_SCALES + 12].copy_from_slice(&sc);
        let dq = f16_to_f32(f32_to_f16(d));
        write_f16(b, BlockQ3_K::OFF_D, d);
        for j in 0..16 {
            let lo = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
            let s = (lo | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i32 - 32;
            let dj = dq * s as f32;
            if dj == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / dj).clamp(-4, 3);
                l[16 * j + ii] = (q + 4) as i8;
            }
        }
        let hmask = &mut b[BlockQ3_K::OFF_HMASK..BlockQ3_K::OFF_HMASK + 32];
        hmask.fill(0);
        let mut lu = [0u8; QK_K];
        for j in 0..QK_K {
            let mut v = l[j] as u8;
            if v > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                v -= 4;
            }
            lu[j] = v;
        }
        pack_2bit(&lu, &mut b[BlockQ3_K::OFF_QS..BlockQ3_K::OFF_QS + 64]);
    }
}

/// Shared first half of the Q4_K/Q5_K reference quantizers: per-group (scale, min) search,
/// 6-bit packing of scales and mins, the two f16 super-scales, then the final requantization of
/// `L` against the rounded scales. Writes `d`, `dmin` and `scales` at the Q4_K/Q5_K offsets
/// (identical for both types).
fn q45_k_scales(x: &[f32], b: &mut [u8], l: &mut [u8; QK_K], nmax: i32, rmin: f32, nstep: i32) {
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut mins = [0f32; 8];
    let mut scales = [0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xg = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xg {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xg) {
            *w = av_x + v.abs();
        }
        let (s, m) =
            make_qkx2_quants(nmax, xg, &weights, &mut l[32 * j..32 * j + 32], &mut laux, rmin, 0.1, nstep, false);
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    write_f16(b, BlockQ4_K::OFF_D, max_scale / 63.0);
    write_f16(b, BlockQ4_K::OFF_DMIN, max_min / 63.0);
    b[BlockQ4_K::OFF_SCALES..BlockQ4_K::OFF_SCALES + 12].copy_from_slice(&sc);
    let (dq, mq) = (read_f16(b, BlockQ4_K::OFF_D), read_f16(b, BlockQ4_K::OFF_DMIN));
    for j in 0..8 {
        let (s, m) = get_scale_min_k4(j, &sc);
        let d = dq * s as f32;
        if d == 0.0 {
            continue;
        }
        let dm = mq * m as f32;
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / d);
            l[32 * j + ii] = q.clamp(0, nmax) as u8;
        }
    }
}

pub(crate) fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ4_K::SIZE)) {
        q45_k_scales(x, b, &mut l, 15, -1.0, 20);
        let qs = &mut b[BlockQ4_K::OFF_QS..BlockQ4_K::OFF_QS + 128];
        for c in 0..4 {
            for i in 0..32 {
                qs[32 * c + i] = l[64 * c + i] | (l[64 * c + i + 32] << 4);
            }
        }
    }
}

pub(crate) fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    const _: () = assert!(BlockQ5_K::OFF_SCALES == BlockQ4_K::OFF_SCALES);
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ5_K::SIZE)) {
        q45_k_scales(x, b, &mut l, 31, -0.5, 15);
        let mut qh = [0u8; 32];
        for c in 0..4 {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for j in 0..32 {
                let mut l1 = l[64 * c + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[64 * c + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                b[BlockQ5_K::OFF_QS + 32 * c + j] = l1 | (l2 << 4);
            }
        }
        b[BlockQ5_K::OFF_QH..BlockQ5_K::OFF_QH + 32].copy_from_slice(&qh);
    }
}

pub(crate) fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0i8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ6_K::SIZE)) {
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..16 {
            let s = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16], 1);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            b.fill(0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        write_f16(b, BlockQ6_K::OFF_D, 1.0 / iscale);
        let dq = read_f16(b, BlockQ6_K::OFF_D);
        let mut sc = [0i8; 16];
        for ib in 0..16 {
            sc[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
            b[BlockQ6_K::OFF_SCALES + ib] = sc[ib] as u8;
        }
        for j in 0..16 {
            let d = dq * sc[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }
        for c in 0..2 {
            for i in 0..32 {
                let j = 128 * c + i;
                let lv = |k: usize| l[j + 32 * k] as u8;
                b[BlockQ6_K::OFF_QL + 64 * c + i] = (lv(0) & 0xF) | ((lv(2) & 0xF) << 4);
                b[BlockQ6_K::OFF_QL + 64 * c + i + 32] = (lv(1) & 0xF) | ((lv(3) & 0xF) << 4);
                b[BlockQ6_K::OFF_QH + 32 * c + i] =
                    (lv(0) >> 4) | ((lv(1) >> 4) << 2) | ((lv(2) >> 4) << 4) | ((lv(3) >> 4) << 6);
            }
        }
    }
}
