//! The quantization mixes of `infr synth`: which type each tensor gets, as llama.cpp's
//! `llama-quantize` decides it for the same mix.

use infr_gguf::GgmlType;

use super::SynthError;

/// The quantization mixes `infr synth` writes, named like llama.cpp's `llama-quantize` types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum SynthQuant {
    /// Q4_K with Q6_K for the output, and for `attn_v` / `ffn_down` of the "more bits" layers.
    Q4_K_M,
    /// Q8_0 everywhere.
    Q8_0,
    /// Q4_0, with a Q6_K output (as llama.cpp does).
    Q4_0,
    /// F16 everywhere.
    F16,
    /// MXFP4 experts, Q8_0 elsewhere (the form gpt-oss is published in).
    MXFP4_MOE,
    /// Q2_K, with Q3_K for `ffn_down` and `attn_output`, Q3_K or Q4_K (grouped-query
    /// attention of 4 or more) for `attn_v`, and a Q6_K output.
    Q2_K,
}

impl SynthQuant {
    /// All mixes, in the order they are listed to users.
    pub const ALL: [SynthQuant; 6] = [Self::Q4_K_M, Self::Q8_0, Self::Q4_0, Self::F16, Self::MXFP4_MOE, Self::Q2_K];

    /// Parse a name (case-insensitive): `Q4_K_M`, `Q8_0`, `Q4_0`, `F16`, `MXFP4_MOE`, `Q2_K`.
    pub fn from_name(name: &str) -> Result<Self, SynthError> {
        Self::ALL.into_iter().find(|q| q.name().eq_ignore_ascii_case(name)).ok_or_else(|| SynthError::UnknownQuant {
            name: name.to_owned(),
            valid: Self::ALL.map(|q| q.name()).join(", "),
        })
    }

    /// The name as llama.cpp spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Q4_K_M => "Q4_K_M",
            Self::Q8_0 => "Q8_0",
            Self::Q4_0 => "Q4_0",
            Self::F16 => "F16",
            Self::MXFP4_MOE => "MXFP4_MOE",
            Self::Q2_K => "Q2_K",
        }
    }

    /// `general.file_type` (`enum llama_ftype`).
    pub fn file_type(self) -> u32 {
        match self {
            Self::Q4_K_M => 15,
            Self::Q8_0 => 7,
            Self::Q4_0 => 2,
            Self::F16 => 1,
            Self::MXFP4_MOE => 38,
            Self::Q2_K => 10,
        }
    }

    /// The type most tensors get.
    pub fn default_type(self) -> GgmlType {
        match self {
            Self::Q4_K_M => GgmlType::Q4_K,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::F16 => GgmlType::F16,
            Self::MXFP4_MOE => GgmlType::Q8_0,
            Self::Q2_K => GgmlType::Q2_K,
        }
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third one
/// in between get more bits in the `_M` mixes.
pub fn use_more_bits(il: usize, n_layer: usize) -> bool {
    il < n_layer / 8 || il >= 7 * n_layer / 8 || (il as i64 - (n_layer / 8) as i64).rem_euclid(3) == 2
}

/// What of the model the quantizer's rules look at besides the tensor itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixModel {
    /// Decoder layers.
    pub n_layer: usize,
    /// Query heads per key/value head (`n_gqa()`).
    pub n_gqa: usize,
    /// Routed experts (0 for a dense model).
    pub n_expert: usize,
    /// Whether the file has its own `output.weight` (false: tied embeddings).
    pub has_output: bool,
}

/// The type llama.cpp's quantizer (`llama_tensor_get_type`) gives tensor `name` (layer `il`,
/// `dims` dimensions, rows of `dims[0]`) of `model` in a `quant` file; with tied embeddings
/// `token_embd` gets the output's type.
pub fn tensor_type(quant: SynthQuant, name: &str, il: usize, model: MixModel, dims: &[u64]) -> GgmlType {
    let (n_layer, has_output) = (model.n_layer, model.has_output);
    let default = quant.default_type();
    // llama-quantize leaves norms, biases, sinks, routers and conv taps in f32.
    if dims.len() < 2
        || name.ends_with("_norm.weight")
        || name.ends_with(".bias")
        || name.contains("ffn_gate_inp")
        || name.contains("ssm_conv1d")
    {
        return GgmlType::F32;
    }
    if quant == SynthQuant::MXFP4_MOE && name.contains("_exps.weight") && dims[0] % 32 == 0 {
        return GgmlType::MXFP4;
    }
    if !default.is_quantized() {
        return default;
    }
    let ne0 = dims[0];
    let mut ty = default;
    if name == "output.weight" || (!has_output && name == "token_embd.weight") {
        if ne0 % default.info().block_size as u64 != 0 {
            ty = GgmlType::Q8_0;
        } else if default != GgmlType::Q8_0 {
            ty = GgmlType::Q6_K;
        }
    } else if quant == SynthQuant::Q4_K_M
        && (name.contains("attn_v.weight") || name.contains("ffn_down"))
        && use_more_bits(il, n_layer)
    {
        ty = GgmlType::Q6_K;
    } else if quant == SynthQuant::Q2_K {
        ty = q2_k_mix_type(name, model).unwrap_or(ty);
    }
    // `tensor_type_fallback`: rows that are not whole super-blocks.
    if ne0 % ty.info().block_size as u64 != 0 {
        ty = match ty {
            GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::IQ4_NL,
            GgmlType::Q4_K => GgmlType::Q5_0,
            GgmlType::Q6_K => GgmlType::Q8_0,
            other => other,
        };
        if ne0 % ty.info().block_size as u64 != 0 {
            ty = GgmlType::F16;
        }
    }
    ty
}

/// The Q2_K mix's exceptions to Q2_K (`LLAMA_FTYPE_MOSTLY_Q2_K`): `attn_v` gets Q4_K with
/// grouped-query attention of 4 or more, else Q3_K (Q8_0 with 8 experts); `attn_output` Q3_K
/// (Q5_K with 8 experts); `ffn_down` (dense or experts) Q3_K.
fn q2_k_mix_type(name: &str, model: MixModel) -> Option<GgmlType> {
    if name.contains("attn_v.weight") {
        if model.n_expert == 8 {
            return Some(GgmlType::Q8_0);
        }
        return Some(if model.n_gqa >= 4 { GgmlType::Q4_K } else { GgmlType::Q3_K });
    }
    if name.contains("attn_output.weight") {
        return Some(if model.n_expert == 8 { GgmlType::Q5_K } else { GgmlType::Q3_K });
    }
    name.contains("ffn_down").then_some(GgmlType::Q3_K)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_layers_match_llama_cpp() {
        // 36 layers: n/8 = 4, 7n/8 = 31.
        let more: Vec<usize> = (0..36).filter(|&i| use_more_bits(i, 36)).collect();
        assert_eq!(more, [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35]);
        // 2 layers: n/8 = 0, 7n/8 = 1.
        assert_eq!((0..2).map(|i| use_more_bits(i, 2)).collect::<Vec<_>>(), [false, true]);
    }

    #[test]
    fn fallback_types_for_narrow_rows() {
        let t = |q, name, ne0| tensor_type(q, name, 5, model(36, 4, 0), &[ne0, 64]);
        assert_eq!(t(SynthQuant::Q4_K_M, "blk.5.attn_q.weight", 128), GgmlType::Q5_0);
        assert_eq!(t(SynthQuant::Q4_K_M, "blk.5.attn_q.weight", 256), GgmlType::Q4_K);
        assert_eq!(t(SynthQuant::Q4_K_M, "output.weight", 128), GgmlType::Q8_0);
        assert_eq!(t(SynthQuant::Q4_0, "output.weight", 256), GgmlType::Q6_K);
        assert_eq!(t(SynthQuant::Q4_0, "output.weight", 96), GgmlType::Q8_0);
        assert_eq!(t(SynthQuant::Q8_0, "output.weight", 256), GgmlType::Q8_0);
        assert_eq!(t(SynthQuant::F16, "output.weight", 256), GgmlType::F16);
        assert_eq!(tensor_type(SynthQuant::F16, "blk.0.attn_norm.weight", 0, model(2, 1, 0), &[256]), GgmlType::F32);
        assert_eq!(t(SynthQuant::Q2_K, "blk.5.ffn_up.weight", 96), GgmlType::IQ4_NL);
        assert_eq!(t(SynthQuant::Q2_K, "blk.5.ffn_down.weight", 160), GgmlType::IQ4_NL);
    }

    fn model(n_layer: usize, n_gqa: usize, n_expert: usize) -> MixModel {
        MixModel { n_layer, n_gqa, n_expert, has_output: true }
    }

    /// llama-quantize's Q2_K mix: Q2_K but for attn_v (by GQA ratio, 8-expert models),
    /// attn_output and ffn_down (experts too); norms and routers f32; output Q6_K.
    #[test]
    fn q2_k_mix_matches_llama_quantize() {
        let t = |name, m| tensor_type(SynthQuant::Q2_K, name, 3, m, &[4096, 4096]);
        let dense_gqa4 = model(36, 4, 0);
        let dense_mha = model(32, 1, 0);
        assert_eq!(t("blk.3.attn_q.weight", dense_gqa4), GgmlType::Q2_K);
        assert_eq!(t("blk.3.ffn_gate.weight", dense_gqa4), GgmlType::Q2_K);
        assert_eq!(t("blk.3.attn_v.weight", dense_gqa4), GgmlType::Q4_K);
        assert_eq!(t("blk.3.attn_v.weight", dense_mha), GgmlType::Q3_K);
        assert_eq!(t("blk.3.attn_v.weight", model(32, 4, 8)), GgmlType::Q8_0);
        assert_eq!(t("blk.3.attn_output.weight", dense_gqa4), GgmlType::Q3_K);
        assert_eq!(t("blk.3.attn_output.weight", model(32, 4, 8)), GgmlType::Q5_K);
        assert_eq!(t("blk.3.ffn_down.weight", dense_gqa4), GgmlType::Q3_K);
        assert_eq!(t("blk.3.ffn_down_exps.weight", model(48, 8, 128)), GgmlType::Q3_K);
        assert_eq!(t("blk.3.ffn_gate_inp.weight", model(48, 8, 128)), GgmlType::F32);
        assert_eq!(t("output.weight", dense_gqa4), GgmlType::Q6_K);
        assert_eq!(SynthQuant::from_name("q2_k").map(SynthQuant::file_type).ok(), Some(10));
    }
}
