//! Length/alignment errors, quantize→dequantize round trips within the error each format is
//! expected to have, and agreement between the typed activation APIs and `quantize`.

use infr_quant::{
    can_dequantize, can_quantize, dequantize, dequantize_to_vec, quantize, quantize_into, quantize_row_q8_0,
    quantize_row_q8_1, quantize_row_q8_k, BlockQ8_0, BlockQ8_1, BlockQ8_K, GgmlType, QuantError,
};

/// Deterministic pseudo-gaussian data (sum of uniforms), with a per-256 scale change.
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uni = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    (0..n)
        .map(|i| {
            let scale = [0.02f32, 1.0, 7.5, 0.3][(i / 256) % 4];
            (uni() + uni() + uni() + uni()) * scale
        })
        .collect()
}

/// Root-mean-square error relative to the data's RMS.
fn rel_rmse(x: &[f32], y: &[f32]) -> f32 {
    let num: f64 = x.iter().zip(y).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum();
    (num / den).sqrt() as f32
}

#[test]
fn length_errors() {
    let mut out = vec![0f32; 33];
    assert!(matches!(
        dequantize(GgmlType::Q4_0, &[0u8; 18], &mut out),
        Err(QuantError::NotBlockAligned { n: 33, block: 32, .. })
    ));
    let mut out = vec![0f32; 64];
    assert!(matches!(
        dequantize(GgmlType::Q4_0, &[0u8; 18], &mut out),
        Err(QuantError::WrongByteLength { expected: 36, got: 18, .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::Q4_K, &[0u8; 145], &mut vec![0f32; 256]),
        Err(QuantError::WrongByteLength { expected: 144, got: 145, .. })
    ));
    assert!(matches!(
        dequantize_to_vec(GgmlType::Q6_K, &[0u8; 211]),
        Err(QuantError::PartialBlock { len: 211, type_size: 210, .. })
    ));
    assert!(matches!(
        quantize(GgmlType::Q4_K, &[0.0; 300]),
        Err(QuantError::NotBlockAligned { n: 300, block: 256, .. })
    ));
    assert!(matches!(
        quantize_into(GgmlType::Q8_0, &[0.0; 64], &mut [0u8; 34]),
        Err(QuantError::WrongByteLength { expected: 68, got: 34, .. })
    ));
    assert!(matches!(quantize(GgmlType::IQ2_XXS, &[0.0; 256]), Err(QuantError::QuantizeUnsupported(_))));
    assert!(matches!(quantize(GgmlType::I32, &[0.0; 4]), Err(QuantError::QuantizeUnsupported(_))));
    // Empty input is fine.
    assert_eq!(dequantize_to_vec(GgmlType::Q4_K, &[]).unwrap(), Vec::<f32>::new());
    assert_eq!(quantize(GgmlType::Q4_K, &[]).unwrap(), Vec::<u8>::new());
}

#[test]
fn every_type_dequantizes() {
    for ty in GgmlType::ALL {
        assert!(can_dequantize(ty), "{ty}");
        let info = ty.info();
        let bytes = vec![0u8; 3 * info.type_size];
        let v = dequantize_to_vec(ty, &bytes).unwrap();
        assert_eq!(v.len(), 3 * info.block_size);
    }
}

#[test]
fn plain_types_convert() {
    let v = dequantize_to_vec(GgmlType::I8, &[0x80, 0x7f, 0xff]).unwrap();
    assert_eq!(v, [-128.0, 127.0, -1.0]);
    let v = dequantize_to_vec(GgmlType::I16, &(-300i16).to_le_bytes()).unwrap();
    assert_eq!(v, [-300.0]);
    let v = dequantize_to_vec(GgmlType::I32, &123456i32.to_le_bytes()).unwrap();
    assert_eq!(v, [123456.0]);
    let v = dequantize_to_vec(GgmlType::I64, &(-5i64).to_le_bytes()).unwrap();
    assert_eq!(v, [-5.0]);
    let v = dequantize_to_vec(GgmlType::F64, &0.1f64.to_le_bytes()).unwrap();
    assert_eq!(v, [0.1f32]);
    let nan = f32::from_bits(0x7fc0_1234);
    let v = dequantize_to_vec(GgmlType::F32, &nan.to_le_bytes()).unwrap();
    assert_eq!(v[0].to_bits(), 0x7fc0_1234);
    let q = quantize(GgmlType::F32, &[1.5, -2.0]).unwrap();
    assert_eq!(dequantize_to_vec(GgmlType::F32, &q).unwrap(), [1.5, -2.0]);
}

#[test]
fn round_trip_error_is_as_expected() {
    // Upper bounds on relative RMSE for gaussian data (measured values are well below).
    let cases: &[(GgmlType, f32)] = &[
        (GgmlType::F16, 0.001),
        (GgmlType::BF16, 0.005),
        (GgmlType::Q8_0, 0.01),
        (GgmlType::Q8_1, 0.01),
        (GgmlType::Q8_K, 0.01),
        (GgmlType::Q6_K, 0.02),
        (GgmlType::Q5_0, 0.05),
        (GgmlType::Q5_1, 0.05),
        (GgmlType::Q5_K, 0.04),
        (GgmlType::Q4_0, 0.11),
        (GgmlType::Q4_1, 0.10),
        (GgmlType::Q4_K, 0.08),
        (GgmlType::IQ4_NL, 0.10),
        (GgmlType::IQ4_XS, 0.10),
        (GgmlType::Q3_K, 0.20),
        (GgmlType::Q2_K, 0.40),
        (GgmlType::MXFP4, 0.20),
        (GgmlType::NVFP4, 0.15),
    ];
    let x = data(256 * 64, 7);
    for &(ty, bound) in cases {
        assert!(can_quantize(ty), "{ty}");
        let q = quantize(ty, &x).unwrap();
        assert_eq!(q.len(), ty.row_bytes(x.len()).unwrap());
        let y = dequantize_to_vec(ty, &q).unwrap();
        let e = rel_rmse(&x, &y);
        eprintln!("{ty:8} relative rmse {e:.4}");
        assert!(e < bound, "{ty}: relative rmse {e} >= {bound}");
    }
}

#[test]
fn low_bit_formats_are_exact_on_their_grids() {
    // Ternary/binary data with one scale per row is represented exactly.
    let s = 0.375f32; // exactly representable in f16
    let tern: Vec<f32> = (0..1024).map(|i| [-s, 0.0, s][(i * 7 + i / 3) % 3]).collect();
    for ty in [GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::Q2_0] {
        let y = dequantize_to_vec(ty, &quantize(ty, &tern).unwrap()).unwrap();
        assert_eq!(y, tern, "{ty}");
    }
    let bin: Vec<f32> = (0..1024).map(|i| if (i * 5 + i / 7) % 2 == 0 { s } else { -s }).collect();
    let y = dequantize_to_vec(GgmlType::Q1_0, &quantize(GgmlType::Q1_0, &bin).unwrap()).unwrap();
    assert_eq!(y, bin);
    // All-zero input gives zeros everywhere.
    for ty in GgmlType::ALL.into_iter().filter(|t| can_quantize(*t)) {
        let z = vec![0f32; 2 * ty.info().block_size.max(256)];
        let y = dequantize_to_vec(ty, &quantize(ty, &z).unwrap()).unwrap();
        assert!(y.iter().all(|v| *v == 0.0), "{ty}");
    }
}

#[test]
fn typed_activation_blocks_match_bytes() {
    let x = data(512, 3);
    let mut b0 = vec![BlockQ8_0 { d: half::f16::ZERO, qs: [0; 32] }; 16];
    quantize_row_q8_0(&x, &mut b0);
    assert_eq!(bytemuck::cast_slice::<_, u8>(&b0), quantize(GgmlType::Q8_0, &x).unwrap());
    let mut b1 = vec![BlockQ8_1 { d: half::f16::ZERO, s: half::f16::ZERO, qs: [0; 32] }; 16];
    quantize_row_q8_1(&x, &mut b1);
    assert_eq!(bytemuck::cast_slice::<_, u8>(&b1), quantize(GgmlType::Q8_1, &x).unwrap());
    let mut bk = vec![BlockQ8_K { d: 0.0, qs: [0; 256], bsums: [0; 16] }; 2];
    quantize_row_q8_k(&x, &mut bk);
    assert_eq!(bytemuck::cast_slice::<_, u8>(&bk), quantize(GgmlType::Q8_K, &x).unwrap());
    for b in &bk {
        for (j, s) in b.bsums.iter().enumerate() {
            assert_eq!(*s as i32, b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum::<i32>());
        }
    }
    // Q8_1's s is d * sum(q) (ggml multiplies by the unrounded d, so allow f16 rounding).
    for b in &b1 {
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        let want = sum as f32 * b.d.to_f32();
        assert!((b.s.to_f32() - want).abs() <= 2e-3 * want.abs() + 1e-6, "{} vs {want}", b.s);
    }
}

#[test]
fn dequantize_is_fast_enough() {
    // 16M Q4_K elements should take well under a second in the optimised test profile.
    let n = 16 << 20;
    let bytes = vec![0x5au8; GgmlType::Q4_K.row_bytes(n).unwrap()];
    let mut out = vec![0f32; n];
    let t = std::time::Instant::now();
    dequantize(GgmlType::Q4_K, &bytes, &mut out).unwrap();
    let dt = t.elapsed();
    eprintln!("Q4_K dequantize: {:.1} M elements/s", n as f64 / dt.as_secs_f64() / 1e6);
    assert!(dt.as_secs_f64() < 5.0, "{dt:?}");
}
