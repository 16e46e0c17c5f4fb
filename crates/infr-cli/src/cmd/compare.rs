//! `infr compare`: run the same speed tests with infr (in-process, `infr bench`'s loop) and
//! with llama.cpp's `llama-bench` (a subprocess, `-o json`), match the tests by
//! (n_prompt, n_gen, n_depth) and print both speeds and their ratio.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::bench;
use crate::load::DeviceArgs;

/// Arguments of `infr compare`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub tests: bench::TestArgs,
    /// Repetitions (both engines).
    #[arg(short = 'r', long = "repetitions", default_value_t = 3)]
    pub reps: usize,
    /// The llama-bench binary (default: `llama-bench` on the PATH).
    #[arg(long = "llama-bench", env = "LLAMA_BENCH")]
    pub llama_bench: Option<PathBuf>,
    /// Output format: `md` or `json`.
    #[arg(short = 'o', long = "output", default_value = "md")]
    pub output: String,
    /// infr's physical batch size.
    #[arg(long = "ub", visible_alias = "ubatch-size", default_value_t = 512)]
    pub ubatch: usize,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Extra arguments passed to llama-bench as they are (after `--`), e.g. `-- -fa 1`.
    #[arg(last = true)]
    pub llama_args: Vec<String>,
}

/// The speed of one test, from either engine.
#[derive(Debug, Clone, PartialEq)]
pub struct Speed {
    /// Prompt tokens.
    pub n_prompt: usize,
    /// Generated tokens.
    pub n_gen: usize,
    /// Context depth.
    pub n_depth: usize,
    /// Mean tokens per second.
    pub avg_ts: f64,
    /// Standard deviation of tokens per second.
    pub stddev_ts: f64,
}

impl Speed {
    /// Read a llama-bench JSON record (`n_depth` is absent in older llama-bench versions).
    pub fn from_record(r: &Value) -> Result<Self> {
        let count = |k: &str| -> Result<usize> {
            match r.get(k) {
                None if k == "n_depth" => Ok(0),
                v => v.and_then(Value::as_u64).map(|v| v as usize).with_context(|| format!("record without '{k}'")),
            }
        };
        let speed = |k: &str| r.get(k).and_then(Value::as_f64).with_context(|| format!("record without '{k}'"));
        Ok(Self {
            n_prompt: count("n_prompt")?,
            n_gen: count("n_gen")?,
            n_depth: count("n_depth")?,
            avg_ts: speed("avg_ts")?,
            stddev_ts: speed("stddev_ts").unwrap_or(0.0),
        })
    }

    fn key(&self) -> (usize, usize, usize) {
        (self.n_prompt, self.n_gen, self.n_depth)
    }
}

/// Parse llama-bench's `-o json` output: a JSON array of test records.
pub fn parse_llama_bench(stdout: &str) -> Result<Vec<Speed>> {
    // Skip anything printed before the array (some builds log to stdout).
    let start = stdout.find('[').unwrap_or(0);
    let v: Value = serde_json::from_str(stdout[start..].trim()).map_err(|e| {
        let head: String = stdout.chars().take(300).collect();
        anyhow::anyhow!("llama-bench output is not JSON ({e}); it began with:\n{head}")
    })?;
    let Some(records) = v.as_array() else { bail!("llama-bench JSON is not an array of test records") };
    records
        .iter()
        .enumerate()
        .map(|(i, r)| Speed::from_record(r).with_context(|| format!("llama-bench record {i}")))
        .collect()
}

/// One line of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Model file name.
    pub model: String,
    /// Test name (`pp512`, `tg128 @ d4096`).
    pub test: String,
    /// infr's speed, if it ran this test.
    pub infr: Option<Speed>,
    /// llama.cpp's speed, if it ran this test.
    pub llama: Option<Speed>,
}

impl Row {
    /// infr t/s divided by llama.cpp t/s.
    pub fn ratio(&self) -> Option<f64> {
        match (&self.infr, &self.llama) {
            (Some(i), Some(l)) if l.avg_ts > 0.0 => Some(i.avg_ts / l.avg_ts),
            _ => None,
        }
    }
}

/// Pair the two engines' results by (n_prompt, n_gen, n_depth), in infr's order, followed by
/// tests only llama.cpp ran.
pub fn match_tests(model: &str, infr: &[Speed], llama: &[Speed]) -> Vec<Row> {
    let row = |k: (usize, usize, usize), i: Option<&Speed>, l: Option<&Speed>| Row {
        model: model.to_owned(),
        test: bench::test_name(k.0, k.1, k.2),
        infr: i.cloned(),
        llama: l.cloned(),
    };
    let mut rows: Vec<Row> =
        infr.iter().map(|i| row(i.key(), Some(i), llama.iter().find(|l| l.key() == i.key()))).collect();
    rows.extend(llama.iter().filter(|l| !infr.iter().any(|i| i.key() == l.key())).map(|l| row(l.key(), None, Some(l))));
    rows
}

fn find_llama_bench(flag: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = flag {
        if p.is_file() {
            return Ok(p.to_owned());
        }
        bail!("llama-bench not found at '{}' (from --llama-bench or LLAMA_BENCH)", p.display());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join("llama-bench")).find(|p| p.is_file()).with_context(|| {
        "llama-bench not found on the PATH: pass --llama-bench PATH or set LLAMA_BENCH to llama.cpp's llama-bench"
    })
}

fn list(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// Run llama-bench on one model and parse its records.
fn run_llama_bench(exe: &Path, model: &Path, a: &Args) -> Result<Vec<Speed>> {
    let mut cmd = Command::new(exe);
    cmd.arg("-m").arg(model);
    cmd.args(["-p", &list(&a.tests.n_prompt), "-n", &list(&a.tests.n_gen), "-d", &list(&a.tests.n_depth)]);
    cmd.args(["-r", &a.reps.to_string(), "-o", "json", "-ngl", "99"]);
    // Same thread count on both sides (llama-bench's own default may differ from ours),
    // unless the caller passed llama-bench a -t of their own.
    if let Some(t) = a.device.threads.filter(|&t| t > 0) {
        if !a.llama_args.iter().any(|x| x == "-t" || x == "--threads") {
            cmd.args(["-t", &t.to_string()]);
        }
    }
    cmd.args(&a.llama_args);
    eprintln!("running {cmd:?}");
    let out = cmd.output().with_context(|| format!("could not run llama-bench '{}'", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("llama-bench failed ({}) on {}:\n{}", out.status, model.display(), tail.join("\n"));
    }
    parse_llama_bench(&stdout).with_context(|| format!("llama-bench on {}", model.display()))
}

fn fmt_speed(s: &Option<Speed>) -> String {
    s.as_ref().map(|s| format!("{:.2} ± {:.2}", s.avg_ts, s.stddev_ts)).unwrap_or_else(|| "—".into())
}

/// The comparison as a markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from("| model | test | infr t/s | llama.cpp t/s | infr/llama.cpp |\n");
    out.push_str("| --- | --- | ---: | ---: | ---: |\n");
    for r in rows {
        let ratio = r.ratio().map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".into());
        out.push_str(&format!(
            "| {} | {} | {} | {} | {ratio} |\n",
            r.model,
            r.test,
            fmt_speed(&r.infr),
            fmt_speed(&r.llama)
        ));
    }
    out
}

/// The comparison as JSON records.
pub fn to_json(rows: &[Row]) -> Value {
    let speed = |s: &Option<Speed>| s.as_ref().map(|s| json!({"avg_ts": s.avg_ts, "stddev_ts": s.stddev_ts}));
    Value::Array(
        rows.iter()
            .map(|r| {
                let k = r.infr.as_ref().or(r.llama.as_ref()).map(Speed::key).unwrap_or_default();
                json!({
                    "model": r.model, "test": r.test, "n_prompt": k.0, "n_gen": k.1, "n_depth": k.2,
                    "infr": speed(&r.infr), "llama_cpp": speed(&r.llama), "ratio": r.ratio(),
                })
            })
            .collect(),
    )
}

/// Run `infr compare`.
pub fn run(a: Args) -> Result<()> {
    if !matches!(a.output.as_str(), "md" | "json") {
        bail!("unknown output format '{}' (md, json)", a.output);
    }
    let exe = find_llama_bench(a.llama_bench.as_deref())?;
    let mut rows = Vec::new();
    for model in &a.tests.models {
        let path = crate::load::model_path(model)?;
        let b = bench::Args {
            tests: bench::TestArgs { models: vec![path.to_string_lossy().into_owned()], ..a.tests.clone() },
            pg: Vec::new(),
            reps: a.reps,
            fa: 0,
            ubatch: a.ubatch,
            batch: 2048,
            output: "json".into(),
            no_warmup: false,
            warmup_runs: 1,
            kv_type: "f16".into(),
            diffusion: Default::default(),
            device: a.device.clone(),
        };
        eprintln!("running infr on {}", path.display());
        let infr = bench::measure(&b, &mut |m| {
            eprintln!("  infr {}: {:.2} t/s", m.test, m.record["avg_ts"].as_f64().unwrap_or(0.0));
            Ok(())
        })?;
        let infr: Vec<Speed> = infr.iter().map(|m| Speed::from_record(&m.record)).collect::<Result<_>>()?;
        let llama = run_llama_bench(&exe, &path, &a)?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| model.clone());
        rows.extend(match_tests(&name, &infr, &llama));
    }
    match a.output.as_str() {
        "json" => println!("{}", serde_json::to_string_pretty(&to_json(&rows))?),
        _ => print!("{}", markdown(&rows)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `llama-bench -m qwen3-0.6b.gguf -p 512 -n 128 -d 0,4096 -r 3 -o json` prints
    /// (fields as llama-bench writes them; trimmed sample arrays).
    const SAMPLE: &str = r#"[
  {
    "build_commit": "b5d6c9a2", "build_number": 6000, "cpu_info": "AMD EPYC 9654", "gpu_info": "NVIDIA H200",
    "backends": "CUDA", "model_filename": "/tmp/qwen3-0.6b.gguf", "model_type": "qwen3 0.6B Q4_K - Medium",
    "model_size": 484219904, "model_n_params": 596049920, "n_batch": 2048, "n_ubatch": 512, "n_threads": 16,
    "cpu_mask": "0x0", "cpu_strict": false, "poll": 50, "type_k": "f16", "type_v": "f16", "n_gpu_layers": 99,
    "split_mode": "layer", "main_gpu": 0, "no_kv_offload": false, "flash_attn": false, "tensor_split": "0.00",
    "use_mmap": true, "embeddings": false, "n_prompt": 512, "n_gen": 0, "n_depth": 0,
    "test_time": "2025-07-01T10:00:00Z", "avg_ns": 25600000, "stddev_ns": 100000,
    "avg_ts": 20000.0, "stddev_ts": 80.5, "samples_ns": [25500000, 25600000, 25700000],
    "samples_ts": [20078.4, 20000.0, 19922.2]
  },
  {
    "build_commit": "b5d6c9a2", "build_number": 6000, "model_filename": "/tmp/qwen3-0.6b.gguf",
    "n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ns": 400000000, "stddev_ns": 2000000,
    "avg_ts": 320.0, "stddev_ts": 1.5, "samples_ns": [400000000], "samples_ts": [320.0]
  },
  {
    "build_commit": "b5d6c9a2", "build_number": 6000, "model_filename": "/tmp/qwen3-0.6b.gguf",
    "n_prompt": 0, "n_gen": 128, "n_depth": 4096, "avg_ns": 500000000, "stddev_ns": 2000000,
    "avg_ts": 256.0, "stddev_ts": 2.0, "samples_ns": [500000000], "samples_ts": [256.0]
  }
]"#;

    fn s(n_prompt: usize, n_gen: usize, n_depth: usize, avg_ts: f64) -> Speed {
        Speed { n_prompt, n_gen, n_depth, avg_ts, stddev_ts: 1.0 }
    }

    #[test]
    fn parses_llama_bench_json() {
        let v = parse_llama_bench(SAMPLE).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], Speed { n_prompt: 512, n_gen: 0, n_depth: 0, avg_ts: 20000.0, stddev_ts: 80.5 });
        assert_eq!((v[2].n_gen, v[2].n_depth, v[2].avg_ts), (128, 4096, 256.0));
        // Log lines before the array are skipped; older builds without n_depth mean depth 0.
        let old = "main: loading\n[{\"n_prompt\": 0, \"n_gen\": 16, \"avg_ts\": 5.5, \"stddev_ts\": 0.1}]";
        assert_eq!(parse_llama_bench(old).unwrap()[0].n_depth, 0);
    }

    #[test]
    fn rejects_non_json_and_incomplete_records() {
        let e = parse_llama_bench("error: unknown argument: -d").unwrap_err().to_string();
        assert!(e.contains("not JSON") && e.contains("unknown argument"), "{e}");
        assert!(parse_llama_bench("{\"a\": 1}").is_err());
        let e = format!("{:#}", parse_llama_bench("[{\"n_prompt\": 512}]").unwrap_err());
        assert!(e.contains("record 0") && e.contains("n_gen"), "{e}");
    }

    #[test]
    fn matches_tests_by_prompt_gen_and_depth() {
        let llama = parse_llama_bench(SAMPLE).unwrap();
        let infr = [s(512, 0, 0, 10000.0), s(0, 128, 0, 400.0), s(0, 128, 8192, 100.0)];
        let rows = match_tests("qwen3-0.6b.gguf", &infr, &llama);
        let tests: Vec<&str> = rows.iter().map(|r| r.test.as_str()).collect();
        assert_eq!(tests, ["pp512", "tg128", "tg128 @ d8192", "tg128 @ d4096"]);
        assert_eq!(rows[0].ratio(), Some(0.5));
        assert_eq!(rows[1].ratio(), Some(1.25));
        assert_eq!(rows[2].ratio(), None);
        assert!(rows[3].infr.is_none());
        let md = markdown(&rows);
        assert!(md.contains("| qwen3-0.6b.gguf | pp512 | 10000.00 ± 1.00 | 20000.00 ± 80.50 | 0.50 |"), "{md}");
        assert!(md.contains("| tg128 @ d8192 | 100.00 ± 1.00 | — | — |"), "{md}");
        let j = to_json(&rows);
        assert_eq!(j[1]["ratio"], json!(1.25));
        assert_eq!(j[3]["n_depth"], json!(4096));
        assert_eq!(j[3]["infr"], Value::Null);
    }

    #[test]
    fn missing_llama_bench_names_the_flag_and_env() {
        let e = find_llama_bench(Some(Path::new("/nonexistent/llama-bench"))).unwrap_err().to_string();
        assert!(e.contains("--llama-bench") && e.contains("LLAMA_BENCH"), "{e}");
    }
}
