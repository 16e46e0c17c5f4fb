//! RMS norm (`ggml_compute_forward_rms_norm_f32` followed by `ggml_mul` with the weight).

/// Normalise each `group`-wide slice of `x` in place: `x / sqrt(mean(x²) + eps) * w`.
/// The sum of squares accumulates in f64 as ggml does.
pub(crate) fn rms_norm(x: &mut [f32], group: usize, eps: f32, weight: Option<&[f32]>) {
    for g in x.chunks_mut(group) {
        let sum: f64 = g.iter().map(|&v| (v * v) as f64).sum();
        let mean = (sum / group as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for v in g.iter_mut() {
            *v *= scale;
        }
        if let Some(w) = weight {
            for (v, w) in g.iter_mut().zip(w) {
                *v *= w;
            }
        }
    }
}
