//! Elementwise ops: gated activations and soft-capping.

use half::f16;
use infr_core::Activation;
use rayon::prelude::*;

use crate::simd::vecf;

/// Values per parallel task of an elementwise op.
const CHUNK: usize = 4096;

/// `ggml_gelu_f32`: tanh approximation.
fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// GELU as ggml's CPU computes it with `GGML_GELU_FP16`: through an f16 table (input and
/// output rounded to f16), saturating outside ±10. `glu` uses the precomputed table; this
/// direct form checks it.
#[cfg(test)]
fn gelu_fp16_table(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let xh = f16::from_f32(x).to_f32();
        f16::from_f32(gelu(xh)).to_f32()
    }
}

/// [`gelu_fp16_table`] for every f16 input, indexed by its bits (ggml keeps the same table).
fn gelu_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(|b| f16::from_f32(gelu(f16::from_bits(b).to_f32())).to_f32()).collect())
}

/// `gate = act(gate) * up`, in place.
pub(crate) fn glu(gate: &mut [f32], up: &[f32], act: Activation) {
    match act {
        Activation::Silu => {
            gate.par_chunks_mut(CHUNK).zip(up.par_chunks(CHUNK)).for_each(|(g, u)| vecf::silu_mul(g, u));
        }
        Activation::GeluTanhExact => {
            gate.par_chunks_mut(CHUNK).zip(up.par_chunks(CHUNK)).for_each(|(g, u)| {
                for (g, u) in g.iter_mut().zip(u) {
                    *g = gelu(*g) * u;
                }
            });
        }
        Activation::GeluTanh => {
            let table = gelu_table();
            gate.par_chunks_mut(CHUNK).zip(up.par_chunks(CHUNK)).for_each(|(g, u)| {
                for (g, u) in g.iter_mut().zip(u) {
                    let x = *g;
                    let y = if x <= -10.0 {
                        0.0
                    } else if x >= 10.0 {
                        x
                    } else {
                        table[f16::from_f32(x).to_bits() as usize]
                    };
                    *g = y * u;
                }
            });
        }
        Activation::Sigmoid => {
            gate.par_chunks_mut(CHUNK).zip(up.par_chunks(CHUNK)).for_each(|(g, u)| {
                for (g, u) in g.iter_mut().zip(u) {
                    *g = u / (1.0 + (-*g).exp());
                }
            });
        }
        Activation::SwigluOai => {
            let (alpha, limit) = (infr_core::SWIGLU_OAI_ALPHA, infr_core::SWIGLU_OAI_LIMIT);
            gate.par_chunks_mut(CHUNK).zip(up.par_chunks(CHUNK)).for_each(|(g, u)| {
                for (g, u) in g.iter_mut().zip(u) {
                    let x = g.min(limit);
                    let y = u.clamp(-limit, limit);
                    *g = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
                }
            });
        }
    }
}

/// Columns `[offset, offset + len)` of each `period` columns of `x`.
pub(crate) fn slice_cols(x: &[f32], period: usize, offset: usize, len: usize) -> Vec<f32> {
    x.chunks(period).flat_map(|g| &g[offset..offset + len]).copied().collect()
}

/// `cap * tanh(x / cap)` in place (as ggml: scale, tanh, scale).
pub(crate) fn softcap(x: &mut [f32], cap: f32) {
    for v in x.iter_mut() {
        *v = (*v * (1.0 / cap)).tanh() * cap;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_table_equals_direct_rounding() {
        let xs: Vec<f32> = (0..20_001).map(|i| -12.0 + i as f32 * 0.0012).collect();
        let mut g = xs.clone();
        glu(&mut g, &vec![1.0; xs.len()], Activation::GeluTanh);
        for (x, y) in xs.iter().zip(&g) {
            assert_eq!(*y, gelu_fp16_table(*x), "gelu({x})");
        }
    }
}
