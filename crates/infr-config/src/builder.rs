//! Layering: built-in defaults < config file < `INFR_*` environment < `--set` and flags.
//!
//! Each layer contributes leaves (dotted key → value) checked against the key's [`Kind`]; the merged leaves
//! keep their provenance and are then deserialized into [`Config`]. Unknown keys warn with a suggestion;
//! type errors are fatal and name the key and the layer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::provenance::{Entry, Source};
use crate::schema::{key_spec, Config, KeySpec, KEYS, NON_KEY_ENV_PREFIXES};
use crate::suggest::did_you_mean;
use crate::value::{coerce, FlagValue, RawValue};

/// Largest config file read (a real one is a few KiB; this keeps a mistaken path to a huge
/// file from being read into memory).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Collects the layers, then [`ConfigBuilder::resolve`]s them once.
#[derive(Debug, Clone, Default)]
pub struct ConfigBuilder {
    file: Option<PathBuf>,
    discover: bool,
    cwd: Option<PathBuf>,
    env: Option<Vec<(String, String)>>,
    sets: Vec<String>,
    flags: Vec<(String, Option<String>, FlagValue)>,
}

/// The outcome: the typed config, where every value came from, and the warnings (already logged).
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The typed configuration.
    pub config: Config,
    /// Every set key (dotted) with its value and source; unset optional keys are absent.
    pub provenance: BTreeMap<String, Entry>,
    /// Unknown keys, overridden `--set`s, conflicting env aliases: each also logged with `tracing::warn!`.
    pub warnings: Vec<String>,
    /// The config file that was read, if any.
    pub file: Option<PathBuf>,
}

impl Resolved {
    /// Where a key's value came from (`None` for an unset optional key or an unknown key).
    pub fn source(&self, key: &str) -> Option<&Source> {
        self.provenance.get(key).map(|e| &e.source)
    }
}

impl ConfigBuilder {
    /// A builder that reads the process environment and discovers the config file, unless told otherwise.
    pub fn new() -> Self {
        ConfigBuilder { discover: true, ..Default::default() }
    }

    /// An explicit config file (`--config PATH`), which must exist; `None` keeps discovery
    /// (`$INFR_CONFIG`, `./infr.toml`, `$XDG_CONFIG_HOME/infr/config.toml`, `~/.config/infr/config.toml`).
    pub fn file(mut self, path: Option<PathBuf>) -> Self {
        if path.is_some() {
            self.file = path;
        }
        self
    }

    /// Turns config file discovery off (an explicit [`ConfigBuilder::file`] is still read).
    pub fn no_discovery(mut self) -> Self {
        self.discover = false;
        self
    }

    /// The directory where `infr.toml` is looked for (default: the process's current directory).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// The environment to read instead of the process's (for tests and embedding).
    pub fn env<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.env = Some(vars.into_iter().map(|(k, v)| (k.into(), v.into())).collect());
        self
    }

    /// `--set key=value` arguments, in command-line order (later wins).
    pub fn set_args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.sets.extend(args.iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// A command-line flag mapped onto `key`; its display name comes from the schema (e.g. `--ctx-size`).
    /// Flags win over `--set` of the same key, with a warning naming both.
    pub fn flag(mut self, key: &str, value: impl Into<FlagValue>) -> Self {
        self.flags.push((key.to_string(), None, value.into()));
        self
    }

    /// Like [`ConfigBuilder::flag`] with an explicit flag name for messages and provenance.
    pub fn flag_named(mut self, key: &str, flag: &str, value: impl Into<FlagValue>) -> Self {
        self.flags.push((key.to_string(), Some(flag.to_string()), value.into()));
        self
    }

    /// Merges all layers and deserializes the typed config.
    pub fn resolve(self) -> Result<Resolved, ConfigError> {
        let env: Vec<(String, String)> = match self.env.clone() {
            Some(e) => e,
            None => std::env::vars().collect(),
        };
        let mut warnings = Vec::new();
        let mut warn = |msg: String| {
            tracing::warn!("{msg}");
            warnings.push(msg);
        };
        let mut entries: BTreeMap<String, Entry> = BTreeMap::new();

        // 1. Defaults.
        for spec in KEYS.iter().filter(|k| !k.default.is_empty()) {
            let value = parse_literal(spec.default).map_err(|e| ConfigError::Schema(format!("{}: {e}", spec.key)))?;
            let value = coerce(&spec.kind, &RawValue::Toml(value))
                .map_err(|e| ConfigError::Schema(format!("default of {}: {e}", spec.key)))?;
            entries.insert(spec.key.to_string(), Entry { value, source: Source::Default });
        }

        // 2. Config file.
        let file = self.config_file(&env)?;
        if let Some(path) = &file {
            let read = |e| ConfigError::Read { path: path.clone(), source: e };
            let len = std::fs::metadata(path).map_err(read)?.len();
            if len > MAX_CONFIG_BYTES {
                return Err(ConfigError::TooLarge { path: path.clone(), bytes: len, max: MAX_CONFIG_BYTES });
            }
            let text = std::fs::read_to_string(path).map_err(read)?;
            let table: toml::Table = toml::from_str(&text)
                .map_err(|e| ConfigError::Parse { path: path.clone(), message: e.to_string().trim().to_string() })?;
            let source = Source::File(path.clone());
            flatten_file(&table, "", &source, &mut entries, &mut warn)?;
        }

        // 3. Environment.
        apply_env(&env, &mut entries, &mut warn)?;

        // 4. --set, then flags (which win, with a warning when they override a --set).
        let mut set_keys: BTreeMap<String, String> = BTreeMap::new();
        for arg in &self.sets {
            let (key, value) = arg.split_once('=').ok_or_else(|| ConfigError::BadSet { arg: arg.clone() })?;
            let key = key.trim();
            let Some(spec) = key_spec(key) else {
                warn(unknown_key_message(key, &format!("--set {arg}")));
                continue;
            };
            let source = Source::Set(arg.clone());
            let value = coerce(&spec.kind, &RawValue::Text(value.to_string()))
                .map_err(|message| ConfigError::Type { key: key.to_string(), message, origin: source.clone() })?;
            set_keys.insert(key.to_string(), arg.clone());
            entries.insert(key.to_string(), Entry { value, source });
        }
        for (key, name, FlagValue(raw)) in &self.flags {
            let Some(spec) = key_spec(key) else {
                warn(unknown_key_message(key, "a command-line flag"));
                continue;
            };
            let name = name.clone().unwrap_or_else(|| flag_display(spec));
            let source = Source::Flag(name.clone());
            let value = coerce(&spec.kind, raw).map_err(|message| ConfigError::Type {
                key: key.clone(),
                message,
                origin: source.clone(),
            })?;
            if let Some(arg) = set_keys.remove(key.as_str()) {
                warn(format!("flag {name}={} overrides --set {arg} (both set {key})", show(&value)));
            }
            entries.insert(key.clone(), Entry { value, source });
        }

        let config = build_config(&entries)?;
        Ok(Resolved { config, provenance: entries, warnings, file })
    }

    /// The file to read: explicit, `$INFR_CONFIG`, `./infr.toml`, then the XDG location.
    fn config_file(&self, env: &[(String, String)]) -> Result<Option<PathBuf>, ConfigError> {
        let get = |k: &str| env.iter().rev().find(|(n, v)| n == k && !v.is_empty()).map(|(_, v)| v.clone());
        let explicit = self.file.clone().or_else(|| get("INFR_CONFIG").map(PathBuf::from));
        if let Some(p) = explicit {
            // A directory, FIFO or device is not "missing": say what it is (and never open a
            // FIFO, which blocks).
            return match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => Ok(Some(p)),
                Ok(m) => {
                    let kind = if m.is_dir() { "a directory" } else { "not a regular file (a pipe, socket or device)" };
                    Err(ConfigError::NotAFile { path: p, kind })
                }
                Err(_) => Err(ConfigError::FileNotFound { path: p }),
            };
        }
        if !self.discover {
            return Ok(None);
        }
        let cwd = self.cwd.clone().or_else(|| std::env::current_dir().ok());
        let mut candidates: Vec<PathBuf> = cwd.into_iter().map(|d| d.join("infr.toml")).collect();
        let xdg =
            get("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| get("HOME").map(|h| Path::new(&h).join(".config")));
        candidates.extend(xdg.map(|d| d.join("infr").join("config.toml")));
        Ok(candidates.into_iter().find(|p| p.is_file()))
    }
}

/// The flag name shown for a key: the long form of its schema flag, or `--set`-style path.
fn flag_display(spec: &KeySpec) -> String {
    match spec.flag {
        Some(f) => f.split(',').map(str::trim).find(|f| f.starts_with("--")).unwrap_or(f).to_string(),
        None => format!("--{}", spec.key),
    }
}

/// A value as written in messages and `infr config`.
pub(crate) fn show(v: &toml::Value) -> String {
    v.to_string()
}

/// Parses a TOML literal (`0.8`, `"auto"`, `true`).
fn parse_literal(lit: &str) -> Result<toml::Value, String> {
    let t: toml::Table = toml::from_str(&format!("v = {lit}")).map_err(|e| e.to_string())?;
    t.get("v").cloned().ok_or_else(|| "empty literal".into())
}

fn unknown_key_message(key: &str, origin: &str) -> String {
    match did_you_mean(key, KEYS.iter().map(|k| k.key)) {
        Some(s) => format!("unknown config key `{key}` in {origin}; did you mean `{s}`?"),
        None => format!("unknown config key `{key}` in {origin} (ignored; `infr config` lists all keys)"),
    }
}

/// Walks a file's table: known keys are checked and stored, known sections recursed into, the rest warned.
fn flatten_file(
    table: &toml::Table,
    prefix: &str,
    source: &Source,
    entries: &mut BTreeMap<String, Entry>,
    warn: &mut impl FnMut(String),
) -> Result<(), ConfigError> {
    for (k, v) in table {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        if let Some(spec) = key_spec(&path) {
            let value = coerce(&spec.kind, &RawValue::Toml(v.clone())).map_err(|message| ConfigError::Type {
                key: path.clone(),
                message,
                origin: source.clone(),
            })?;
            entries.insert(path, Entry { value, source: source.clone() });
            continue;
        }
        let section = format!("{path}.");
        let is_section = KEYS.iter().any(|s| s.key.starts_with(&section));
        match v {
            toml::Value::Table(t) if is_section => flatten_file(t, &path, source, entries, warn)?,
            _ if is_section => {
                return Err(ConfigError::Type {
                    key: path,
                    message: format!("expected a table (section), got {}", RawValue::Toml(v.clone()).shown()),
                    origin: source.clone(),
                })
            }
            _ => warn(unknown_key_message(&path, &source.to_string())),
        }
    }
    Ok(())
}

/// Applies `INFR_*` variables (and the foreign aliases like `HF_ENDPOINT`) in each key's env-name order.
fn apply_env(
    env: &[(String, String)],
    entries: &mut BTreeMap<String, Entry>,
    warn: &mut impl FnMut(String),
) -> Result<(), ConfigError> {
    // An empty variable counts as unset, except for secrets: `INFR_API_KEY=` is taken as an
    // (empty) key so that the server can refuse it rather than start open without a word.
    let lookup = |name: &str, keep_empty: bool| {
        env.iter().rev().find(|(n, v)| n == name && (keep_empty || !v.is_empty())).map(|(_, v)| v.clone())
    };
    let mut known: Vec<String> = Vec::new();
    for spec in KEYS {
        let names = spec.env_names();
        let present: Vec<(String, String)> =
            names.iter().filter_map(|n| lookup(n, spec.secret).map(|v| (n.clone(), v))).collect();
        known.extend(names);
        let Some((name, value)) = present.first().cloned() else { continue };
        for (other, v) in present.iter().skip(1) {
            if *v != value {
                warn(format!("{name}={value:?} wins over {other}={v:?} (both set {})", spec.key));
            }
        }
        // Hugging Face's own boolean variables mean what `huggingface_hub` reads them as: true
        // for 1/ON/YES/TRUE, false for anything else (`HF_HUB_OFFLINE=2` is not an error).
        let value = if name.starts_with("HF_") && matches!(spec.kind, crate::schema::Kind::Bool) {
            let truthy = matches!(value.trim().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE");
            truthy.to_string()
        } else {
            value
        };
        let source = Source::Env(name);
        let v = coerce(&spec.kind, &RawValue::Text(value)).map_err(|message| ConfigError::Type {
            key: spec.key.to_string(),
            message,
            origin: source.clone(),
        })?;
        entries.insert(spec.key.to_string(), Entry { value: v, source });
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in env {
        if !name.starts_with("INFR_") || known.iter().any(|k| k == name) || !seen.insert(name.clone()) {
            continue;
        }
        if NON_KEY_ENV_PREFIXES.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let msg = match did_you_mean(name, known.iter().filter(|k| k.starts_with("INFR_")).map(String::as_str)) {
            Some(s) => format!("unknown environment variable {name}; did you mean {s}?"),
            None => format!("unknown environment variable {name} (no such config key; ignored)"),
        };
        warn(msg);
    }
    Ok(())
}

/// Builds the nested TOML tree from the dotted leaves and deserializes it.
fn build_config(entries: &BTreeMap<String, Entry>) -> Result<Config, ConfigError> {
    let mut root = toml::Table::new();
    // Every section exists even when all its keys are unset (`Option` fields then deserialize as `None`).
    for spec in KEYS {
        let mut t = &mut root;
        let parts: Vec<&str> = spec.key.split('.').collect();
        for p in &parts[..parts.len() - 1] {
            let next = t.entry(p.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match next {
                toml::Value::Table(tt) => t = tt,
                _ => return Err(ConfigError::Schema(format!("{}: {p} is both a key and a section", spec.key))),
            }
        }
    }
    for (key, e) in entries {
        let mut parts: Vec<&str> = key.split('.').collect();
        let Some(leaf) = parts.pop() else { continue };
        let mut t = &mut root;
        for p in parts {
            let next = t.entry(p.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            t = match next {
                toml::Value::Table(tt) => tt,
                _ => return Err(ConfigError::Schema(format!("{key}: {p} is both a key and a section"))),
            };
        }
        t.insert(leaf.to_string(), e.value.clone());
    }
    toml::Value::Table(root).try_into::<Config>().map_err(|e| ConfigError::Schema(e.to_string().trim().to_string()))
}

impl Config {
    /// The built-in defaults (what an empty environment, no file and no flags resolve to).
    pub fn defaults() -> Config {
        match ConfigBuilder::new().no_discovery().env(Vec::<(String, String)>::new()).resolve() {
            Ok(r) => r.config,
            Err(e) => panic!("built-in config defaults are invalid (schema bug): {e}"),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::defaults()
    }
}
