//! Linear and embedding parity for every weight type.

use infr_core::{Backend, BackendError, KvDType, WeightData, WeightId, WeightInfo};
use infr_gguf::TensorData;
use infr_quant::GgmlType;

use crate::common::*;

/// Columns of most test weights (one K-quant super-block, eight 32-element blocks).
pub(crate) const K: usize = 256;

/// `x · Wᵀ` in f32 from dequantized weights.
fn reference(x: &[f32], w: &[f32], n: usize, k: usize, m: usize, bias: Option<&[f32]>) -> Vec<f32> {
    let mut out = vec![0f32; n * m];
    for i in 0..n {
        for j in 0..m {
            let mut s = 0f64;
            for t in 0..k {
                s += x[i * k + t] as f64 * w[j * k + t] as f64;
            }
            out[i * m + j] = s as f32 + bias.map_or(0.0, |b| b[j]);
        }
    }
    out
}

fn check_linear(vk: &mut infr_vulkan::VulkanBackend, ty: GgmlType, m: usize, ns: &[usize], with_bias: bool, seed: u64) {
    check_linear_k(vk, ty, K, m, ns, with_bias, seed);
}

/// [`check_linear`] with `k` columns.
fn check_linear_k(
    vk: &mut infr_vulkan::VulkanBackend,
    ty: GgmlType,
    k: usize,
    m: usize,
    ns: &[usize],
    with_bias: bool,
    seed: u64,
) {
    let mut rng = Rng(seed);
    let mut w = Weights::default();
    let vocab = 8;
    let table = w.add(weight("tok", GgmlType::F32, k, vocab, &mut rng, 1.0));
    let wt = w.add(weight("w", ty, k, m, &mut rng, 0.5));
    let bias = with_bias.then(|| w.add(weight("b", GgmlType::F32, m, 1, &mut rng, 1.0)));
    let mut cpu = cpu();
    w.load(vk);
    w.load(&mut cpu);
    let spec = kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32);
    vk.init_kv(&spec).unwrap();
    cpu.init_kv(&spec).unwrap();
    let table_f = dequant(&w.list[table.0 as usize]);
    let w_f = dequant(&w.list[wt.0 as usize]);
    let b_f = bias.map(|b| dequant(&w.list[b.0 as usize]));
    for &n in ns {
        let g = graph(&w, n, n, |g| {
            let x = g.embed(table);
            g.linear(x, wt, bias)
        });
        let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 3) % vocab as u32).collect();
        let x: Vec<f32> = tokens.iter().flat_map(|&t| table_f[t as usize * k..(t as usize + 1) * k].to_vec()).collect();
        // Activations are rounded as on llama.cpp's (and our) CPU for this weight type
        // (`vec_dot_type`): Q8_K for 256-element blocks, Q8_0 for the legacy quants (Q8_1's
        // values are the same), f16/bf16 for float weights.
        let act_ty = match ty {
            GgmlType::F32 => None,
            GgmlType::F16 | GgmlType::BF16 => Some(ty),
            t if t.info().block_size == infr_quant::QK_K => Some(GgmlType::Q8_K),
            _ => Some(GgmlType::Q8_0),
        };
        let x_ref = match act_ty {
            Some(a) => {
                let q = infr_quant::quantize(a, &x).unwrap();
                infr_quant::dequantize_to_vec(a, &q).unwrap()
            }
            None => x.clone(),
        };
        let want = reference(&x_ref, &w_f, n, k, m, b_f.as_deref());
        let step = Step::simple(tokens, 0, vec![0; n.div_ceil(16).max(8)]);
        let pv = vk.compile(&g).unwrap();
        let got = step.run(vk, pv);
        // Cooperative-matrix prefill kernels multiply in f16 (f32 accumulators), except over
        // f32 weights (MoE routers), which stay f32 on every path.
        // Int8 decode kernels quantize the activations (like the CPU backend does).
        let int8 = vk.uses_int8() && n <= 8 && matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_K | GgmlType::Q6_K);
        let tol = if vk.uses_coopmat() && n > 8 && ty != GgmlType::F32 {
            5e-3
        } else if int8 {
            2e-2
        } else {
            1e-4
        };
        assert_close(&format!("{ty} linear n={n} vs f32"), &got, &want, tol, tol);
        let pc = cpu.compile(&g).unwrap();
        let got_cpu = step.run(&mut cpu, pc);
        assert_close(&format!("{ty} linear n={n} vs cpu"), &got, &got_cpu, 1e-3, 3e-2);
    }
    assert_clean(vk);
}

/// Fast kernels where the device has them (matrix-vector for n ≤ VEC_MAX_COLS = 16, from 4
/// rows on integer-dot devices the weight-row tiles), tiled or
/// generic otherwise; with cooperative matrices 16 and 17 rows take the split-K kernel (here in
/// one k range: k is 256), 70 rows the kernel that dequantizes tiles on the fly and 260 rows
/// the f16-operand path (every type's `dequant_f16`). The cooperative-only pass takes one
/// type of each dequantizer family ([`coop_loader_differs`]).
#[test]
fn linear_every_type() {
    let Some(mut vk) = vulkan() else { return };
    let rows = coop_rows_only(&vk, &[1, 3, 4, 9, 16, 17, 70, 260]);
    for (i, ty) in all_types().into_iter().enumerate().filter(|&(_, ty)| coop_loader_differs(ty)) {
        check_linear(&mut vk, ty, 37, &rows, false, 100 + i as u64);
    }
}

/// One to three rows over weights whose rows fill the integer-dot GEMV's block slots (16
/// 256-element blocks, 64 of 32 elements) stay on the GEMV; `linear_every_type`'s 256
/// columns take the tiles fitted to short rows.
#[test]
fn linear_gemv_full_rows() {
    let Some(mut vk) = vulkan() else { return };
    for (i, ty) in all_types().into_iter().filter(|t| t.is_quantized()).enumerate() {
        let k = if ty.info().block_size == infr_quant::QK_K { 4096 } else { 2048 };
        check_linear_k(&mut vk, ty, k, 24, &[1, 2, 3], i % 2 == 0, 400 + i as u64);
    }
}

/// The f32 matrix-vector kernels (int8 ones off).
#[test]
fn linear_f32_vec_kernels() {
    let opts = infr_vulkan::VulkanOptions { validation: true, disable_int8: true, ..Default::default() };
    let Some(mut vk) = vulkan_with(opts) else { return };
    for (i, ty) in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K].into_iter().enumerate() {
        check_linear(&mut vk, ty, 37, &[1, 4, 8, 16], false, 700 + i as u64);
    }
}

/// The portable kernels only (no subgroup operations).
#[test]
fn linear_every_type_portable() {
    let opts = infr_vulkan::VulkanOptions { validation: true, portable_kernels: true, ..Default::default() };
    let Some(mut vk) = vulkan_with(opts) else { return };
    for (i, ty) in all_types().into_iter().enumerate() {
        check_linear(&mut vk, ty, 21, &[1, 6], false, 300 + i as u64);
    }
}

#[test]
fn linear_with_bias() {
    let Some(mut vk) = vulkan() else { return };
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K] {
        check_linear(&mut vk, ty, 24, &[2, 12], true, 7);
    }
}

/// Several weight-row and activation-row tiles of the tiled (prefill) kernel.
#[test]
fn linear_tiled_multi_tile() {
    let Some(mut vk) = vulkan() else { return };
    for ty in [GgmlType::F16, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0, GgmlType::IQ4_XS] {
        check_linear(&mut vk, ty, 150, &[67], true, 9);
    }
}

/// An f32 weight of few rows (a MoE router) over prefill batches: the tiled kernel splits k
/// into ranges whose partial products `split_reduce` adds up (with the bias).
#[test]
fn linear_f32_router_splits_k() {
    let Some(mut vk) = vulkan() else { return };
    check_linear_k(&mut vk, GgmlType::F32, 2048, 128, &[100, 17], true, 21);
}

/// Prefill shapes large enough for the biggest cooperative-matrix tiles (128×128 per
/// workgroup), with interior tiles stored directly and ragged edges in both dimensions.
#[test]
fn linear_large_tiles() {
    let Some(mut vk) = vulkan() else { return };
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16] {
        check_linear(&mut vk, ty, 1552, &[1000, 130], false, 11);
    }
}

/// k-quant matmuls round their input through Q8_K like the CPU: with a massive activation
/// in the input the result differs from f32 by far more than the tolerance, so this checks
/// that the rounding happens, that q/k/v-style readers of one input share it, and that an
/// input rounded earlier is rounded again after another input took the buffer.
#[test]
fn linear_rounds_like_cpu_with_massive_activations() {
    let mut rng = Rng(42);
    let vocab = 4;
    let mut table = rng.vec(K * vocab, 1.0);
    table[K + 17] = -400.0;
    let mut w = Weights::default();
    let tb = WeightData {
        name: "tok".into(),
        info: WeightInfo { ty: GgmlType::F32, dims: vec![K, vocab] },
        bytes: TensorData::from_vec(bytemuck::cast_slice(&table).to_vec()),
    };
    let tok = w.add(tb);
    let wa = w.add(weight("wa", GgmlType::Q4_K, K, 40, &mut rng, 0.5));
    let wb = w.add(weight("wb", GgmlType::Q6_K, K, 40, &mut rng, 0.5));
    let wc = w.add(weight("wc", GgmlType::Q4_K, K, 40, &mut rng, 0.5));
    for opts in [
        infr_vulkan::VulkanOptions { validation: true, ..Default::default() },
        infr_vulkan::VulkanOptions { validation: true, disable_int8: true, ..Default::default() },
        infr_vulkan::VulkanOptions { validation: true, portable_kernels: true, ..Default::default() },
    ] {
        let Some(mut vk) = vulkan_with(opts) else { return };
        let mut cpu = cpu();
        w.load(&mut vk);
        w.load(&mut cpu);
        let spec = kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32);
        vk.init_kv(&spec).unwrap();
        cpu.init_kv(&spec).unwrap();
        for n in [3, 12] {
            let g = graph(&w, n, n, |g| {
                let x1 = g.embed(tok);
                let x2 = g.scale(x1, 0.5);
                let a = g.linear(x1, wa, None);
                let b = g.linear(x1, wb, None);
                let c = g.linear(x2, wc, None);
                let d = g.linear(x1, wc, None);
                let ab = g.add(a, b);
                let cd = g.mul(c, d);
                g.add(ab, cd)
            });
            let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % vocab as u32).collect();
            let step = Step::simple(tokens, 0, vec![0; n.div_ceil(16).max(8)]);
            let pv = vk.compile(&g).unwrap();
            let got = step.run(&mut vk, pv);
            let pc = cpu.compile(&g).unwrap();
            let want = step.run(&mut cpu, pc);
            let tol = if vk.uses_coopmat() && n > 8 { 2e-3 } else { 1e-4 };
            assert_close(&format!("rounded inputs n={n}"), &got, &want, tol, tol);
        }
        assert_clean(&vk);
    }
}

#[test]
fn embed_every_type() {
    let Some(mut vk) = vulkan() else { return };
    let spec = kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32);
    vk.init_kv(&spec).unwrap();
    for (i, ty) in all_types().into_iter().enumerate() {
        let mut rng = Rng(1000 + i as u64);
        let mut w = Weights::default();
        let vocab = 6;
        let table = w.add(weight("tok", ty, K, vocab, &mut rng, 1.0));
        w.load(&mut vk);
        let g = graph(&w, 4, 4, |g| g.embed(table));
        let tokens = vec![5u32, 0, 3, 5];
        let t_f = dequant(&w.list[0]);
        let want: Vec<f32> = tokens.iter().flat_map(|&t| t_f[t as usize * K..(t as usize + 1) * K].to_vec()).collect();
        let p = vk.compile(&g).unwrap();
        let got = Step::simple(tokens, 0, vec![0]).run(&mut vk, p);
        assert_close(&format!("{ty} embed"), &got, &want, 1e-6, 1e-6);
    }
    assert_clean(&vk);
}

/// The embedding mixture (DiffusionGemma's self-conditioning) for every table type: 19 rows
/// (a tile of 16 and a partial one) of random distributions over the vocabulary, and zeros
/// when a step carries no mixture; one vocabulary large enough to be cut into two slices
/// whose partial sums are added.
#[test]
fn mix_embed_every_type() {
    let Some(mut vk) = vulkan() else { return };
    let spec = kv_spec(1, 1, 2, 2, 2, 16, KvDType::F32);
    vk.init_kv(&spec).unwrap();
    let n = 19;
    let cases = all_types().into_iter().map(|ty| (ty, 37)).chain([(GgmlType::Q4_K, 9001)]);
    for (i, (ty, vocab)) in cases.enumerate() {
        let mut rng = Rng(2000 + i as u64);
        let mut w = Weights::default();
        let table = w.add(weight("tok", ty, K, vocab, &mut rng, 1.0));
        w.load(&mut vk);
        let g = graph(&w, n, n, |g| g.mix_embed(table));
        let t_f = dequant(&w.list[0]);
        let mix: Vec<f32> = (0..n * vocab).map(|_| rng.f().abs()).collect();
        let mut want = vec![0f32; n * K];
        for r in 0..n {
            for v in 0..vocab {
                for c in 0..K {
                    want[r * K + c] += mix[r * vocab + v] * t_f[v * K + c];
                }
            }
        }
        let p = vk.compile(&g).unwrap();
        let mut step = Step::simple((0..n as u32).collect(), 0, vec![0, 1]);
        step.embed_mix = mix;
        let got = step.run(&mut vk, p);
        assert_close(&format!("{ty} mix_embed over {vocab}"), &got, &want, 1e-4, 1e-4);
        step.embed_mix = Vec::new();
        let zeros = step.run(&mut vk, p);
        assert!(zeros.iter().all(|&x| x == 0.0), "{ty}: no mixture gives zeros");
    }
    assert_clean(&vk);
}

/// A weight larger than one storage binding (lavapipe: 128 MiB) is split into row chunks.
#[test]
fn large_weights_split_into_chunks() {
    let Some(mut vk) = vulkan() else { return };
    let range = vk.caps().max_storage_buffer_range;
    if range > (512 << 20) {
        eprintln!("skipping: storage range {range} too large to exceed cheaply");
        return;
    }
    let rows = (range as usize / (K * 4)) + 1000;
    let mut rng = Rng(3);
    let mut w = Weights::default();
    let table = w.add(weight("big", GgmlType::F32, K, rows, &mut rng, 1.0));
    w.load(&mut vk);
    vk.init_kv(&kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32)).unwrap();
    let t_f = dequant(&w.list[0]);
    let tokens = vec![0u32, rows as u32 - 1, 7, (rows - 500) as u32];
    let g = graph(&w, 4, 4, |g| g.embed(table));
    let p = vk.compile(&g).unwrap();
    let got = Step::simple(tokens.clone(), 0, vec![0]).run(&mut vk, p);
    let want: Vec<f32> = tokens.iter().flat_map(|&t| t_f[t as usize * K..(t as usize + 1) * K].to_vec()).collect();
    assert_close("chunked embed", &got, &want, 0.0, 0.0);
    // The same table as a linear layer (the tied-embedding LM head): output rows from both chunks.
    let g = graph(&w, 1, 1, |g| {
        let x = g.embed(table);
        g.linear(x, table, None)
    });
    let p = vk.compile(&g).unwrap();
    let got = Step::simple(vec![rows as u32 - 1], 0, vec![0]).run(&mut vk, p);
    let x = &t_f[(rows - 1) * K..rows * K];
    for j in [0, 1, rows / 2, rows - 600, rows - 1] {
        let want: f32 = (0..K).map(|t| x[t] as f64 * t_f[j * K + t] as f64).sum::<f64>() as f32;
        assert!((got[j] - want).abs() < 1e-3, "row {j}: {} vs {want}", got[j]);
    }
    drop(t_f);
    assert_clean(&vk);
}

/// A weight placed in host memory (MoE experts past the expert cache) is not counted against
/// the device's memory and gives the same products as one in device memory.
#[test]
fn weights_in_host_memory_give_the_same_products() {
    let Some(mut vk) = vulkan() else { return };
    let mut rng = Rng(9);
    let mut w = Weights::default();
    let x = w.add(weight("x", GgmlType::F32, K, 8, &mut rng, 1.0));
    let dev = w.add(weight("dev", GgmlType::Q4_K, K, 4096, &mut rng, 0.5));
    w.load(&mut vk);
    vk.init_kv(&kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32)).unwrap();
    let host = WeightId(w.list.len() as u32);
    let before = vk.memory_available().expect("the device reports its memory");
    vk.load_weight_placed(host, &w.list[dev.0 as usize], infr_core::WeightPlace::Host).unwrap();
    let after = vk.memory_available().unwrap();
    assert_eq!(before, after, "a host-placed weight takes no device memory");
    let shape = |id: WeightId| if id == host { w.shape(dev) } else { w.shape(id) };
    for n in [1, 3] {
        let run = |vk: &mut dyn Backend, wid: WeightId| {
            let mut g = infr_core::GraphBuilder::new(n, n, &shape);
            let e = g.embed(x);
            g.linear(e, wid, None);
            let p = vk.compile(&g.finish()).unwrap();
            Step::simple((0..n as u32).collect(), 0, vec![0]).run(vk, p)
        };
        let want = run(&mut vk, dev);
        let got = run(&mut vk, host);
        assert_close(&format!("host-placed q4_K n={n}"), &got, &want, 0.0, 0.0);
    }
    assert_clean(&vk);
}

/// A token id beyond the vocabulary is an error, not a crash.
#[test]
fn bad_token_is_an_error() {
    let Some(mut vk) = vulkan() else { return };
    let mut rng = Rng(5);
    let mut w = Weights::default();
    let table = w.add(weight("tok", GgmlType::F32, K, 4, &mut rng, 1.0));
    w.load(&mut vk);
    vk.init_kv(&kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32)).unwrap();
    let g = graph(&w, 1, 1, |g| g.embed(table));
    let p = vk.compile(&g).unwrap();
    let seqs = [infr_core::SeqPages { pages: &[0], window_pages: &[0], state_slot: 0 }];
    let inp = infr_core::StepInputs {
        tokens: &[4],
        positions: &[0],
        token_seq: &[0],
        seqs: &seqs,
        output_rows: &[0],
        embed_mix: &[],
        hidden: &[],
    };
    assert!(matches!(vk.execute(p, &inp), Err(infr_core::BackendError::InvalidInput(_))));
    assert_clean(&vk);
}

/// Types the backend cannot run are refused at load time.
#[test]
fn unsupported_type_is_refused_at_load() {
    let Some(mut vk) = vulkan() else { return };
    let w = infr_core::WeightData {
        name: "ints".into(),
        info: infr_core::WeightInfo { ty: GgmlType::I32, dims: vec![4, 2] },
        bytes: infr_gguf::TensorData::from_vec(vec![0; 32]),
    };
    let e = vk.load_weight(infr_core::WeightId(0), &w).unwrap_err();
    assert!(matches!(e, infr_core::BackendError::Unsupported { .. }), "{e}");
}

/// The validation layer is on for these tests wherever it is installed.
#[test]
fn validation_layer_is_active_when_installed() {
    let Some(vk) = vulkan() else { return };
    let installed = [
        "/usr/share/vulkan/explicit_layer.d",
        "/etc/vulkan/explicit_layer.d",
        "/usr/local/share/vulkan/explicit_layer.d",
    ]
    .iter()
    .any(|d| std::path::Path::new(d).join("VkLayer_khronos_validation.json").exists());
    eprintln!("validation layer installed: {installed}, active: {}", vk.validation_enabled());
    if installed {
        assert!(vk.validation_enabled());
    }
}

/// Prefill matmuls with and without cooperative matrices agree (both paths are the tiled
/// kernel on devices without them).
#[test]
fn linear_coopmat_matches_tiled() {
    let Some(mut vk) = vulkan() else { return };
    eprintln!("cooperative matrices in use: {}", vk.uses_coopmat());
    let opts = infr_vulkan::VulkanOptions { validation: true, disable_coopmat: true, ..Default::default() };
    let Some(mut tiled) = vulkan_with(opts) else { return };
    for (i, ty) in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16].into_iter().enumerate() {
        let mut rng = Rng(500 + i as u64);
        let mut w = Weights::default();
        let table = w.add(weight("tok", GgmlType::F32, K, 8, &mut rng, 1.0));
        let wt = w.add(weight("w", ty, K, 100, &mut rng, 0.5));
        w.load(&mut vk);
        w.load(&mut tiled);
        let spec = kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32);
        vk.init_kv(&spec).unwrap();
        tiled.init_kv(&spec).unwrap();
        let n = 80;
        let g = graph(&w, n, n, |g| {
            let x = g.embed(table);
            g.linear(x, wt, None)
        });
        let step = Step::simple((0..n as u32).map(|i| i % 8).collect(), 0, vec![0; 8]);
        let (pa, pb) = (vk.compile(&g).unwrap(), tiled.compile(&g).unwrap());
        let a = step.run(&mut vk, pa);
        let b = step.run(&mut tiled, pb);
        assert_close(&format!("{ty} coopmat vs tiled"), &a, &b, 5e-3, 5e-3);
    }
    assert_clean(&vk);
    assert_clean(&tiled);
}

/// Consecutive matmuls of one input and weight type (q/k/v with biases, gate/up, a DeltaNet
/// layer's qkv, z, beta and alpha) run as jobs of one integer-dot dispatch on devices that
/// have it: each output must equal the CPU's, for 1, 3 and 16 activation rows and for two,
/// three and four jobs of different widths.
#[test]
fn matmuls_sharing_an_input_match_cpu() {
    let cases = [
        (GgmlType::Q4_K, vec![512, 128, 128]),
        (GgmlType::Q6_K, vec![96, 320]),
        (GgmlType::Q8_0, vec![64, 64, 192]),
        (GgmlType::Q4_K, vec![256, 128, 32, 32]),
    ];
    for (ty, widths) in cases {
        let mut rng = Rng(77);
        let mut w = Weights::default();
        let vocab = 8;
        let table = w.add(weight("tok", GgmlType::F32, K, vocab, &mut rng, 1.0));
        let ws: Vec<_> = widths.iter().map(|&m| w.add(weight("w", ty, K, m, &mut rng, 0.5))).collect();
        let bs: Vec<_> = widths.iter().map(|&m| w.add(weight("b", GgmlType::F32, m, 1, &mut rng, 1.0))).collect();
        let Some(mut p) = Pair::new(&w, &kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32)) else { return };
        for n in [1usize, 3, 16] {
            // One graph per job: the matmuls, then a copy of that job's output (x1.0).
            for out in 0..widths.len() {
                let g = graph(&w, n, n, |g| {
                    let x = g.embed(table);
                    let ys: Vec<_> = ws
                        .iter()
                        .zip(&bs)
                        .enumerate()
                        .map(|(i, (&wt, &b))| g.linear(x, wt, (i != 1).then_some(b)))
                        .collect();
                    g.scale(ys[out], 1.0)
                });
                let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 3) % vocab as u32).collect();
                let step = Step::simple(tokens, 0, vec![0; 8]);
                p.check(&format!("{ty} job {out} of {:?} n={n}", widths), &g, &[step], 1e-3, 3e-2);
            }
        }
    }
}

/// Residual add + RMS norm feeding int8 matmuls over rows wider than one workgroup's slice
/// (`norm_q8` splits a row over workgroups that each sum the whole row): k-quant (one scale
/// per 256) and Q8_0 (per 32) activations, 1 and 3 rows, 4096 and 2560 columns.
#[test]
fn norm_into_matmul_wide_rows() {
    for (k, ty) in [(4096usize, GgmlType::Q4_K), (2560, GgmlType::Q8_0)] {
        let mut rng = Rng(123);
        let mut w = Weights::default();
        let ta = w.add(weight("a", GgmlType::F32, k, 8, &mut rng, 1.0));
        let tb = w.add(weight("b", GgmlType::F32, k, 8, &mut rng, 1.0));
        let nw = w.add(weight("norm", GgmlType::F32, k, 1, &mut rng, 1.0));
        let wt = w.add(weight("w", ty, k, 96, &mut rng, 0.3));
        let Some(mut p) = Pair::new(&w, &kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32)) else { return };
        for n in [1usize, 3] {
            let g = graph(&w, n, n, |g| {
                let a = g.embed(ta);
                let b = g.embed(tb);
                let s = g.add(a, b);
                let h = g.rms_norm(s, Some(nw), 1e-6, k);
                g.linear(h, wt, None)
            });
            let step = Step::simple((0..n as u32).map(|i| (3 * i + 1) % 8).collect(), 0, vec![0; 8]);
            p.check(&format!("{ty} norm->matmul k={k} n={n}"), &g, &[step], 1e-3, 3e-2);
        }
    }
}

/// A backend whose memory limit is below a weight refuses that weight with an out-of-memory
/// error and keeps working: a smaller weight loads afterwards and runs.
#[test]
fn memory_limit_refuses_weights_past_it() {
    let Some(probe) = vulkan() else { return };
    let base = probe.device_bytes();
    drop(probe);
    let opts = infr_vulkan::VulkanOptions { validation: true, memory_limit: base + (256 << 10), ..Default::default() };
    let Some(mut vk) = vulkan_with(opts) else { return };
    let mut rng = Rng(77);
    let big = weight("big", GgmlType::F32, K, 1024, &mut rng, 1.0);
    match vk.load_weight(WeightId(0), &big) {
        Err(BackendError::OutOfMemory { what, bytes, .. }) => {
            eprintln!("refused: {what} ({bytes} bytes)");
            assert!(bytes >= (K * 1024 * 4) as u64, "{bytes}");
        }
        other => panic!("a 1 MiB weight under a 256 KiB limit: {other:?}"),
    }
    let mut w = Weights::default();
    let table = w.add(weight("tok", GgmlType::F32, K, 8, &mut rng, 1.0));
    w.load(&mut vk);
    vk.init_kv(&kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32)).unwrap();
    let g = graph(&w, 2, 2, |g| g.embed(table));
    let p = vk.compile(&g).unwrap();
    let got = Step::simple(vec![3, 5], 0, vec![0]).run(&mut vk, p);
    let t = dequant(&w.list[0]);
    let want: Vec<f32> = [3usize, 5].iter().flat_map(|&r| t[r * K..(r + 1) * K].to_vec()).collect();
    assert_close("embed under a memory limit", &got, &want, 0.0, 0.0);
}
