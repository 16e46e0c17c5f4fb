//! `general.architecture` → loader.

use infr_core::WeightSource;

use crate::{
    diffusion_gemma, gemma3, gemma4, gpt_oss, llama, llama4, qwen2, qwen3, qwen35, qwen3moe, Architecture, Hparams,
    Model, ModelError, TensorLoader,
};

type Loader = fn(&Hparams, &dyn WeightSource, &mut TensorLoader<'_>) -> Result<Box<dyn Architecture>, ModelError>;

/// Every architecture we run, by its GGUF name.
const ARCHITECTURES: &[(&str, Loader)] = &[
    ("llama", llama::load),
    ("llama4", llama4::load),
    ("qwen2", qwen2::load),
    ("qwen3", qwen3::load),
    ("qwen3moe", qwen3moe::load),
    ("qwen35", qwen35::load_dense),
    ("qwen35moe", qwen35::load_moe),
    ("gemma3", gemma3::load),
    ("gemma4", gemma4::load),
    ("gpt-oss", gpt_oss::load),
    ("diffusion-gemma", diffusion_gemma::load),
];

/// Names of the supported architectures.
pub fn supported_architectures() -> Vec<&'static str> {
    ARCHITECTURES.iter().map(|(n, _)| *n).collect()
}

/// Load the model in `src`: hyper-parameters, tensor table (shape-checked) and architecture.
pub fn load_model(src: &dyn WeightSource) -> Result<Model, ModelError> {
    let arch = src.metadata().require_str("general.architecture")?;
    let Some((_, loader)) = ARCHITECTURES.iter().find(|(n, _)| *n == arch) else {
        return Err(ModelError::UnknownArchitecture {
            arch: arch.to_owned(),
            supported: supported_architectures().join(", "),
        });
    };
    let hp = Hparams::read(src.metadata())?;
    let mut tl = TensorLoader::new(src);
    let arch = loader(&hp, src, &mut tl)?;
    let info = Model::info_from(src, &hp);
    Ok(Model { info, hparams: hp, weights: tl.finish(), arch })
}
