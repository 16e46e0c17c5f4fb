//! A tiny random model (llama/qwen3-like: RMS norms, per-head q/k norms, NeoX RoPE, GQA
//! attention over paged f16 KV, SwiGLU FFN, tied-free LM head) run end to end on Vulkan and
//! the CPU reference: prefill, then decode steps replaying the same plans.

use infr_core::{Activation, AttnParams, Backend, KvDType, RopeMode, RopeParams, RopeScaling, WeightId};
use infr_quant::GgmlType;

use crate::common::*;

const DIM: usize = 256;
const FF: usize = 512;
const N_HEAD: u32 = 4;
const N_KV: u32 = 2;
const HD: u32 = 64;
const VOCAB: usize = 96;
const LAYERS: usize = 2;

struct Layer {
    attn_norm: WeightId,
    q: WeightId,
    k: WeightId,
    v: WeightId,
    q_norm: WeightId,
    k_norm: WeightId,
    o: WeightId,
    ffn_norm: WeightId,
    gate: WeightId,
    up: WeightId,
    down: WeightId,
}

struct Model {
    w: Weights,
    embed: WeightId,
    layers: Vec<Layer>,
    out_norm: WeightId,
    head: WeightId,
}

fn model() -> Model {
    let mut rng = Rng(42);
    let mut w = Weights::default();
    let embed = w.add(weight("token_embd", GgmlType::Q8_0, DIM, VOCAB, &mut rng, 1.0));
    let norm = |w: &mut Weights, rng: &mut Rng, n: usize| {
        let v: Vec<f32> = (0..n).map(|_| 1.0 + 0.2 * rng.f()).collect();
        w.add(infr_core::WeightData {
            name: "norm".into(),
            info: infr_core::WeightInfo { ty: GgmlType::F32, dims: vec![n] },
            bytes: infr_gguf::TensorData::from_vec(bytemuck::cast_slice(&v).to_vec()),
        })
    };
    let qd = (N_HEAD * HD) as usize;
    let kvd = (N_KV * HD) as usize;
    let mut layers = Vec::new();
    for l in 0..LAYERS {
        // Mix of the types real Q4_K_M files use.
        let (qt, ft) = if l == 0 { (GgmlType::Q4_K, GgmlType::Q6_K) } else { (GgmlType::Q5_K, GgmlType::Q4_0) };
        layers.push(Layer {
            attn_norm: norm(&mut w, &mut rng, DIM),
            q: w.add(weight("q", qt, DIM, qd, &mut rng, 0.1)),
            k: w.add(weight("k", qt, DIM, kvd, &mut rng, 0.1)),
            v: w.add(weight("v", GgmlType::Q6_K, DIM, kvd, &mut rng, 0.1)),
            q_norm: norm(&mut w, &mut rng, HD as usize),
            k_norm: norm(&mut w, &mut rng, HD as usize),
            o: w.add(weight("o", qt, qd, DIM, &mut rng, 0.1)),
            ffn_norm: norm(&mut w, &mut rng, DIM),
            gate: w.add(weight("gate", ft, DIM, FF, &mut rng, 0.1)),
            up: w.add(weight("up", ft, DIM, FF, &mut rng, 0.1)),
            down: w.add(weight("down", GgmlType::Q8_0, FF, DIM, &mut rng, 0.1)),
        });
    }
    let out_norm = norm(&mut w, &mut rng, DIM);
    let head = w.add(weight("output", GgmlType::Q6_K, DIM, VOCAB, &mut rng, 0.2));
    Model { w, embed, layers, out_norm, head }
}

fn step_graph(m: &Model, n_tokens: usize, n_out: usize) -> infr_core::Graph {
    let rope = RopeParams {
        mode: RopeMode::Neox,
        head_dim: HD,
        n_rot: HD,
        freq_base: 1_000_000.0,
        freq_scale: 1.0,
        scaling: RopeScaling::None,
        freq_factors: None,
    };
    graph(&m.w, n_tokens, n_out, |g| {
        let mut x = g.embed(m.embed);
        for (i, l) in m.layers.iter().enumerate() {
            g.set_label(format!("blk.{i}"));
            let h = g.rms_norm(x, Some(l.attn_norm), 1e-6, DIM);
            let q = g.linear(h, l.q, None);
            let k = g.linear(h, l.k, None);
            let v = g.linear(h, l.v, None);
            let q = g.rms_norm(q, Some(l.q_norm), 1e-6, HD as usize);
            let k = g.rms_norm(k, Some(l.k_norm), 1e-6, HD as usize);
            let q = g.rope(q, rope);
            let k = g.rope(k, rope);
            let a = g.attention(
                q,
                k,
                v,
                AttnParams {
                    kv_layer: i as u32,
                    n_head: N_HEAD,
                    n_kv_head: N_KV,
                    head_dim_k: HD,
                    head_dim_v: HD,
                    scale: 1.0 / (HD as f32).sqrt(),
                    softcap: None,
                    window: None,
                    chunk: None,
                    sinks: None,
                    write_kv: true,
                    bidirectional: false,
                },
            );
            let o = g.linear(a, l.o, None);
            x = g.add(x, o);
            let h = g.rms_norm(x, Some(l.ffn_norm), 1e-6, DIM);
            let gt = g.linear(h, l.gate, None);
            let up = g.linear(h, l.up, None);
            let act = g.glu(gt, up, Activation::Silu);
            let d = g.linear(act, l.down, None);
            x = g.add(x, d);
        }
        g.set_label("output");
        let x = g.output_rows(x);
        let x = g.rms_norm(x, Some(m.out_norm), 1e-6, DIM);
        g.linear(x, m.head, None)
    })
}

#[test]
fn tiny_model_prefill_and_decode() {
    let Some(mut vk) = vulkan() else { return };
    run_tiny_model(&mut vk);
}

/// The same model with the portable kernels only.
#[test]
fn tiny_model_portable() {
    let opts = infr_vulkan::VulkanOptions { validation: true, portable_kernels: true, ..Default::default() };
    let Some(mut vk) = vulkan_with(opts) else { return };
    run_tiny_model(&mut vk);
}

/// The same model with every graph node in its own dispatch (no fused kernels).
#[test]
fn tiny_model_unfused() {
    let opts = infr_vulkan::VulkanOptions { validation: true, disable_fusion: true, ..Default::default() };
    let Some(mut vk) = vulkan_with(opts) else { return };
    run_tiny_model(&mut vk);
}

/// Per-dispatch timestamps are collected and labelled by kernel, with and without fusion.
#[test]
fn profile_collects_every_dispatch() {
    for fused in [true, false] {
        let opts = profiled(fused);
        let Some(vk) = vulkan_with(opts) else { return };
        if vk.caps().timestamp_period_ns == 0.0 {
            eprintln!("skipping: no timestamps on compute queues");
            return;
        }
        check_profile(vk, fused);
    }
}

fn check_profile(mut vk: infr_vulkan::VulkanBackend, fused: bool) {
    run_tiny_model(&mut vk);
    let p = vk.profile().expect("profiling on");
    assert_eq!(p.submits, 5);
    let kernels: Vec<&String> = p.totals.keys().collect();
    // Every step of the tiny model is short: decode attention's kernel (4 heads over 2 KV heads).
    let attention = if vk.uses_lane_attention() { "attention_decode.g2.d64x64" } else { "attention.f16.d64x64" };
    let mut expect = vec!["embed.q8_0", attention, "output_rows", "add"];
    if !fused || !vk.uses_int8() {
        // With int8 matmuls every norm of this model feeds one and quantizes its output.
        expect.push("rms_norm");
    }
    if !fused {
        expect.extend(["rope", "kv_write.f16", "glu_silu"]);
    } else {
        // Q/K norms, RoPE and the KV append in one dispatch; norms and the GLU feeding
        // integer-dot matmuls quantize their output themselves.
        expect.push("qk_rope.f16");
        if vk.uses_int8() {
            // q+k and gate+up share a dispatch each: Q4_K and Q6_K in layer 0, Q5_K and
            // Q4_0 in layer 1 (in tiles: the tiny rows fill few of the GEMV's block slots).
            expect.extend([
                "norm_q8",
                "glu_silu_q8",
                "matmul_rows_q8.q4_K.x2",
                "matmul_rows_q8.q6_K.x2",
                "matmul_rows_q8.q5_K.x2",
                "matmul_rows_q8.q4_0.x2",
                "attention_combine_q8",
            ]);
        }
    }
    for k in expect {
        assert!(p.totals.contains_key(k), "{k} missing from {kernels:?}");
    }
    if fused {
        for k in ["rope", "kv_write.f16"] {
            assert!(!p.totals.contains_key(k), "{k} ran although fused: {kernels:?}");
        }
    }
    let fast = vk.caps().subgroup_arithmetic;
    let name = if vk.uses_int8() {
        "matmul_rows_q8.q4_K"
    } else if fast {
        "matmul_vec.q4_K"
    } else {
        "matmul_generic.q4_K"
    };
    assert!(p.totals.contains_key(name), "{name} missing from {kernels:?}");
    for line in p.report() {
        eprintln!("{line}");
    }
}

/// Steps of 17 to 64 tokens take the split-K cooperative products (batched decode of many
/// sequences runs the same matmuls), whose f16 operands the norms and the GLU round and write
/// themselves (`norm_q8_f16`, `glu_silu_q8_f16`) instead of a `round_act16` dispatch each: every
/// output row matches the CPU, with and without that fusion.
#[test]
fn tiny_model_split_k_steps() {
    let m = model();
    let kv = kv_spec(LAYERS, N_KV, HD, HD, 16, 4, KvDType::F16);
    let pages: Vec<u32> = (0..12).map(|p| (p * 5 + 3) % 16).collect();
    let prompt: Vec<u32> = (0..24u32).map(|i| (i * 37 + 5) % VOCAB as u32).collect();
    let chunk: Vec<u32> = (0..20u32).map(|i| (i * 11 + 2) % VOCAB as u32).collect();
    let mut cpu = cpu();
    m.w.load(&mut cpu);
    cpu.init_kv(&kv).unwrap();
    let steps = [Step::simple(prompt.clone(), 0, pages.clone()), Step::simple(chunk.clone(), 24, pages.clone())];
    let graphs = [step_graph(&m, prompt.len(), prompt.len()), step_graph(&m, chunk.len(), chunk.len())];
    let want: Vec<Vec<f32>> = steps
        .iter()
        .zip(&graphs)
        .map(|(s, g)| {
            let plan = cpu.compile(g).unwrap();
            s.run(&mut cpu, plan)
        })
        .collect();
    for fused in [true, false] {
        let opts = profiled(fused);
        let Some(mut vk) = vulkan_with(opts) else { return };
        m.w.load(&mut vk);
        vk.init_kv(&kv).unwrap();
        for ((s, g), b) in steps.iter().zip(&graphs).zip(&want) {
            let plan = vk.compile(g).unwrap();
            let a = s.run(&mut vk, plan);
            assert_close(&format!("{} rows, fused {fused}", s.tokens.len()), &a, b, 1e-3, 5e-2);
        }
        let p = vk.profile().expect("profiling on");
        let kernels: Vec<&String> = p.totals.keys().collect();
        eprintln!("fused {fused}, cooperative matrices {}: {kernels:?}", vk.uses_coopmat());
        if vk.uses_coopmat() {
            assert!(p.totals.contains_key("matmul_coop_split.q4_K"), "{kernels:?}");
            for k in ["norm_q8_f16", "glu_silu_q8_f16"] {
                assert_eq!(p.totals.contains_key(k), fused, "{k} in {kernels:?}");
            }
        }
        assert_clean(&vk);
    }
}

/// `list_devices` reports the device with its capabilities.
#[test]
fn list_devices_reports_capabilities() {
    let Some(vk) = vulkan() else { return };
    let devs = infr_vulkan::list_devices().expect("list devices");
    assert!(!devs.is_empty());
    assert_eq!(devs[0].id, "Vulkan0");
    assert_eq!(devs[0].name, vk.caps().name);
    assert!(devs[0].features.iter().any(|f| f.starts_with("subgroup ")), "{:?}", devs[0].features);
    eprintln!("{} {} {:?}", devs[0].id, devs[0].name, devs[0].features);
}

/// Backends opened and dropped one after another in one process keep working (with an
/// instance per backend, the NVIDIA driver could no longer be found after about 20), and
/// listing devices in between does not disturb them.
#[test]
fn many_backends_in_one_process() {
    let Some(first) = vulkan() else { return };
    let name = first.caps().name.clone();
    drop(first);
    for i in 0..40 {
        let vk = vulkan().unwrap_or_else(|| panic!("backend {i} of 40 did not open"));
        assert_eq!(vk.caps().name, name);
        if i % 10 == 0 {
            assert!(!infr_vulkan::list_devices().expect("list devices").is_empty());
        }
    }
}

fn run_tiny_model(vk: &mut infr_vulkan::VulkanBackend) {
    run_tiny_model_with(vk, &kv_spec(LAYERS, N_KV, HD, HD, 8, 4, KvDType::F16));
}

/// [`run_tiny_model`] with the KV cache `kv` (at least 7 pages of 4 tokens).
fn run_tiny_model_with(vk: &mut infr_vulkan::VulkanBackend, kv: &infr_core::KvSpec) {
    let m = model();
    let mut cpu = cpu();
    m.w.load(vk);
    m.w.load(&mut cpu);
    let kv = kv.clone();
    vk.init_kv(&kv).unwrap();
    cpu.init_kv(&kv).unwrap();
    let pages = vec![5u32, 1, 6];
    let prompt = vec![1u32, 17, 33, 4, 90, 2, 61];
    let pre = step_graph(&m, prompt.len(), 1);
    let dec = step_graph(&m, 1, 1);
    let (pv, pc) = (vk.compile(&pre).unwrap(), cpu.compile(&pre).unwrap());
    let (dv, dc) = (vk.compile(&dec).unwrap(), cpu.compile(&dec).unwrap());
    let mut s = Step::simple(prompt.clone(), 0, pages.clone());
    s.output_rows = vec![prompt.len() as u32 - 1];
    let a = s.run(vk, pv);
    let b = s.run(&mut cpu, pc);
    assert_close("prefill logits", &a, &b, 1e-3, 5e-2);
    let mut next = argmax(&b);
    let mut agree = 0;
    for pos in prompt.len() as u32..prompt.len() as u32 + 4 {
        let s = Step::simple(vec![next], pos, pages.clone());
        let a = s.run(vk, dv);
        let b = s.run(&mut cpu, dc);
        assert_close(&format!("decode logits at {pos}"), &a, &b, 1e-3, 5e-2);
        agree += (argmax(&a) == argmax(&b)) as usize;
        next = argmax(&b);
    }
    assert!(agree >= 3, "greedy tokens disagree too often ({agree}/4)");
    assert_clean(vk);
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::MIN), |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) }).0 as u32
}

/// Under a memory limit that leaves the KV cache about half its bytes (and the plans their
/// room), the layers that do not fit go to host memory with `kv_spill_to_host` and the model
/// still matches the CPU; without spilling the same limit is an out-of-memory error that
/// names the KV layer.
#[test]
fn kv_cache_spills_to_host_memory() {
    let m = model();
    // A cache larger than the plans' buffers, so that half of it is a real share.
    let kv = kv_spec(LAYERS, N_KV, HD, HD, 1024, 4, KvDType::F16);
    // Sizes without a limit: weights, KV cache, the two plans of `run_tiny_model`.
    let Some(mut probe) = vulkan() else { return };
    m.w.load(&mut probe);
    let weights = probe.device_bytes();
    probe.init_kv(&kv).unwrap();
    let kv_bytes = probe.device_bytes() - weights;
    probe.compile(&step_graph(&m, 7, 1)).unwrap();
    probe.compile(&step_graph(&m, 1, 1)).unwrap();
    let plans = probe.device_bytes() - weights - kv_bytes;
    drop(probe);
    // (`weights` includes the backend's own tables.)
    let limit = weights + kv_bytes / 2 + plans;
    let opts = |kv_spill_to_host| infr_vulkan::VulkanOptions {
        validation: true,
        memory_limit: limit,
        kv_spill_to_host,
        ..Default::default()
    };
    let Some(mut vk) = vulkan_with(opts(false)) else { return };
    m.w.load(&mut vk);
    match vk.init_kv(&kv) {
        Err(infr_core::BackendError::OutOfMemory { what, .. }) => assert!(what.contains("KV layer"), "{what}"),
        other => panic!("a KV cache past the limit without spilling: {other:?}"),
    }
    drop(vk);
    let Some(mut vk) = vulkan_with(opts(true)) else { return };
    run_tiny_model_with(&mut vk, &kv);
    let host = vk.kv_host_bytes();
    eprintln!("KV cache {kv_bytes} bytes, {host} in host memory under a limit of {limit}");
    assert!(host > 0 && host < kv_bytes, "{host} of {kv_bytes} KV bytes in host memory");
}
