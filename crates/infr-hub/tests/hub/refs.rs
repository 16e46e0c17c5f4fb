//! Model reference parsing and llama.cpp-style file selection (no network).

use infr_hub::{parse_hub_ref, parse_ref, select_files, HubError, ModelRef, Selector};

fn hub(s: &str) -> infr_hub::HubRef {
    parse_hub_ref(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn parses_llama_cpp_forms() {
    let r = hub("unsloth/Qwen3-0.6B-GGUF");
    assert_eq!(
        (r.repo.as_str(), r.revision.as_str(), &r.selector),
        ("unsloth/Qwen3-0.6B-GGUF", "main", &Selector::Default)
    );
    assert_eq!(hub("org/repo:q8_0").selector, Selector::Quant("q8_0".into()));
    assert_eq!(hub("org/repo:sub/Model-Q8_0.gguf").selector, Selector::File("sub/Model-Q8_0.gguf".into()));
    assert_eq!(hub("hf:org/repo:Q4_K_M").repo, "org/repo");
    assert_eq!(hub("hf://org/repo").repo, "org/repo");
    assert_eq!(hub("hf.co/org/repo:Q4_K_M").selector, Selector::Quant("Q4_K_M".into()));
    assert_eq!(hub("https://huggingface.co/org/repo").repo, "org/repo");
    let r = hub("org/repo@v1.0:Q8_0");
    assert_eq!((r.revision.as_str(), r.selector), ("v1.0", Selector::Quant("Q8_0".into())));
    let r = hub("org/repo:Q8_0@refs/pr/3");
    assert_eq!((r.revision.as_str(), r.selector), ("refs/pr/3", Selector::Quant("Q8_0".into())));
    assert_eq!(hub("org/repo:Q8_0@abc").to_string(), "org/repo@abc:Q8_0");
}

#[test]
fn rejects_bad_refs() {
    for bad in [
        "",
        "org",
        "org/repo/extra",
        "/org/repo",
        "org//repo",
        "org/repo:",
        "org/repo@:Q4",
        "org/re po",
        "org/repo:../../x.gguf",
        "org/repo:a/../b.gguf",
        "org/repo:Q4 K",
        "org/repo@a..b",
        "./missing.gguf",
        "missing-model.gguf",
        "-org/repo",
    ] {
        match parse_ref(bad) {
            Err(HubError::InvalidRef { input, reason }) => {
                assert_eq!(input, bad);
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?} should be rejected, got {other:?}"),
        }
    }
}

#[test]
fn existing_local_path_wins() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // A directory named like a repo reference is still a local path.
    let p = dir.path().join("org");
    std::fs::create_dir_all(p.join("repo")).unwrap_or_else(|e| panic!("{e}"));
    let s = p.join("repo").display().to_string();
    assert_eq!(parse_ref(&s).ok(), Some(ModelRef::Local(p.join("repo"))));
}

fn pick(files: &[&str], sel: &str) -> Result<Vec<String>, HubError> {
    let s = if sel.is_empty() { Selector::Default } else { hub(&format!("o/r:{sel}")).selector };
    select_files("o/r", files, &s)
}

#[test]
fn selects_like_llama_cpp() {
    let files = [
        "README.md",
        "Model-F16.gguf",
        "Model-IQ4_NL.gguf",
        "Model-Q4_K_M.gguf",
        "Model-Q8_0.gguf",
        "mmproj-Model-Q8_0.gguf",
        "Model-Q4_0.gguf",
    ];
    assert_eq!(pick(&files, "").ok(), Some(vec!["Model-Q4_K_M.gguf".to_string()]));
    assert_eq!(pick(&files, "q8_0").ok(), Some(vec!["Model-Q8_0.gguf".to_string()]));
    assert_eq!(pick(&files, "f16").ok(), Some(vec!["Model-F16.gguf".to_string()]));
    assert_eq!(pick(&files, "Model-Q4_0.gguf").ok(), Some(vec!["Model-Q4_0.gguf".to_string()]));
    // Default chain: Q4_K_M, else Q8_0, else the first model file (never an mmproj).
    assert_eq!(pick(&["mmproj-x-Q8_0.gguf", "x-Q8_0.gguf", "x-F16.gguf"], "").ok(), Some(vec!["x-Q8_0.gguf".into()]));
    assert_eq!(pick(&["mmproj-f16.gguf", "x-bf16.gguf"], "").ok(), Some(vec!["x-bf16.gguf".into()]));
    // Exact tag beats a substring match (IQ4_NL contains "Q4_NL").
    assert_eq!(pick(&["a-IQ4_NL.gguf", "b-Q4_NL.gguf"], "Q4_NL").ok(), Some(vec!["b-Q4_NL.gguf".into()]));
    // llama.cpp's rule: the tag followed by '.' or '-' anywhere in the path, ignoring case.
    assert_eq!(pick(&["Model-Q5_K_M-imat.gguf"], "q5_k_m").ok(), Some(vec!["Model-Q5_K_M-imat.gguf".into()]));
    assert_eq!(pick(&["model.q5_k_m.gguf"], "Q5_K_M").ok(), Some(vec!["model.q5_k_m.gguf".into()]));
    assert!(pick(&["Model-Q5_K_MX.gguf"], "Q5_K_M").is_err());
}

#[test]
fn selects_all_shards_in_order() {
    let files = [
        "Q8_0/M-Q8_0-00002-of-00003.gguf",
        "Q8_0/M-Q8_0-00001-of-00003.gguf",
        "Q8_0/M-Q8_0-00003-of-00003.gguf",
        "M-Q4_K_M.gguf",
    ];
    let want: Vec<String> = (1..=3).map(|i| format!("Q8_0/M-Q8_0-{i:05}-of-00003.gguf")).collect();
    assert_eq!(pick(&files, "Q8_0").ok(), Some(want.clone()));
    // Naming any shard as the file brings all of them.
    assert_eq!(pick(&files, "Q8_0/M-Q8_0-00002-of-00003.gguf").ok(), Some(want));
    match pick(&files[..2], "Q8_0") {
        Err(HubError::MissingShards { missing, .. }) => assert_eq!(missing, ["Q8_0/M-Q8_0-00003-of-00003.gguf"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn errors_list_what_exists() {
    let files = ["M-Q4_K_M.gguf", "M-Q8_0.gguf", "M-Q6_K-00001-of-00002.gguf", "M-Q6_K-00002-of-00002.gguf"];
    let e = pick(&files, "Q5_K_S").err().unwrap_or_else(|| panic!("must fail"));
    let msg = e.to_string();
    assert!(msg.contains("Q5_K_S") && msg.contains("Q4_K_M, Q6_K, Q8_0"), "{msg}");
    let e = pick(&files, "nope.gguf").err().unwrap_or_else(|| panic!("must fail"));
    assert!(matches!(e, HubError::FileNotFound { .. }) && e.to_string().contains("M-Q8_0.gguf"), "{e}");
    let e = pick(&["README.md"], "").err().unwrap_or_else(|| panic!("must fail"));
    assert!(e.to_string().contains("(none)"), "{e}");
}
