//! Compare the logits of CPU and Vulkan for a token list: `cmp_backends MODEL ID,ID,..`.
use infr_core::{Backend, GgufWeights};
use infr_cpu::{CpuBackend, CpuOptions};
use infr_engine::{Runner, RunnerOptions};
use infr_vulkan::{VulkanBackend, VulkanOptions};

fn logits(w: &GgufWeights, b: Box<dyn Backend>, toks: &[u32]) -> Vec<f32> {
    let m = infr_models::load_model(w).unwrap();
    let mut r = Runner::new(m, w, b, RunnerOptions { n_ctx: 64, ..Default::default() }).unwrap();
    let s = r.add_sequence();
    r.prefill(s, toks, true).unwrap()
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let w = GgufWeights::open(&a[1]).unwrap();
    let toks: Vec<u32> = a[2].split(',').map(|x| x.parse().unwrap()).collect();
    let c = logits(&w, Box::new(CpuBackend::new(CpuOptions::default()).unwrap()), &toks);
    for (portable, no_int8) in [(true, true), (false, true), (false, false)] {
        let opts = VulkanOptions { portable_kernels: portable, disable_int8: no_int8, ..Default::default() };
        let v = logits(&w, Box::new(VulkanBackend::new(&opts).unwrap()), &toks);
        let nv = c.len() / toks.len();
        for (i, (rc, rv)) in c.chunks(nv).zip(v.chunks(nv)).enumerate() {
            let maxd = rc.iter().zip(rv).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            let am = |r: &[f32]| r.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
            println!(
                "portable={portable} no_int8={no_int8} row {i}: max|d|={maxd:.3} argmax cpu {} vk {} nan={}",
                am(rc),
                am(rv),
                rv.iter().any(|x| x.is_nan())
            );
        }
    }
}
