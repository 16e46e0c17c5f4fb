//! `infr multi`: several models behind one server, each pinned to its device, routed by the
//! request's `model` (an unknown name gets a 404 listing the served ones; `/v1/models` lists
//! them all with their context lengths).

use anyhow::{bail, Result};

use super::serve::{banner_line, check_settings, load_model, run_server, Routes};
use crate::load::{self, DeviceArgs};

/// Arguments of `infr multi`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Models as `NAME=MODEL[@DEVICE]`: the name requests use, a .gguf path or
    /// `org/repo[:quant]`, and the device (`cpu`, `Vulkan0`…; default `device.dev`).
    #[arg(required = true, value_name = "NAME=MODEL[@DEVICE]")]
    pub models: Vec<String>,
    /// Address to listen on (default 127.0.0.1). Config key `server.host`.
    #[arg(long)]
    pub host: Option<String>,
    /// Port to listen on (default 8080; 0 picks a free one). Config key `server.port`.
    #[arg(long)]
    pub port: Option<u16>,
    /// Slots per model (default 4). Config key `server.parallel`.
    #[arg(long, visible_alias = "np")]
    pub parallel: Option<u32>,
    /// Context per model, divided across its slots: tokens (`8192`, `32k`), `0` for each
    /// model's trained context, or `50%` of its device's memory left after its weights.
    /// Config key `context.size`.
    #[arg(short = 'c', long = "ctx-size", visible_alias = "ctx")]
    pub ctx: Option<String>,
    /// API key required on every route but /health (config `server.api_key`).
    #[arg(long)]
    pub api_key: Option<String>,
    /// KV cache type: f16 (default), f32, q8_0 (config `kv.type`).
    #[arg(long = "ctk", visible_aliases = ["cache-type-k", "kv-type"])]
    pub kv_type: Option<String>,
    /// Serve Prometheus metrics at `GET /metrics?model=NAME` (config `server.metrics`).
    #[arg(long)]
    pub metrics: bool,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// One `NAME=MODEL[@DEVICE]`.
fn parse_spec(spec: &str) -> Result<(String, String, Option<String>)> {
    let Some((name, rest)) = spec.split_once('=') else {
        bail!("'{spec}': give NAME=MODEL[@DEVICE], e.g. qwen=models/qwen.gguf@Vulkan0")
    };
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        bail!("'{spec}': the model name must be a non-empty word");
    }
    let (model, dev) = match rest.rsplit_once('@') {
        Some((m, d)) if !d.is_empty() && !d.contains('/') => (m, Some(d.to_owned())),
        _ => (rest, None),
    };
    if model.is_empty() {
        bail!("'{spec}': no model after '='");
    }
    Ok((name.to_owned(), model.to_owned(), dev))
}

/// Run `infr multi`.
pub fn run(a: Args) -> Result<()> {
    let specs = a.models.iter().map(|s| parse_spec(s)).collect::<Result<Vec<_>>>()?;
    for (i, (name, _, _)) in specs.iter().enumerate() {
        if specs[..i].iter().any(|(n, _, _)| n == name) {
            bail!("the model name '{name}' is given twice");
        }
    }
    let mut configs = Vec::new();
    for (name, model, dev) in specs {
        let mut f = load::Flags::default();
        f.opt("server.host", "--host", a.host.clone());
        f.opt("server.port", "--port", a.port);
        f.opt("server.parallel", "--parallel", a.parallel);
        f.opt("context.size", "--ctx-size", a.ctx.clone());
        f.opt("server.api_key", "--api-key", a.api_key.clone());
        f.opt("kv.type", "--cache-type-k", a.kv_type.clone());
        f.opt("server.metrics", "--metrics", a.metrics.then_some(true));
        let device = DeviceArgs { dev: dev.or_else(|| a.device.dev.clone()), ..a.device.clone() };
        let cfg = device.resolve(f)?;
        check_settings(&cfg)?;
        configs.push((name, model, device, cfg));
    }
    let Some(cfg) = configs.last().map(|c| c.3.clone()) else { bail!("no models") };
    run_server(&cfg, move || {
        let (mut served, mut banner, mut threads) = (Vec::new(), Vec::new(), Vec::new());
        for (name, model, device, cfg) in configs {
            let m = load_model(&cfg, &device, &model, Some(name.clone()), 512)?;
            banner.push(banner_line(&m, &cfg));
            threads.push(m.thread.clone());
            served.push((name, m.state));
        }
        Ok((banner, threads, Routes::Many(served)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let p = |s: &str| parse_spec(s).unwrap();
        assert_eq!(p("qwen=models/q.gguf@Vulkan0"), ("qwen".into(), "models/q.gguf".into(), Some("Vulkan0".into())));
        assert_eq!(p("g=unsloth/gemma-3-GGUF:Q4_K_M"), ("g".into(), "unsloth/gemma-3-GGUF:Q4_K_M".into(), None));
        assert_eq!(p("g=a@b/c.gguf"), ("g".into(), "a@b/c.gguf".into(), None));
        assert!(parse_spec("nomodel").is_err());
        assert!(parse_spec("=x.gguf").is_err());
        assert!(parse_spec("a b=x.gguf").is_err());
    }
}
