//! `infr devices`: the compute devices this machine offers and what each can run.

use anyhow::Result;

/// Run `infr devices`.
pub fn run() -> Result<()> {
    let cpu = infr_cpu::CpuBackend::describe();
    println!("{}  {}  {:.1} GiB RAM", cpu.id, cpu.name, gib(cpu.memory_bytes));
    println!("    features: {}", cpu.features.join(", "));
    println!("    runs: every architecture and weight type (reference backend)");
    match infr_vulkan::list_device_caps() {
        Ok(list) if list.is_empty() => println!("\nno Vulkan devices"),
        Ok(list) => {
            for caps in list {
                let info = caps.device_info();
                println!("\n{}  {}  {:.1} GiB", info.id, info.name, gib(info.memory_bytes));
                println!("    features: {}", info.features.join(", "));
                let mut kernels = vec!["every op and weight type of the CPU backend"];
                if !caps.coopmat.is_empty() && caps.vulkan_memory_model {
                    kernels.push("cooperative-matrix prefill matmuls");
                }
                if caps.int_dot {
                    kernels.push("int8 dot decode matmuls");
                }
                if caps.subgroup_arithmetic {
                    // Vulkan only: the CPU selects sampling candidates from whole rows.
                    kernels.push("top-k / greedy sampling candidates selected on the device");
                }
                if caps.int_dot && caps.subgroup_arithmetic && caps.subgroup_shuffle {
                    kernels.push("fused decode kernels (norm+quantize, q/k norm+RoPE+KV append, batched matmuls)");
                } else {
                    kernels.push("fused q/k norm+RoPE+KV append");
                }
                println!("    runs: {}", kernels.join("; "));
            }
        }
        Err(e) => println!("\nno Vulkan: {e}"),
    }
    Ok(())
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}
