//! Compare intermediate tensors of CPU and Vulkan for a prompt:
//! `layer_diff MODEL ID,ID,.. [NODES]` where NODES is `layers` (default: the residual stream
//! after every layer), `all`, or a comma list of node indices / `a-b` ranges.
//! Env: `DUMP=DIR` writes both outputs as raw f32 files; `KV=f32` for an f32 cache; `PORTABLE=1`, `NO_INT8=1` select Vulkan kernels.
//! Each checkpoint runs the graph truncated after that node on both backends (the KV writes
//! of the same prompt at the same positions are idempotent).
use infr_core::{Backend, GgufWeights, Graph, KvDType, KvSpec, Op, SeqPages, StepInputs, WeightSource};
use infr_cpu::{CpuBackend, CpuOptions};
use infr_vulkan::{VulkanBackend, VulkanOptions};

fn setup(w: &GgufWeights, m: &infr_models::Model, mut b: Box<dyn Backend>, dtype: KvDType) -> Box<dyn Backend> {
    for (id, name) in m.weights.iter() {
        let data = w.data(name).unwrap();
        b.load_weight(id, &data).unwrap();
    }
    b.init_kv(&KvSpec {
        layers: m.kv_layers(),
        n_pages: 4,
        page_size: 16,
        dtype,
        n_window_pages: 4,
        states: m.state_layers(),
        n_state_slots: 1,
    })
    .unwrap();
    b
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let w = GgufWeights::open(&a[1]).unwrap();
    let toks: Vec<u32> = a[2].split(',').map(|x| x.parse().unwrap()).collect();
    let n = toks.len();
    let m = infr_models::load_model(&w).unwrap();
    let full = m.graph(n, n);
    let sel = a.get(3).map(String::as_str).unwrap_or("layers");
    let nodes: Vec<usize> = match sel {
        "layers" => (0..full.nodes.len())
            .filter(|&i| {
                matches!(full.nodes[i].op, Op::Add { .. })
                    && full.nodes.get(i + 1).is_some_and(|nx| nx.label != full.nodes[i].label)
            })
            .collect(),
        "all" => (0..full.nodes.len()).collect(),
        s => s
            .split(',')
            .flat_map(|p| match p.split_once('-') {
                Some((x, y)) => (x.parse().unwrap()..=y.parse().unwrap()).collect::<Vec<usize>>(),
                None => vec![p.parse().unwrap()],
            })
            .collect(),
    };
    let dtype = match std::env::var("KV").as_deref() {
        Ok("f32") => KvDType::F32,
        _ => KvDType::F16,
    };
    let flag = |k: &str| std::env::var(k).is_ok_and(|v| v == "1");
    let vopts =
        VulkanOptions { portable_kernels: flag("PORTABLE"), disable_int8: flag("NO_INT8"), ..Default::default() };
    let mut cpu = setup(&w, &m, Box::new(CpuBackend::new(CpuOptions::default()).unwrap()), dtype);
    let mut vk = setup(&w, &m, Box::new(VulkanBackend::new(&vopts).unwrap()), dtype);
    let positions: Vec<u32> = (0..n as u32).collect();
    let token_seq = vec![0u32; n];
    let pages = [0u32, 1, 2, 3];
    let seqs = [SeqPages { pages: &pages, window_pages: &pages, state_slot: 0 }];
    let inp = StepInputs {
        tokens: &toks,
        positions: &positions,
        token_seq: &token_seq,
        seqs: &seqs,
        output_rows: &positions,
        embed_mix: &[],
        hidden: &[],
    };
    for &i in &nodes {
        let node = &full.nodes[i];
        let g = Graph { nodes: full.nodes[..=i].to_vec(), n_tokens: n, n_outputs: node.rows() };
        let inp = StepInputs { output_rows: &positions[..node.rows()], ..inp };
        let pc = cpu.compile(&g).unwrap();
        let pv = vk.compile(&g).unwrap();
        let c = cpu.execute(pc, &inp).unwrap();
        let v = vk.execute(pv, &inp).unwrap();
        let cols = node.cols();
        if let Ok(dir) = std::env::var("DUMP") {
            let raw = |x: &[f32]| x.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
            std::fs::write(format!("{dir}/cpu_{i}.f32"), raw(&c)).unwrap();
            std::fs::write(format!("{dir}/vk_{i}.f32"), raw(&v)).unwrap();
        }
        let mut line = format!(
            "node {i:4} {:<8} {:<11} {}x{}",
            node.label.as_deref().unwrap_or("-"),
            node.op.name(),
            node.rows(),
            cols
        );
        for (r, (rc, rv)) in c.chunks(cols).zip(v.chunks(cols)).enumerate().take(3) {
            let (mut md, mut at) = (0f32, 0);
            for (j, (x, y)) in rc.iter().zip(rv).enumerate() {
                let d = (x - y).abs();
                if d > md || d.is_nan() {
                    md = d;
                    at = j;
                }
            }
            let amax = rc.iter().fold(0f32, |s, x| s.max(x.abs()));
            line += &format!(" | r{r} max|d|={md:.4} @{at} (cpu {:.3} vk {:.3}) max|x|={amax:.1}", rc[at], rv[at]);
        }
        println!("{line}");
    }
}
