//! Rotary position embedding, following ggml's CPU `rope_f32` (`ggml_rope_cache_init`,
//! `rope_yarn`, `rotate_pairs`) so angles are computed with the same f32 recurrences.

use infr_core::{RopeMode, RopeParams, RopeScaling};

/// `ggml_rope_yarn_corr_dim`.
fn corr_dim(n_dims: f32, n_ctx_orig: f32, n_rot: f32, base: f32) -> f32 {
    n_dims * (n_ctx_orig / (n_rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
}

/// The cos/sin cache for one position: `cache[2i], cache[2i+1]` for pair `i`.
fn cache(p: &RopeParams, pos: u32, factors: Option<&[f32]>, out: &mut [f32]) {
    let n_dims = p.n_rot as usize;
    let theta_scale = p.freq_base.powf(-2.0 / n_dims as f32);
    let (ext_factor, mscale0, corr) = match p.scaling {
        RopeScaling::None => (0.0f32, 1.0f32, [0.0f32, 0.0]),
        RopeScaling::Yarn { ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig } => {
            let nd = n_dims as f32;
            let start = corr_dim(nd, n_ctx_orig as f32, beta_fast, p.freq_base).floor();
            let end = corr_dim(nd, n_ctx_orig as f32, beta_slow, p.freq_base).ceil();
            (ext_factor, attn_factor, [start.max(0.0), end.min(nd - 1.0)])
        }
    };
    let mut theta = pos as f32;
    for i0 in (0..n_dims).step_by(2) {
        let ff = factors.map_or(1.0, |f| f[i0 / 2]);
        let theta_extrap = theta / ff;
        let theta_interp = p.freq_scale * theta_extrap;
        let mut th = theta_interp;
        let mut mscale = mscale0;
        if ext_factor != 0.0 {
            let y = ((i0 / 2) as f32 - corr[0]) / (corr[1] - corr[0]).max(0.001);
            let ramp = 1.0 - y.clamp(0.0, 1.0);
            let mix = ramp * ext_factor;
            th = theta_interp * (1.0 - mix) + theta_extrap * mix;
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
        }
        out[i0] = th.cos() * mscale;
        out[i0 + 1] = th.sin() * mscale;
        theta *= theta_scale;
    }
}

/// Rotate every head of every row of `x` (`[rows, n_heads * head_dim]`) in place.
pub(crate) fn rope(x: &mut [f32], cols: usize, positions: &[u32], p: &RopeParams, factors: Option<&[f32]>) {
    let hd = p.head_dim as usize;
    let n_dims = p.n_rot as usize;
    let mut cs = vec![0f32; n_dims];
    for (row, &pos) in x.chunks_mut(cols).zip(positions) {
        cache(p, pos, factors, &mut cs);
        for head in row.chunks_mut(hd) {
            match p.mode {
                RopeMode::Normal => {
                    for i0 in (0..n_dims).step_by(2) {
                        let (c, s) = (cs[i0], cs[i0 + 1]);
                        let (x0, x1) = (head[i0], head[i0 + 1]);
                        head[i0] = x0 * c - x1 * s;
                        head[i0 + 1] = x0 * s + x1 * c;
                    }
                }
                RopeMode::Neox => {
                    let half = n_dims / 2;
                    for i0 in (0..n_dims).step_by(2) {
                        let ic = i0 / 2;
                        let (c, s) = (cs[i0], cs[i0 + 1]);
                        let (x0, x1) = (head[ic], head[ic + half]);
                        head[ic] = x0 * c - x1 * s;
                        head[ic + half] = x0 * s + x1 * c;
                    }
                }
            }
        }
    }
}
