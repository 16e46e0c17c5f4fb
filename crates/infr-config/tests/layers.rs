//! Layer precedence, provenance, warnings and errors of the config resolver.

use std::path::{Path, PathBuf};

use infr_config::{
    keys_table_markdown, Config, ConfigBuilder, ConfigError, ContextSize, KvType, Resolved, Seed, SizeSpec, Source,
    KEYS,
};

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
    p
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
}

/// A builder isolated from the process: no env, an empty cwd, no home.
fn isolated(dir: &Path) -> ConfigBuilder {
    ConfigBuilder::new().cwd(dir).env(Vec::<(String, String)>::new())
}

fn ok(b: ConfigBuilder) -> Resolved {
    b.resolve().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn defaults_match_the_spec() {
    let d = tmp();
    let r = ok(isolated(d.path()));
    let c = &r.config;
    assert_eq!(c, &Config::defaults());
    assert_eq!((c.context.size, c.context.ubatch), (ContextSize::Tokens(4096), 512));
    assert_eq!((c.sampling.temperature, c.sampling.top_k, c.sampling.top_p, c.sampling.min_p), (0.8, 40, 0.95, 0.05));
    assert_eq!((c.sampling.repeat_penalty, c.sampling.repeat_last_n, c.sampling.max_tokens), (1.0, 64, -1));
    assert_eq!(c.sampling.seed, Seed::Random);
    assert_eq!((c.device.dev.as_str(), c.device.threads, c.device.gpu_layers), ("auto", 0, -1));
    assert_eq!((c.kv.r#type, c.kv.page_size), (KvType::F16, 256));
    assert_eq!((c.server.host.as_str(), c.server.port, c.server.parallel), ("127.0.0.1", 8080, 4));
    assert_eq!((c.server.queue_size, c.server.request_timeout_s, c.server.metrics), (64, 600, false));
    assert_eq!(c.server.api_key, None);
    let v = &c.kernels.vulkan;
    assert_eq!((v.flash_splits, v.coopmat, v.int_dot, v.validation), (0, true, true, false));
    assert_eq!((c.prof.ops, c.prof.op_shapes, c.log.level.as_str()), (false, false, "info"));
    assert_eq!(r.source("context.size"), Some(&Source::Default));
    assert!(r.warnings.is_empty() && r.file.is_none());
}

#[test]
fn four_layers_later_wins_with_provenance() {
    let d = tmp();
    let file = write(
        d.path(),
        "infr.toml",
        "[context]\nsize = 1000\nubatch = 1000\n[kv]\npage_size = 1000\n[sampling]\ntemperature = 1\n",
    );
    let r = ok(isolated(d.path())
        .env(env(&[("INFR_KV_PAGE_SIZE", "2000"), ("INFR_CONTEXT_UBATCH", "2000"), ("INFR_CTX", "2000")]))
        .set_args(&["context.ubatch=3000", "context.size=3000"])
        .flag("context.size", 4000u32));
    let c = &r.config.context;
    assert_eq!((c.size, c.ubatch, r.config.kv.page_size), (ContextSize::Tokens(4000), 3000, 2000));
    assert_eq!(r.config.sampling.temperature, 1.0);
    assert_eq!(r.source("sampling.temperature"), Some(&Source::File(file.clone())));
    assert_eq!(r.source("kv.page_size"), Some(&Source::Env("INFR_KV_PAGE_SIZE".into())));
    assert_eq!(r.source("context.ubatch"), Some(&Source::Set("context.ubatch=3000".into())));
    assert_eq!(r.source("context.size"), Some(&Source::Flag("--ctx-size".into())));
    assert_eq!(r.source("server.port"), Some(&Source::Default));
    assert_eq!(r.file.as_deref(), Some(file.as_path()));

    let text = r.explain();
    assert!(text.contains(&format!("# config file: {}", file.display())), "{text}");
    let line = |k: &str| text.lines().find(|l| l.starts_with(k)).unwrap_or_default().to_string();
    assert!(line("context.size =").contains("4000") && line("context.size =").ends_with("# flag --ctx-size"), "{text}");
    assert!(line("kv.page_size =").ends_with("# env INFR_KV_PAGE_SIZE"), "{text}");
    assert!(line("context.ubatch =").ends_with("# --set context.ubatch=3000"), "{text}");
    assert!(line("sampling.temperature =").contains(&format!("# file {}", file.display())), "{text}");
    assert!(line("server.port =").ends_with("# default"), "{text}");
    assert!(line("model.path_or_ref").contains("(unset)"), "{text}");
}

#[test]
fn flag_overriding_set_warns_naming_both() {
    let d = tmp();
    let r = ok(isolated(d.path()).set_args(&["sampling.top_k=5"]).flag("sampling.top_k", 7));
    assert_eq!(r.config.sampling.top_k, 7);
    assert_eq!(r.warnings.len(), 1);
    let w = &r.warnings[0];
    assert!(w.contains("--top-k") && w.contains("--set sampling.top_k=5") && w.contains("overrides"), "{w}");
    // No flag: no warning; a knob without a flag is reachable by --set only.
    let r = ok(isolated(d.path()).set_args(&["kernels.vulkan.flash_splits=2", "kernels.vulkan.coopmat=off"]));
    assert_eq!((r.config.kernels.vulkan.flash_splits, r.config.kernels.vulkan.coopmat), (2, false));
    assert!(r.warnings.is_empty());
}

#[test]
fn unknown_keys_warn_with_suggestions() {
    let d = tmp();
    write(
        d.path(),
        "infr.toml",
        "[sampling]\ntemprature = 0.5\n[sever]\nport = 1\n[kernels.vulkan]\nflash_split = 3\n",
    );
    let r = ok(isolated(d.path())
        .env(env(&[("INFR_SAMPLING_TOPK", "3"), ("INFR_REQUIRE_MODELS", "1"), ("HOME_UNRELATED", "x")]))
        .set_args(&["context.sise=10", "temperature=0.1"]));
    let all = r.warnings.join("\n");
    for (bad, good) in [
        ("sampling.temprature", "sampling.temperature"),
        ("sever", "server"),
        ("kernels.vulkan.flash_split", "kernels.vulkan.flash_splits"),
        ("INFR_SAMPLING_TOPK", "INFR_SAMPLING_TOP_K"),
        ("context.sise", "context.size"),
        ("temperature", "sampling.temperature"),
    ] {
        let w = r.warnings.iter().find(|w| w.contains(bad)).unwrap_or_else(|| panic!("no warning for {bad}: {all}"));
        if good != "server" {
            assert!(
                w.contains(&format!("did you mean `{good}`")) || w.contains(&format!("did you mean {good}")),
                "{w}"
            );
        }
    }
    assert!(!all.contains("INFR_REQUIRE_MODELS"), "test switches are not config keys: {all}");
    // Unknown keys are ignored, the rest applies.
    assert_eq!(r.config.sampling.temperature, 0.8);
}

#[test]
fn type_errors_are_fatal_and_name_the_path() {
    let d = tmp();
    let e = isolated(d.path()).env(env(&[("INFR_SAMPLING_TEMPERATURE", "hot")])).resolve().err();
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.starts_with("sampling.temperature: expected a float"), "{msg}");
    assert!(msg.contains("got \"hot\"") && msg.contains("env INFR_SAMPLING_TEMPERATURE"), "{msg}");

    write(d.path(), "infr.toml", "[server]\nport = \"eighty\"\n");
    let e = isolated(d.path()).resolve().err();
    match &e {
        Some(ConfigError::Type { key, message, origin: Source::File(_) }) => {
            assert_eq!(key, "server.port");
            assert!(message.contains("expected an integer in 0..=65535, got \"eighty\""), "{message}");
        }
        other => panic!("{other:?}"),
    }
    write(d.path(), "infr.toml", "sampling = 3\n");
    let msg = isolated(d.path()).resolve().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.starts_with("sampling: expected a table"), "{msg}");
    write(d.path(), "infr.toml", "[context\nsize = 1\n");
    assert!(matches!(isolated(d.path()).resolve(), Err(ConfigError::Parse { .. })));
    std::fs::remove_file(d.path().join("infr.toml")).unwrap_or_else(|e| panic!("{e}"));

    let msg = isolated(d.path()).set_args(&["kv.type=q4"]).resolve().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("kv.type: expected one of f16, f32, q8_0, got \"q4\" (from --set kv.type=q4)"), "{msg}");
    let e = isolated(d.path()).flag("server.port", 70000u32).resolve().err();
    assert!(
        matches!(e, Some(ConfigError::Type { ref origin, .. }) if *origin == Source::Flag("--port".into())),
        "{e:?}"
    );
    assert!(matches!(isolated(d.path()).set_args(&["context.size"]).resolve(), Err(ConfigError::BadSet { .. })));
    let e = isolated(d.path()).file(Some(d.path().join("nope.toml"))).resolve();
    assert!(matches!(e, Err(ConfigError::FileNotFound { .. })));
}

/// Hardening issue, defect 13: `--config` at a directory or a device says what it is (it said
/// "does not exist"), a FIFO is refused without opening it (which would block), and a huge
/// file is not read.
#[test]
fn config_paths_that_are_not_files() {
    let d = tmp();
    let msg = |p: std::path::PathBuf| isolated(d.path()).file(Some(p)).resolve().err().map(|e| e.to_string());
    assert!(msg(d.path().to_path_buf()).unwrap().contains("is a directory"));
    assert!(msg("/dev/zero".into()).unwrap().contains("not a regular file"));
    let fifo = d.path().join("pipe.toml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().map(|s| s.success()).unwrap_or(false);
    assert!(made, "mkfifo is needed for this test");
    assert!(msg(fifo).unwrap().contains("not a regular file"));
    let big = d.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; (1 << 20) + 1]).unwrap();
    assert!(msg(big).unwrap().contains("at most"));
}

#[test]
fn env_aliases_and_foreign_names() {
    let d = tmp();
    let r = ok(isolated(d.path()).env(env(&[
        ("INFR_API_KEY", "sekrit"),
        ("INFR_PROF_OPS", "1"),
        ("INFR_PROF_OP_SHAPES", "true"),
        ("INFR_DEV", "Vulkan0"),
        ("INFR_CTX", "8192"),
        ("HF_HUB_OFFLINE", "1"),
        ("HF_ENDPOINT", "http://mirror.local"),
    ])));
    let c = &r.config;
    assert_eq!(c.server.api_key.as_deref(), Some("sekrit"));
    assert!(c.prof.ops && c.prof.op_shapes && c.model.offline);
    assert_eq!((c.device.dev.as_str(), c.context.size), ("Vulkan0", ContextSize::Tokens(8192)));
    assert_eq!(c.model.hf_endpoint.as_deref(), Some("http://mirror.local"));
    // The secret is never printed.
    assert!(!r.explain().contains("sekrit"));

    // Hardening issue, defect 14: HF_HUB_OFFLINE means what huggingface_hub (and our hub
    // client) read it as: 1/on/yes/true are offline, anything else online, never an error.
    for (v, want) in
        [("1", true), ("YES", true), ("on", true), ("true", true), ("2", false), ("0", false), ("no", false)]
    {
        let r = ok(isolated(d.path()).env(env(&[("HF_HUB_OFFLINE", v)])));
        assert_eq!(r.config.model.offline, want, "HF_HUB_OFFLINE={v}");
    }

    // The canonical name wins over an alias, with a warning when they disagree.
    let r = ok(isolated(d.path()).env(env(&[("INFR_CTX", "100"), ("INFR_CONTEXT_SIZE", "200")])));
    assert_eq!(r.config.context.size, ContextSize::Tokens(200));
    assert!(r.warnings.iter().any(|w| w.contains("INFR_CONTEXT_SIZE") && w.contains("INFR_CTX")), "{:?}", r.warnings);
    // Every canonical name maps back to its key.
    for k in KEYS {
        assert_eq!(k.env_names()[0], format!("INFR_{}", k.key.replace('.', "_").to_uppercase()));
    }
}

#[test]
fn config_file_discovery_order() {
    let d = tmp();
    let home = d.path().join("home");
    let cwd = d.path().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap_or_else(|e| panic!("{e}"));
    let user = write(&home, ".config/infr/config.toml", "[server]\nport = 1\n");
    let b = || ConfigBuilder::new().cwd(&cwd).env(env(&[("HOME", &home.display().to_string())]));
    assert_eq!(ok(b()).file.as_deref(), Some(user.as_path()));
    let xdg = write(d.path(), "xdg/infr/config.toml", "[server]\nport = 2\n");
    let r = ok(b().env(env(&[
        ("HOME", &home.display().to_string()),
        ("XDG_CONFIG_HOME", &d.path().join("xdg").display().to_string()),
    ])));
    assert_eq!((r.file.as_deref(), r.config.server.port), (Some(xdg.as_path()), 2));
    let local = write(&cwd, "infr.toml", "[server]\nport = 3\n");
    assert_eq!(ok(b()).config.server.port, 3);
    assert_eq!(ok(b()).file.as_deref(), Some(local.as_path()));
    let explicit = write(d.path(), "other.toml", "[server]\nport = 4\n");
    assert_eq!(ok(b().file(Some(explicit.clone()))).config.server.port, 4);
    let r = ok(b().env(env(&[("INFR_CONFIG", &explicit.display().to_string())])));
    assert_eq!(r.config.server.port, 4);
    assert_eq!(ok(b().no_discovery()).file, None);
}

#[test]
fn sizes_and_seeds_parse() {
    let cases = [
        ("19g", SizeSpec::Bytes(19 << 30)),
        ("512M", SizeSpec::Bytes(512 << 20)),
        ("1.5g", SizeSpec::Bytes(3 << 29)),
        ("64KiB", SizeSpec::Bytes(64 << 10)),
        ("4096", SizeSpec::Bytes(4096)),
        ("80%", SizeSpec::Percent(80.0)),
    ];
    for (s, want) in cases {
        assert_eq!(s.parse::<SizeSpec>().ok(), Some(want), "{s}");
    }
    for bad in ["", "g", "12x", "0%", "150%", "-1g", "99999999999t"] {
        assert!(bad.parse::<SizeSpec>().is_err(), "{bad:?} should be rejected");
    }
    assert_eq!(SizeSpec::Bytes(19 << 30).to_string(), "19g");
    assert_eq!(SizeSpec::Percent(80.0).resolve(1000), 800);
    let d = tmp();
    let r = ok(isolated(d.path()).set_args(&["sampling.seed=42"]));
    assert_eq!(r.config.sampling.seed, Seed::Fixed(42));
    write(d.path(), "infr.toml", "[sampling]\nseed = -1\n");
    let r = ok(isolated(d.path()));
    assert_eq!(r.config.sampling.seed, Seed::Random);
}

#[test]
fn markdown_table_lists_every_key() {
    let md = keys_table_markdown();
    assert!(md.starts_with("| Key | Type | Default | Env | Flag | Description |"));
    assert_eq!(md.lines().count(), KEYS.len() + 2);
    let row = md.lines().find(|l| l.starts_with("| `context.size`")).unwrap_or_default();
    assert!(
        row.contains("`4096`") && row.contains("`INFR_CONTEXT_SIZE`, `INFR_CTX`") && row.contains("--ctx-size"),
        "{row}"
    );
}
