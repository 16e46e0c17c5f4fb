//! `infr devices`: the compute devices this machine offers and what each can run.

use anyhow::Result;

/// Run `infr devices`.
pub fn run() -> Result<()> {
    let cpu = infr_cpu::CpuBackend::describe();
    println!("{}  {}  {:.1} GiB RAM", cpu.id, cpu.name, gib(cpu.memory_bytes));
    println!("    features: {}", cpu.features.join(", "));
    println!("    runs: every architecture and weight type (reference backend); KV cache f32, f16, q8_0");
    match infr_vulkan::list_device_caps() {
        Ok(list) if list.is_empty() => println!("\nno Vulkan devices"),
        Ok(list) => {
            for caps in list {
                let info = caps.device_info();
                println!("\n{}  {}  {:.1} GiB", info.id, info.name, gib(info.memory_bytes));
                println!("    features: {}", info.features.join(", "));
                let kernels = caps.kernel_summary();
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
