//! Memory issue: `--ctx-size` takes `8192`, `32k`, `0` (the model's trained context) and
//! `50%` (the longest context whose KV cache fits in that share of the memory left after the
//! weights, at most the trained context); anything else is refused naming the forms.

use std::process::Command;

fn run(ctx: &str) -> (bool, String) {
    let model = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth/qwen3.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_infr"))
        .args(["run", model.to_str().unwrap(), "--raw", "hi", "-n", "1", "-c", ctx, "--log", "info"])
        .output()
        .expect("runs infr");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn context_sizes_in_tokens_thousands_model_and_percent() {
    // 32k = 32768 tokens: past the 4096 the model was trained on, which is warned about.
    let (ok, err) = run("32k");
    assert!(ok && err.contains("a context of 32768 tokens"), "{err}");
    // 0: the trained context, no warning.
    let (ok, err) = run("0");
    assert!(ok && !err.contains("longer than"), "{err}");
    // A share of memory: capped at the trained context when there is room for more...
    let (ok, err) = run("50%");
    assert!(ok && err.contains("4096 used (the model's trained context)"), "{err}");
    // ...and smaller when there is not: a tiny share of this machine's memory gives less than
    // the trained context, or (on a machine with little free memory) not even a page, which is
    // refused with the numbers.
    let (ok, err) = run("0.005%");
    if ok {
        let used: usize = err
            .split("tokens per sequence, ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{err}"));
        let capped = err.contains("(the model's trained context)");
        assert!(used % 256 == 0 && (used < 4096 || capped), "{err}");
    } else {
        assert!(err.contains("MiB left after") && err.contains("holds no KV page"), "{err}");
    }
    for bad in ["lots", "120%", "8m"] {
        let (ok, err) = run(bad);
        assert!(!ok && err.contains("8192, 32k, 0 (the model's) or 50%"), "{bad}: {err}");
    }
}
