//! Every configuration key does something: each key of the table must be read, by its full
//! path (`cfg.kv.page_size`, `cfg.kernels.vulkan.flash_splits`), somewhere in the sources of
//! the crates that consume the configuration. A key that nothing reads fails here, so a knob
//! cannot be advertised in `infr config --keys` and the README without an effect.
//!
//! The other way round: every `INFR_*` variable the programs read is a key's variable or a
//! documented knob (`NON_KEY_ENV_PREFIXES`), so the configuration never warns that a variable
//! it does read is "unknown ... ignored".
//!
//! The convention this relies on: configuration values are read as `<config>.<section>.<key>`
//! (no aliases of a section), which keeps every use findable with a plain search too.

use std::path::{Path, PathBuf};

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The sources (`src/`) of every crate but the configuration's own, as one text.
fn consumer_sources() -> String {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&crates).expect("crates dir").flatten() {
        // The config crate declares the keys; reading them happens elsewhere.
        if e.file_name() != "infr-config" {
            rust_sources(&e.path().join("src"), &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} source files under {}", files.len(), crates.display());
    files.iter().map(|f| std::fs::read_to_string(f).unwrap_or_default()).collect()
}

#[test]
fn every_environment_knob_read_is_known() {
    let text = consumer_sources();
    let mut read: Vec<&str> = text
        .match_indices("(\"INFR_")
        .filter(|(i, _)| text[..*i].ends_with("env::var") || text[..*i].ends_with("env::var_os"))
        .map(|(i, _)| {
            let name = &text[i + 2..];
            &name[..name.find('"').unwrap_or(name.len())]
        })
        .collect();
    read.sort_unstable();
    read.dedup();
    assert!(read.len() > 5, "found only {read:?}");
    let key_envs: Vec<String> = infr_config::KEYS.iter().flat_map(|k| k.env_names()).collect();
    let unknown: Vec<&&str> = read
        .iter()
        .filter(|v| !key_envs.iter().any(|k| k == *v))
        .filter(|v| !infr_config::NON_KEY_ENV_PREFIXES.iter().any(|p| v.starts_with(p)))
        .collect();
    assert!(unknown.is_empty(), "read but warned as unknown by the configuration: {unknown:?}");
}

#[test]
fn every_config_key_is_read() {
    let text = consumer_sources();
    let unread: Vec<&str> = infr_config::KEYS
        .iter()
        .map(|k| k.key)
        .filter(|key| {
            // `kv.type` is spelled `kv.r#type` in Rust.
            let (head, last) = key.rsplit_once('.').unwrap_or(("", key));
            let pats = [format!(".{key}"), format!(".{head}.r#{last}")];
            let ident = |c: char| c.is_alphanumeric() || c == '_';
            !pats.iter().any(|pat| {
                text.match_indices(pat.as_str()).any(|(i, _)| {
                    // A field access: an expression before the dot (not prose such as "key `kv.type`"),
                    // and the path ends there (`.kv.type` is not `.kv.type_k`).
                    let before = text[..i].chars().next_back().is_some_and(|c| ident(c) || c == ')');
                    let after = text[i + pat.len()..].chars().next().is_none_or(|c| !ident(c));
                    before && after
                })
            })
        })
        .collect();
    assert!(unread.is_empty(), "configuration keys that nothing reads: {unread:?}");
}
