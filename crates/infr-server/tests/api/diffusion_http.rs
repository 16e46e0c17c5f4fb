//! Serving DiffusionGemma (`testdata/diffusion/diffusion-gemma.gguf`): a seeded completion
//! comes back as the engine's own block-diffusion generation with that seed produces it
//! (streamed and not, OpenAI and Anthropic streams well-formed), a second identical request
//! gives the same text, and what a diffusion model cannot do is refused with a clear error.

use crate::server;

use infr_core::GgufWeights;
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{generate_diffusion, DiffusionOptions, Runner, RunnerOptions, SeededNoise};
use serde_json::json;
use server::{post, sse, start_server_custom};

fn model() -> String {
    format!("file:{}/../../testdata/diffusion/diffusion-gemma.gguf", env!("CARGO_MANIFEST_DIR"))
}

/// The engine's text for `prompt` with `seed` (the server's settings: the model's defaults).
fn engine_text(prompt: &str, seed: u64, max_tokens: usize) -> String {
    let path = model();
    let w = GgufWeights::open(path.strip_prefix("file:").unwrap()).unwrap();
    let tok = infr_tokenizer::Tokenizer::from_metadata(infr_core::WeightSource::metadata(&w)).unwrap();
    let model = infr_models::load_model(&w).unwrap();
    let params = model.diffusion().unwrap();
    let backend = Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Fast }).unwrap());
    let mut r = Runner::new(model, &w, backend, RunnerOptions { n_ctx: 256, ..Default::default() }).unwrap();
    let seq = r.add_sequence();
    let ids = tok.encode(prompt, true, false);
    let opts = DiffusionOptions { params, max_new_tokens: max_tokens, eos: tok.eog_ids().to_vec() };
    let out = generate_diffusion(&mut r, seq, &ids, &opts, &mut SeededNoise::new(seed), |_| true).unwrap();
    let tokens: Vec<u32> = out.tokens.into_iter().filter(|t| !tok.eog_ids().contains(t)).take(max_tokens).collect();
    tok.decode(&tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diffusion_completions_match_the_engine() {
    let template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}";
    let base = start_server_custom(&model(), 2, 512, Some(template), |_| {}).expect("server");
    let body = json!({"prompt": "hello world", "max_tokens": 40, "seed": 3});
    let (status, v) = post(format!("{base}/v1/completions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap().to_owned();
    assert_eq!(text, engine_text("hello world", 3, 40));
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    // Same seed, same text; streamed, the chunks join to it.
    let (_, again) = post(format!("{base}/v1/completions"), &body).await;
    assert_eq!(again["choices"][0]["text"], text.as_str());
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = sse(format!("{base}/v1/completions"), &streamed).await;
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("[DONE]"));
    let joined: String = events
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(joined, text);
    // Anthropic's stream: start, deltas, stop, in order.
    let msg = json!({"model": "m", "max_tokens": 24, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let events = sse(format!("{base}/v1/messages"), &msg).await;
    let kinds: Vec<&str> = events.iter().filter_map(|(e, _)| e.as_deref()).collect();
    assert_eq!(kinds.first(), Some(&"message_start"));
    assert_eq!(kinds.last(), Some(&"message_stop"));
    assert!(kinds.contains(&"message_delta"));
    // A diffusion model has no per-token distribution to report.
    let (status, v) = post(format!("{base}/v1/completions"), &json!({"prompt": "x", "logprobs": 2})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("diffusion"), "{v}");
}
