//! Elementwise ops: gated activations and soft-capping.

use half::f16;
use infr_core::Activation;

/// `ggml_gelu_f32`: tanh approximation.
fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// GELU as ggml's CPU computes it with `GGML_GELU_FP16`: through an f16 table (input and
/// output rounded to f16), saturating outside ±10.
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

/// `gate = act(gate) * up`, in place.
pub(crate) fn glu(gate: &mut [f32], up: &[f32], act: Activation) {
    match act {
        Activation::Silu => {
            for (g, u) in gate.iter_mut().zip(up) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
        }
        Activation::GeluTanh => {
            for (g, u) in gate.iter_mut().zip(up) {
                *g = gelu_fp16_table(*g) * u;
            }
        }
    }
}

/// `cap * tanh(x / cap)` in place (as ggml: scale, tanh, scale).
pub(crate) fn softcap(x: &mut [f32], cap: f32) {
    for v in x.iter_mut() {
        *v = (*v * (1.0 / cap)).tanh() * cap;
    }
}
