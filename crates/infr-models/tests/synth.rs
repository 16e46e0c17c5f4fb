//! `infr synth`'s library: the written files parse, load as models, have llama.cpp's type mix
//! and sane weights, and are deterministic per seed.

use std::collections::HashMap;

use infr_core::GgufWeights;
use infr_gguf::{GgmlType, GgufFile};
use infr_models::synth::{self, Shape, SynthPlan, SynthQuant, SHAPES};

fn write_tiny(dir: &std::path::Path, shape: &str, quant: SynthQuant, seed: u64) -> std::path::PathBuf {
    let plan = SynthPlan::new(Shape::by_name(shape).unwrap(), quant, None).unwrap();
    let path = dir.join(format!("{shape}-{}-{seed}.gguf", quant.name()));
    let mut calls = 0;
    let sum = synth::write(&plan, seed, &path, &mut |done, total| {
        assert!(done <= total);
        calls += 1;
    })
    .unwrap();
    assert!(calls >= 2);
    assert_eq!(sum.bytes, std::fs::metadata(&path).unwrap().len());
    assert_eq!(sum.tensors, plan.tensors.len());
    path
}

#[test]
fn tiny_files_load_as_models_for_every_quant() {
    let dir = tempfile::tempdir().unwrap();
    for shape in ["tiny-qwen3", "tiny-llama3", "tiny-qwen3moe", "tiny-gpt-oss"] {
        for q in SynthQuant::ALL {
            let path = write_tiny(dir.path(), shape, q, 1);
            let w = GgufWeights::open(&path).unwrap();
            let m = infr_models::load_model(&w).unwrap_or_else(|e| panic!("{shape} {}: {e}", q.name()));
            let s = Shape::by_name(shape).unwrap();
            assert_eq!(m.info.n_vocab, s.n_vocab);
            assert_eq!(m.hparams.head_dim_k, s.head_dim);
            assert_eq!(m.info.n_layer, s.n_layer);
            assert_eq!(w.gguf().metadata().u64("general.file_type").unwrap(), Some(q.file_type() as u64));
        }
    }
}

/// The MoE shapes at real widths have the published parameter counts (Qwen3-30B-A3B 30.5B,
/// gpt-oss-20b 20.9B) and llama-quantize's choices: routers, biases and sinks in f32, MXFP4
/// experts in the MXFP4_MOE mix.
#[test]
fn moe_shapes_have_real_sizes_and_types() {
    let q = SynthPlan::new(Shape::by_name("qwen3-30b-a3b").unwrap(), SynthQuant::Q4_K_M, None).unwrap();
    let b = q.n_params() as f64 / 1e9;
    assert!((30.3..30.7).contains(&b), "qwen3-30b-a3b: {b:.2}B parameters");
    let ty: HashMap<&str, GgmlType> = q.tensors.iter().map(|t| (t.name.as_str(), t.ty)).collect();
    assert_eq!(ty["blk.0.ffn_gate_inp.weight"], GgmlType::F32);
    assert_eq!(ty["blk.0.ffn_gate_exps.weight"], GgmlType::Q4_K);
    assert_eq!(ty["blk.0.ffn_down_exps.weight"], GgmlType::Q6_K, "more bits on layer 0");
    let g = SynthPlan::new(Shape::by_name("gpt-oss-20b").unwrap(), SynthQuant::MXFP4_MOE, None).unwrap();
    let b = g.n_params() as f64 / 1e9;
    assert!((20.7..21.1).contains(&b), "gpt-oss-20b: {b:.2}B parameters");
    let ty: HashMap<&str, GgmlType> = g.tensors.iter().map(|t| (t.name.as_str(), t.ty)).collect();
    for n in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"] {
        assert_eq!(ty[format!("blk.3.{n}.weight").as_str()], GgmlType::MXFP4, "{n}");
        assert_eq!(ty[format!("blk.3.{n}.bias").as_str()], GgmlType::F32, "{n}");
    }
    assert_eq!(ty["blk.3.attn_sinks.weight"], GgmlType::F32);
    assert_eq!(ty["blk.3.attn_q.weight"], GgmlType::Q8_0);
    assert_eq!(ty["blk.3.ffn_gate_inp.bias"], GgmlType::F32);
}

#[test]
fn file_size_is_header_plus_aligned_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_tiny(dir.path(), "tiny-qwen3", SynthQuant::Q4_K_M, 3);
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset() % 32, 0);
    let data: u64 = f.tensors().iter().map(|t| t.size.next_multiple_of(32)).sum();
    assert_eq!(f.file_len(), f.data_offset() + data);
    for t in f.tensors() {
        assert_eq!(t.offset % 32, 0, "{}", t.name);
        assert_eq!(t.ty.row_bytes(t.dims[0] as usize).unwrap() as u64 * t.n_rows(), t.size);
    }
}

#[test]
fn q4_k_m_mix_follows_llama_quantize() {
    // Qwen3-8B (untied, 36 layers): output Q6_K, token_embd Q4_K, attn_v / ffn_down Q6_K on
    // the use_more_bits layers, norms F32, everything else Q4_K.
    let plan = SynthPlan::new(Shape::by_name("qwen3-8b").unwrap(), SynthQuant::Q4_K_M, None).unwrap();
    let ty: HashMap<&str, GgmlType> = plan.tensors.iter().map(|t| (t.name.as_str(), t.ty)).collect();
    assert_eq!(plan.tensors.len(), 36 * 11 + 3);
    assert_eq!(ty["output.weight"], GgmlType::Q6_K);
    assert_eq!(ty["token_embd.weight"], GgmlType::Q4_K);
    assert_eq!(ty["output_norm.weight"], GgmlType::F32);
    let more = [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35];
    for il in 0..36 {
        let want = if more.contains(&il) { GgmlType::Q6_K } else { GgmlType::Q4_K };
        assert_eq!(ty[format!("blk.{il}.attn_v.weight").as_str()], want, "layer {il}");
        assert_eq!(ty[format!("blk.{il}.ffn_down.weight").as_str()], want, "layer {il}");
        for n in ["attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"] {
            assert_eq!(ty[format!("blk.{il}.{n}.weight").as_str()], GgmlType::Q4_K);
        }
        for n in ["attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm"] {
            assert_eq!(ty[format!("blk.{il}.{n}.weight").as_str()], GgmlType::F32);
        }
    }
    // Tied embeddings take the output's type.
    let tied = SynthPlan::new(Shape::by_name("qwen3-0.6b").unwrap(), SynthQuant::Q4_K_M, None).unwrap();
    assert!(tied.tensors.iter().all(|t| t.name != "output.weight"));
    assert_eq!(tied.tensors[0].name, "token_embd.weight");
    assert_eq!(tied.tensors[0].ty, GgmlType::Q6_K);
    // The written tiny file has the same mix as its plan.
    let dir = tempfile::tempdir().unwrap();
    let f = GgufFile::open(write_tiny(dir.path(), "tiny-qwen3", SynthQuant::Q4_K_M, 0)).unwrap();
    let tiny = SynthPlan::new(Shape::by_name("tiny-qwen3").unwrap(), SynthQuant::Q4_K_M, None).unwrap();
    for t in &tiny.tensors {
        assert_eq!(f.tensor(&t.name).unwrap().ty, t.ty, "{}", t.name);
    }
    assert_eq!(f.tensor("blk.1.ffn_down.weight").unwrap().ty, GgmlType::Q6_K);
    assert_eq!(f.tensor("blk.0.ffn_down.weight").unwrap().ty, GgmlType::Q4_K);
}

#[test]
fn real_shapes_and_metadata() {
    let q = |name: &str| SynthPlan::new(Shape::by_name(name).unwrap(), SynthQuant::Q8_0, None).unwrap();
    let p = q("qwen3-0.6b");
    let m = &p.metadata;
    assert_eq!(m.str("general.architecture").unwrap(), Some("qwen3"));
    assert_eq!(m.u64("qwen3.embedding_length").unwrap(), Some(1024));
    assert_eq!(m.u64("qwen3.attention.key_length").unwrap(), Some(128));
    assert_eq!(m.u64("qwen3.context_length").unwrap(), Some(40960));
    assert_eq!(m.f64("qwen3.rope.freq_base").unwrap(), Some(1e6));
    assert_eq!(m.str_array("tokenizer.ggml.tokens").unwrap().unwrap().len(), 151936);
    assert_eq!(m.str("tokenizer.ggml.pre").unwrap(), Some("qwen2"));
    assert_eq!(m.bool("tokenizer.ggml.add_bos_token").unwrap(), Some(false));
    let attn_q = p.tensors.iter().find(|t| t.name == "blk.0.attn_q.weight").unwrap();
    assert_eq!(attn_q.dims, [1024, 2048]);
    // Parameter counts of the real models (embeddings included).
    let b = |name: &str| q(name).n_params() as f64 / 1e9;
    assert!((b("qwen3-0.6b") - 0.596).abs() < 0.01, "{}", b("qwen3-0.6b"));
    assert!((b("qwen3-8b") - 8.19).abs() < 0.01, "{}", b("qwen3-8b"));
    assert!((b("qwen3-14b") - 14.77).abs() < 0.01, "{}", b("qwen3-14b"));
    assert!((b("llama3-8b") - 8.03).abs() < 0.01, "{}", b("llama3-8b"));
    let l = q("llama3-8b");
    assert_eq!(l.metadata.str("tokenizer.ggml.pre").unwrap(), Some("llama-bpe"));
    assert_eq!(l.tensors.len(), 32 * 9 + 3);
    assert_eq!(SynthPlan::new(&SHAPES[0], SynthQuant::F16, Some(3)).unwrap().tensors.len(), 3 * 11 + 2);
}

#[test]
fn bad_names_list_the_choices() {
    let e = Shape::by_name("qwen9").unwrap_err().to_string();
    assert!(e.contains("qwen9") && e.contains("qwen3-0.6b") && e.contains("llama3-8b"), "{e}");
    let e = SynthQuant::from_name("q3_k").unwrap_err().to_string();
    assert!(e.contains("Q4_K_M, Q8_0, Q4_0, F16"), "{e}");
    assert_eq!(SynthQuant::from_name("q4_k_m").unwrap(), SynthQuant::Q4_K_M);
    assert!(SynthPlan::new(&SHAPES[0], SynthQuant::F16, Some(0)).is_err());
    let plan = SynthPlan::new(Shape::by_name("tiny-qwen3").unwrap(), SynthQuant::F16, None).unwrap();
    let e = synth::write(&plan, 0, "/nonexistent-dir/x.gguf", &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("/nonexistent-dir/x.gguf"), "{e}");
}

#[test]
fn deterministic_per_seed_and_numerically_sane() {
    let dir = tempfile::tempdir().unwrap();
    let a = std::fs::read(write_tiny(dir.path(), "tiny-llama3", SynthQuant::Q4_K_M, 7)).unwrap();
    let b = std::fs::read(write_tiny(&dir.path().join("."), "tiny-llama3", SynthQuant::Q4_K_M, 7)).unwrap();
    let c = std::fs::read(write_tiny(dir.path(), "tiny-llama3", SynthQuant::Q4_K_M, 8)).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    for q in SynthQuant::ALL {
        let f = GgufFile::open(write_tiny(dir.path(), "tiny-llama3", q, 5)).unwrap();
        for t in f.tensors() {
            let x = infr_quant::dequantize_to_vec(t.ty, f.tensor_bytes(t)).unwrap();
            let n = x.len() as f64;
            let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
            let sd = (x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
            assert!(x.iter().all(|v| v.is_finite()), "{} {}", q.name(), t.name);
            if t.dims.len() == 1 {
                assert!((mean - 1.0).abs() < 0.01 && sd < 0.01, "{} {}: {mean} {sd}", q.name(), t.name);
            } else {
                assert!(mean.abs() < 0.003, "{} {}: mean {mean}", q.name(), t.name);
                assert!((0.012..0.035).contains(&sd), "{} {} ({}): sd {sd}", q.name(), t.name, t.ty);
            }
        }
    }
}
