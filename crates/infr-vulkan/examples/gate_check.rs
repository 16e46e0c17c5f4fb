//! Diagnosis helper: `gate_check MODEL WEIGHT X.f32 [ROW_LEN]` multiplies row 0 of the
//! activations in X.f32 (raw little-endian f32) by the weight in f64 with (a) f32 activations,
//! (b) activations through Q8_K (as llama.cpp's CPU does for k-quants), (c) through f16 and
//! (d) through Q8_1 (32-blocks); prints each output's values for the indices given in `IDX`.
use infr_core::{GgmlType, GgufWeights, WeightSource};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let w = GgufWeights::open(&a[1]).unwrap();
    let d = w.data(&a[2]).unwrap();
    let k = d.info.dims[0];
    let m = d.info.dims[1];
    let wf = infr_quant::dequantize_to_vec(d.info.ty, &d.bytes).unwrap();
    let raw = std::fs::read(&a[3]).unwrap();
    let x: Vec<f32> = raw.chunks(4).take(k).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    let rt = |ty: GgmlType| infr_quant::dequantize_to_vec(ty, &infr_quant::quantize(ty, &x).unwrap()).unwrap();
    let variants = [
        ("f32", x.clone()),
        ("q8_K", rt(GgmlType::Q8_K)),
        ("f16", x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()),
        ("q8_1", rt(GgmlType::Q8_1)),
    ];
    let idx: Vec<usize> = std::env::var("IDX")
        .map(|s| s.split(',').map(|t| t.parse().unwrap()).collect())
        .unwrap_or_else(|_| (0..8).collect());
    for (name, xv) in &variants {
        let out: Vec<f64> =
            (0..m).map(|r| wf[r * k..(r + 1) * k].iter().zip(xv).map(|(&p, &q)| p as f64 * q as f64).sum()).collect();
        let vals: Vec<String> = idx.iter().map(|&i| format!("[{i}]={:.3}", out[i])).collect();
        println!("{name:5} {}", vals.join(" "));
    }
}
