//! infr-config: one typed configuration, resolved once at startup.
//!
//! Layers, later wins: built-in defaults < config file (`--config PATH`, `$INFR_CONFIG`, `./infr.toml`,
//! `$XDG_CONFIG_HOME/infr/config.toml` or `~/.config/infr/config.toml`) < `INFR_*` environment variables
//! (`INFR_SECTION_KEY`, plus aliases such as `INFR_CTX`, `INFR_API_KEY`) < `--set path.to.key=value` and
//! command-line flags (a flag beats a `--set` of the same key, with a warning).
//!
//! The layers are merged as dotted leaves with their [`Source`], checked against the [`KEYS`] schema, then
//! deserialized into [`Config`]. Unknown keys are warnings with a did-you-mean; wrong types are fatal
//! [`ConfigError::Type`]s naming the key and the layer.
//!
//! ```
//! use infr_config::ConfigBuilder;
//! let r = ConfigBuilder::new()
//!     .no_discovery()
//!     .env([("INFR_CTX", "8192")])
//!     .set_args(&["kernels.vulkan.flash_splits=2"])
//!     .flag("sampling.temperature", 0.2)
//!     .resolve()?;
//! assert_eq!(r.config.context.size, infr_config::ContextSize::Tokens(8192));
//! assert_eq!(r.config.kernels.vulkan.flash_splits, 2);
//! println!("{}", r.explain());
//! # Ok::<(), infr_config::ConfigError>(())
//! ```

mod builder;
mod error;
mod explain;
mod provenance;
mod schema;
mod suggest;
mod units;
mod value;

pub use builder::{ConfigBuilder, Resolved};
pub use error::ConfigError;
pub use explain::keys_table_markdown;
pub use provenance::{Entry, Source};
pub use schema::{
    key_spec, Config, ContextConfig, DeviceConfig, KernelsConfig, KeySpec, Kind, KvConfig, KvType, LogConfig,
    ModelConfig, MultiConfig, ProfConfig, ReasoningFormat, SamplingConfig, ServerConfig, VulkanKernelsConfig, INT,
    KEYS, NON_KEY_ENV_PREFIXES, UFLOAT, UINT,
};
pub use suggest::{did_you_mean, edit_distance};
pub use units::{ContextParseError, ContextSize, Seed, SizeParseError, SizeSpec};
pub use value::{coerce, expected, type_name, FlagValue, RawValue};

#[cfg(test)]
mod schema_tests {
    use super::*;

    /// Every struct field has a KEYS line and vice versa: a tree with every key set deserializes, and the
    /// serialized config has exactly the KEYS leaves.
    #[test]
    fn keys_table_matches_structs() {
        let mut sets = Vec::new();
        for k in KEYS {
            let v = match k.kind {
                Kind::Bool => "true".to_string(),
                Kind::Int { min, .. } => min.max(1).to_string(),
                Kind::Float { min, .. } => min.max(0.5).to_string(),
                Kind::Str => "x".into(),
                Kind::Choice(c) => c[0].to_string(),
                Kind::Size => "1g".into(),
                Kind::Context => "32k".into(),
                Kind::Seed => "7".into(),
            };
            sets.push(format!("{}={v}", k.key));
        }
        let r = ConfigBuilder::new().no_discovery().env(Vec::<(String, String)>::new()).set_args(&sets).resolve();
        let r = r.unwrap_or_else(|e| panic!("{e}"));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let tree = toml::Value::try_from(&r.config).unwrap_or_else(|e| panic!("{e}"));
        let mut leaves = Vec::new();
        fn walk(v: &toml::Value, prefix: &str, out: &mut Vec<String>) {
            if let toml::Value::Table(t) = v {
                for (k, v) in t {
                    let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(v, &p, out);
                }
            } else {
                out.push(prefix.to_string());
            }
        }
        walk(&tree, "", &mut leaves);
        leaves.sort();
        let mut keys: Vec<String> = KEYS.iter().map(|k| k.key.to_string()).collect();
        keys.sort();
        assert_eq!(leaves, keys);
        // Env names are unique.
        let mut env: Vec<String> = KEYS.iter().flat_map(|k| k.env_names()).collect();
        let n = env.len();
        env.sort();
        env.dedup();
        assert_eq!(env.len(), n, "duplicate env names");
        // Defaults resolve.
        let d = Config::defaults();
        assert_eq!(d.context.size, ContextSize::Tokens(4096));
    }
}
