//! `infr`: pure-Rust LLM inference. One binary for inspecting, running, serving and
//! benchmarking GGUF models.

mod cmd;
mod load;
mod template_sandbox;

use clap::{Parser, Subcommand};

/// Pure-Rust LLM inference engine: GGUF in, tokens out.
#[derive(Parser)]
#[command(name = "infr", version, about, propagate_version = true)]
struct Cli {
    /// Log filter (`info`, `debug`, `infr_engine=trace`…); also config key `log.level`
    /// (env `INFR_LOG`) and `RUST_LOG`.
    #[arg(long, visible_alias = "log-level", global = true)]
    log: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a model's metadata, tensors, tokenizer and chat template.
    Inspect(cmd::inspect::Args),
    /// Print the token ids of a text as a JSON array.
    Tokenize(cmd::tokenize::TokenizeArgs),
    /// Print the text of token ids.
    Detokenize(cmd::tokenize::DetokenizeArgs),
    /// Run tokens through the model and print top-k logits per position (oracle format).
    Eval(cmd::eval::Args),
    /// Generate text: one-shot with a prompt, or an interactive chat without one.
    Run(cmd::run::Args),
    /// Serve a model over HTTP: OpenAI and Anthropic compatible APIs with streaming.
    Serve(cmd::serve::Args),
    /// Serve several models on one server, each on its device, routed by the request's model name.
    Multi(cmd::multi::Args),
    /// Measure prompt processing and generation speed (llama-bench compatible flags).
    Bench(cmd::bench::Args),
    /// Run infr and llama-bench on the same models and print the speed ratios.
    Compare(cmd::compare::Args),
    /// Write a random-weight GGUF of a real model shape, for speed tests without real weights.
    Synth(cmd::synth::Args),
    /// List compute devices and their capabilities.
    Devices,
    /// Download a model into the shared Hugging Face cache (`org/repo[:quant]`).
    Pull(cmd::pull::Args),
    /// Print the resolved configuration and where each value came from.
    Config(cmd::config::Args),
}

fn init_tracing(filter: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let filter = match filter {
        Some(f) => EnvFilter::new(f),
        None => {
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,infr_server=info,infr_hub=info"))
        }
    };
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

/// Die quietly on a closed pipe (`infr inspect M | head`), like other command-line tools,
/// instead of panicking in `println!`.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// llama.cpp's multi-letter flags written with one dash (`-ngl 99`, `-np 4`, `-ub 512`,
/// `-ctk q8_0`, `-fa 1`, `-pg 512,128`, `-ts 3,1`), which clap would read as bundles of short flags,
/// rewritten to their `--` form.
const SINGLE_DASH_LONG: &[&str] = &["ngl", "np", "ub", "ctk", "fa", "pg", "ts"];

fn llama_style_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.into_iter()
        .map(|a| {
            let Some(s) = a.to_str() else { return a };
            let Some(rest) = s.strip_prefix('-').filter(|r| !r.starts_with('-')) else { return a };
            let name = rest.split('=').next().unwrap_or(rest);
            if SINGLE_DASH_LONG.contains(&name) {
                format!("-{s}").into()
            } else {
                a
            }
        })
        .collect()
}

fn main() -> std::process::ExitCode {
    restore_sigpipe();
    if std::env::args_os().nth(1).is_some_and(|a| a == template_sandbox::WORKER_ARG) {
        return template_sandbox::run_as_worker();
    }
    template_sandbox::install();
    let cli = Cli::parse_from(llama_style_args(std::env::args_os()));
    // `--log` wins; else `log.level` from the config file or `INFR_LOG_LEVEL` / `INFR_LOG`.
    let configured = infr_config::ConfigBuilder::new().resolve().ok().and_then(|r| {
        (r.source("log.level") != Some(&infr_config::Source::Default)).then(|| r.config.log.level.clone())
    });
    init_tracing(cli.log.as_deref().or(configured.as_deref()));
    let result = match cli.command {
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Tokenize(a) => cmd::tokenize::tokenize(a),
        Command::Detokenize(a) => cmd::tokenize::detokenize(a),
        Command::Eval(a) => cmd::eval::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Multi(a) => cmd::multi::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Synth(a) => cmd::synth::run(a),
        Command::Devices => cmd::devices::run(),
        Command::Pull(a) => cmd::pull::run(a),
        Command::Config(a) => cmd::config::run(a),
    };
    tracing::debug!("exiting");
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_single_dash_flags_parse() {
        let args = |v: &[&str]| llama_style_args(v.iter().map(std::ffi::OsString::from));
        let got = args(&["infr", "serve", "m.gguf", "-ngl", "99", "-np=4", "-c", "512", "--ngl", "1", "-n", "-1"]);
        let want: Vec<std::ffi::OsString> =
            ["infr", "serve", "m.gguf", "--ngl", "99", "--np=4", "-c", "512", "--ngl", "1", "-n", "-1"]
                .iter()
                .map(std::ffi::OsString::from)
                .collect();
        assert_eq!(got, want);
        assert!(Cli::try_parse_from(args(&["infr", "run", "m.gguf", "-ngl", "0", "-ub", "64", "-ctk", "f32"])).is_ok());
        assert!(Cli::try_parse_from(args(&["infr", "bench", "-m", "m.gguf", "-pg", "512,128", "-fa", "1"])).is_ok());
    }
}
