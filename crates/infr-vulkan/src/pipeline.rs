//! Shaders and compute pipelines: WGSL sources (with `{{NAME}}` templating), compiled to
//! SPIR-V by naga at first use, turned into pipelines through an on-disk `VkPipelineCache`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use ash::vk;

use crate::device::Context;
use crate::error::{CallExt, VkError, VkResult};

/// WGSL sources of every kernel family, by name.
pub(crate) const SOURCES: &[(&str, &str)] = &[
    ("common", include_str!("shaders/common.wgsl")),
    ("dequant", include_str!("shaders/dequant.wgsl")),
    ("dequant_iq", include_str!("shaders/dequant_iq.wgsl")),
    ("matmul_generic", include_str!("shaders/matmul_generic.wgsl")),
    ("matmul_vec", include_str!("shaders/matmul_vec.wgsl")),
    ("matmul_tiled", include_str!("shaders/matmul_tiled.wgsl")),
    ("matmul_vec_q8", include_str!("shaders/matmul_vec_q8.wgsl")),
    ("q8_block", include_str!("shaders/q8_block.wgsl")),
    ("q8_store", include_str!("shaders/q8_store.wgsl")),
    ("q8_round16", include_str!("shaders/q8_round16.wgsl")),
    ("quantize_act", include_str!("shaders/quantize_act.wgsl")),
    ("moe_pair_row", include_str!("shaders/moe_pair_row.wgsl")),
    ("moe_pair_inputs", include_str!("shaders/moe_pair_inputs.wgsl")),
    ("norm_q8", include_str!("shaders/norm_q8.wgsl")),
    ("norm_add", include_str!("shaders/norm_add.wgsl")),
    ("glu_q8", include_str!("shaders/glu_q8.wgsl")),
    ("round_act", include_str!("shaders/round_act.wgsl")),
    ("matmul_coop", include_str!("shaders/matmul_coop.wgsl")),
    ("coop_load_quant", include_str!("shaders/coop_load_quant.wgsl")),
    ("coop_load_f16", include_str!("shaders/coop_load_f16.wgsl")),
    ("coop_load_moe", include_str!("shaders/coop_load_moe.wgsl")),
    ("coop_x_f32", include_str!("shaders/coop_x_f32.wgsl")),
    ("coop_x_f16", include_str!("shaders/coop_x_f16.wgsl")),
    ("f16_words", include_str!("shaders/f16_words.wgsl")),
    ("split_reduce", include_str!("shaders/split_reduce.wgsl")),
    ("logit_adjust", include_str!("shaders/logit_adjust.wgsl")),
    ("moe_route_rank", include_str!("shaders/moe_route_rank.wgsl")),
    ("moe_gating", include_str!("shaders/moe_gating.wgsl")),
    ("moe_weigh", include_str!("shaders/moe_weigh.wgsl")),
    ("coop_dense", include_str!("shaders/coop_dense.wgsl")),
    ("deq16_generic", include_str!("shaders/deq16_generic.wgsl")),
    ("deq16_k", include_str!("shaders/deq16_k.wgsl")),
    ("attention_decode", include_str!("shaders/attention_decode.wgsl")),
    ("weight_io", include_str!("shaders/weight_io.wgsl")),
    ("dequant_f16", include_str!("shaders/dequant_f16.wgsl")),
    ("embed", include_str!("shaders/embed.wgsl")),
    ("kv_write_q8", include_str!("shaders/kv_write_q8.wgsl")),
    ("mix_embed", include_str!("shaders/mix_embed.wgsl")),
    ("mix_reduce", include_str!("shaders/mix_reduce.wgsl")),
    ("norm", include_str!("shaders/norm.wgsl")),
    ("rope_math", include_str!("shaders/rope_math.wgsl")),
    ("rope", include_str!("shaders/rope.wgsl")),
    ("qk_rope", include_str!("shaders/qk_rope.wgsl")),
    ("tree_sum", include_str!("shaders/tree_sum.wgsl")),
    ("attn_io", include_str!("shaders/attn_io.wgsl")),
    ("attention", include_str!("shaders/attention.wgsl")),
    ("attention_combine", include_str!("shaders/attention_combine.wgsl")),
    ("attn_combine_q8", include_str!("shaders/attn_combine_q8.wgsl")),
    ("attention_coop", include_str!("shaders/attention_coop.wgsl")),
    ("kv_write", include_str!("shaders/kv_write.wgsl")),
    ("elementwise", include_str!("shaders/elementwise.wgsl")),
    ("gather_rows", include_str!("shaders/gather_rows.wgsl")),
    ("matmul_moe", include_str!("shaders/matmul_moe.wgsl")),
    ("moe_tiles", include_str!("shaders/moe_tiles.wgsl")),
    ("moe_cache", include_str!("shaders/moe_cache.wgsl")),
    ("delta_prep", include_str!("shaders/delta_prep.wgsl")),
    ("delta_chunked", include_str!("shaders/delta_chunked.wgsl")),
    ("moe_fetch", include_str!("shaders/moe_fetch.wgsl")),
    ("moe_route", include_str!("shaders/moe_route.wgsl")),
    ("moe_glu", include_str!("shaders/moe_glu.wgsl")),
    ("moe_combine", include_str!("shaders/moe_combine.wgsl")),
    ("moe_gate", include_str!("shaders/moe_gate.wgsl")),
    ("moe_shared_gate", include_str!("shaders/moe_shared_gate.wgsl")),
    ("temp_scale", include_str!("shaders/temp_scale.wgsl")),
    ("slice_cols", include_str!("shaders/slice_cols.wgsl")),
    ("conv1d", include_str!("shaders/conv1d.wgsl")),
    ("delta_net", include_str!("shaders/delta_net.wgsl")),
    ("delta_rows", include_str!("shaders/delta_rows.wgsl")),
    ("topk", include_str!("shaders/topk.wgsl")),
    ("canvas_sample", include_str!("shaders/canvas_sample.wgsl")),
];

fn source(name: &str) -> VkResult<&'static str> {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| VkError::Shader { name: name.into(), message: "no such shader".into() })
}

/// What to build: the source parts (concatenated in order) and template values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSpec {
    /// Name for profiles and errors (`matmul_generic.q4_K`).
    pub name: String,
    /// Source parts from [`SOURCES`], concatenated.
    pub parts: Vec<&'static str>,
    /// `{{KEY}}` → value substitutions.
    pub defines: Vec<(&'static str, String)>,
    /// Storage-buffer bindings `0..n` in set 0.
    pub bindings: u32,
    /// Bytes of push constants.
    pub push_bytes: u32,
}

impl KernelSpec {
    /// A spec with no defines.
    pub fn new(name: impl Into<String>, parts: &[&'static str], bindings: u32, push_bytes: u32) -> Self {
        Self { name: name.into(), parts: parts.to_vec(), defines: Vec::new(), bindings, push_bytes }
    }

    /// Add a template value (where a key is given twice, the first value is used).
    pub fn define(mut self, key: &'static str, value: impl ToString) -> Self {
        self.defines.push((key, value.to_string()));
        self
    }

    /// Replace the value of a template key already given (for kernels built as variants of
    /// another's spec).
    pub fn redefine(mut self, key: &'static str, value: impl ToString) -> Self {
        self.defines.retain(|(k, _)| *k != key);
        self.define(key, value)
    }

    /// The WGSL text after templating.
    pub fn wgsl(&self) -> VkResult<String> {
        let mut src = String::new();
        for p in &self.parts {
            src.push_str(source(p)?);
            src.push('\n');
        }
        for (k, v) in &self.defines {
            src = src.replace(&format!("{{{{{k}}}}}"), v);
        }
        // WGSL wants `enable` directives before any declaration: hoist them out of the parts.
        let (enables, rest): (Vec<&str>, Vec<&str>) = src.lines().partition(|l| l.trim_start().starts_with("enable "));
        let mut src = enables.join("\n");
        src.push('\n');
        src.push_str(&rest.join("\n"));
        if let Some(pos) = src.find("{{") {
            let end = src[pos..].find("}}").map_or(pos + 10, |e| pos + e + 2);
            return Err(VkError::Shader {
                name: self.name.clone(),
                message: format!("unfilled template {}", &src[pos..end]),
            });
        }
        Ok(src)
    }
}

/// A kernel compiled to SPIR-V, with which of its storage bindings it may read and write.
pub struct Compiled {
    /// The SPIR-V words.
    pub words: Vec<u32>,
    /// Bit `b`: binding `b` of set 0 is declared (read, or read and written).
    pub reads: u64,
    /// Bit `b`: binding `b` of set 0 is declared `read_write` (or atomic).
    pub writes: u64,
}

/// Which storage bindings of set 0 the module declares, and which of them it may write: what
/// lets a plan leave out barriers between dispatches that touch disjoint memory.
fn storage_access(module: &naga::Module) -> (u64, u64) {
    let (mut reads, mut writes) = (0u64, 0u64);
    for (_, var) in module.global_variables.iter() {
        let (naga::AddressSpace::Storage { access }, Some(b)) = (var.space, &var.binding) else { continue };
        if b.group != 0 || b.binding >= 64 {
            continue;
        }
        reads |= 1 << b.binding;
        if access.contains(naga::StorageAccess::STORE) || access.contains(naga::StorageAccess::ATOMIC) {
            writes |= 1 << b.binding;
        }
    }
    (reads, writes)
}

/// Compile WGSL to SPIR-V words with naga.
pub fn compile_wgsl(name: &str, src: &str, int_dot: bool) -> VkResult<Compiled> {
    let err = |message: String| VkError::Shader { name: name.to_owned(), message };
    let module = naga::front::wgsl::parse_str(src).map_err(|e| err(e.emit_to_string(src)))?;
    let (reads, writes) = storage_access(&module);
    let caps = naga::valid::Capabilities::IMMEDIATES
        | naga::valid::Capabilities::SUBGROUP
        | naga::valid::Capabilities::SHADER_INT64
        | naga::valid::Capabilities::SHADER_FLOAT16
        | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32
        | naga::valid::Capabilities::COOPERATIVE_MATRIX;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
        .subgroup_operations(naga::valid::SubgroupOperationSet::all())
        .validate(&module)
        .map_err(|e| err(e.emit_to_string(src)))?;
    let mut opts = naga::back::spv::Options {
        lang_version: (1, 3),
        flags: naga::back::spv::WriterFlags::empty(),
        use_storage_input_output_16: false,
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        emit_int_div_checks: false,
        ..Default::default()
    };
    if !int_dot {
        // Without packed int8 dot, naga polyfills `dot4I8Packed` when the capability is withheld.
        let mut set: naga::FastHashSet<naga::back::spv::Capability> = Default::default();
        use naga::back::spv::Capability as C;
        for c in [
            C::Shader,
            C::Int64,
            C::Float16,
            C::GroupNonUniform,
            C::GroupNonUniformArithmetic,
            C::GroupNonUniformBallot,
            C::GroupNonUniformShuffle,
            C::GroupNonUniformShuffleRelative,
            C::GroupNonUniformVote,
            C::GroupNonUniformQuad,
            C::StorageBuffer16BitAccess,
            C::CooperativeMatrixKHR,
            C::VulkanMemoryModel,
        ] {
            set.insert(c);
        }
        opts.capabilities = Some(set);
    }
    let popts =
        naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    let words = naga::back::spv::write_vec(&module, &info, &opts, Some(&popts)).map_err(|e| err(e.to_string()))?;
    Ok(Compiled { words, reads, writes })
}

/// A compute pipeline with its layouts.
pub struct Pipeline {
    ctx: Arc<Context>,
    /// Kernel name (profiles).
    pub name: String,
    /// The pipeline.
    pub raw: vk::Pipeline,
    /// Its layout.
    pub layout: vk::PipelineLayout,
    /// The descriptor-set layout (set 0).
    pub set_layout: vk::DescriptorSetLayout,
    /// Storage-buffer bindings in set 0.
    pub bindings: u32,
    /// Push-constant bytes.
    pub push_bytes: u32,
    /// Bindings the kernel may read or write ([`Compiled::reads`]).
    pub reads: u64,
    /// Bindings the kernel may write ([`Compiled::writes`]).
    pub writes: u64,
}

impl Pipeline {
    /// Whether the kernel may read or write storage binding `b` (one past the 64 the masks
    /// hold is assumed to).
    pub fn touches(&self, b: usize) -> bool {
        b >= 64 || self.reads & (1 << b) != 0
    }

    /// Whether the kernel may write storage binding `b` (one past the 64 the masks hold is
    /// assumed to).
    pub fn may_write(&self, b: usize) -> bool {
        b >= 64 || self.writes & (1 << b) != 0
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // SAFETY: pipelines are dropped after the plans using them finished (the backend waits
        // for idle first).
        unsafe {
            let d = &self.ctx.device;
            d.destroy_pipeline(self.raw, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

/// FNV-1a, stable across runs (keys the disk cache).
fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The pipelines of one device, built on demand and cached in memory and on disk.
pub struct Pipelines {
    ctx: Arc<Context>,
    cache: vk::PipelineCache,
    cache_path: Option<PathBuf>,
    built: HashMap<KernelSpec, Arc<Pipeline>>,
    /// Pipelines were built since the cache was last written.
    unsaved: bool,
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("infr"));
    }
    std::env::var_os("HOME").filter(|x| !x.is_empty()).map(|h| PathBuf::from(h).join(".cache").join("infr"))
}

impl Pipelines {
    /// Open the pipeline cache for this device (a missing or stale file is ignored).
    pub fn new(ctx: &Arc<Context>) -> VkResult<Self> {
        let mut h = fnv1a(&ctx.caps.pipeline_cache_uuid, 0xcbf2_9ce4_8422_2325);
        h = fnv1a(ctx.caps.driver.as_bytes(), h);
        h = fnv1a(env!("CARGO_PKG_VERSION").as_bytes(), h);
        for (n, s) in SOURCES {
            h = fnv1a(n.as_bytes(), h);
            h = fnv1a(s.as_bytes(), h);
        }
        let cache_path = cache_dir().map(|d| d.join(format!("vk-pipelines-{h:016x}.bin")));
        let initial = cache_path.as_ref().and_then(|p| std::fs::read(p).ok()).unwrap_or_default();
        let info = vk::PipelineCacheCreateInfo::default().initial_data(&initial);
        // SAFETY: valid device; the driver validates the initial data's header and ignores a mismatch.
        let cache = match unsafe { ctx.device.create_pipeline_cache(&info, None) } {
            Ok(c) => c,
            Err(_) => {
                let info = vk::PipelineCacheCreateInfo::default();
                // SAFETY: as above, without initial data.
                unsafe { ctx.device.create_pipeline_cache(&info, None) }.vk("vkCreatePipelineCache")?
            }
        };
        Ok(Self { ctx: ctx.clone(), cache, cache_path, built: HashMap::new(), unsaved: false })
    }

    /// The pipeline for `spec`, building it on first use.
    pub fn get(&mut self, spec: &KernelSpec) -> VkResult<Arc<Pipeline>> {
        if let Some(p) = self.built.get(spec) {
            return Ok(p.clone());
        }
        let src = spec.wgsl()?;
        let compiled = compile_wgsl(&spec.name, &src, self.ctx.caps.int_dot)?;
        let started = std::time::Instant::now();
        let p = Arc::new(self.build(spec, &compiled)?);
        // Drivers that compile lazily (lavapipe) take their time at the first dispatch instead.
        let ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::debug!(kernel = %spec.name, ms, "pipeline built");
        self.built.insert(spec.clone(), p.clone());
        self.unsaved = true;
        Ok(p)
    }

    fn build(&self, spec: &KernelSpec, compiled: &Compiled) -> VkResult<Pipeline> {
        let words = &compiled.words;
        let d = &self.ctx.device;
        let binds: Vec<_> = (0..spec.bindings)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        // SAFETY: create infos are valid and outlive the calls; objects are destroyed on error.
        unsafe {
            let set_layout = d
                .create_descriptor_set_layout(&vk::DescriptorSetLayoutCreateInfo::default().bindings(&binds), None)
                .vk("vkCreateDescriptorSetLayout")?;
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .offset(0)
                .size(spec.push_bytes.max(4))];
            let sets = [set_layout];
            let linfo = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets).push_constant_ranges(&ranges);
            let layout = match d.create_pipeline_layout(&linfo, None) {
                Ok(l) => l,
                Err(e) => {
                    d.destroy_descriptor_set_layout(set_layout, None);
                    return Err(VkError::call("vkCreatePipelineLayout", e));
                }
            };
            let module = match d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None) {
                Ok(m) => m,
                Err(e) => {
                    d.destroy_pipeline_layout(layout, None);
                    d.destroy_descriptor_set_layout(set_layout, None);
                    return Err(VkError::call("vkCreateShaderModule", e));
                }
            };
            // Every workgroup size is a multiple of 64 or of the fixed subgroup size, so this
            // holds for all kernels (see `DeviceCaps::full_subgroups`).
            let flags = if self.ctx.caps.full_subgroups {
                vk::PipelineShaderStageCreateFlags::REQUIRE_FULL_SUBGROUPS
            } else {
                vk::PipelineShaderStageCreateFlags::empty()
            };
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .flags(flags)
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            let create_flags = if self.ctx.pipeline_stats {
                let ir = std::env::var_os("INFR_VK_PIPELINE_IR").is_some();
                vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                    | if ir {
                        vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR
                    } else {
                        vk::PipelineCreateFlags::empty()
                    }
            } else {
                vk::PipelineCreateFlags::empty()
            };
            let cinfo = [vk::ComputePipelineCreateInfo::default().flags(create_flags).stage(stage).layout(layout)];
            let res = d.create_compute_pipelines(self.cache, &cinfo, None);
            d.destroy_shader_module(module, None);
            let raw = match res {
                Ok(p) => p[0],
                Err((_, e)) => {
                    d.destroy_pipeline_layout(layout, None);
                    d.destroy_descriptor_set_layout(set_layout, None);
                    return Err(VkError::call("vkCreateComputePipelines", e));
                }
            };
            if self.ctx.pipeline_stats {
                log_pipeline_stats(&self.ctx, &spec.name, raw);
            }
            Ok(Pipeline {
                ctx: self.ctx.clone(),
                name: spec.name.clone(),
                raw,
                layout,
                set_layout,
                bindings: spec.bindings,
                push_bytes: spec.push_bytes,
                reads: compiled.reads,
                writes: compiled.writes,
            })
        }
    }

    /// Write the pipeline cache to disk (best effort) if pipelines were built since the last
    /// write: plans compiled later in a server's life (new batch shapes) skip the file write.
    pub fn save(&mut self) {
        if !self.unsaved {
            return;
        }
        self.unsaved = false;
        let Some(path) = &self.cache_path else { return };
        // SAFETY: valid cache object.
        let Ok(data) = (unsafe { self.ctx.device.get_pipeline_cache_data(self.cache) }) else { return };
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = path.with_extension(unique_tmp_extension());
        if std::fs::write(&tmp, &data).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

/// A temporary-file extension no other save uses at the same time: backends of one process
/// (two models of `infr multi` on one GPU, parallel tests) save the same cache file, and a
/// shared temporary name would let two writes interleave into a torn file.
fn unique_tmp_extension() -> String {
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("tmp{}-{n}", std::process::id())
}

impl Drop for Pipelines {
    fn drop(&mut self) {
        self.save();
        self.built.clear();
        // SAFETY: the cache is no longer used by any pipeline creation.
        unsafe { self.ctx.device.destroy_pipeline_cache(self.cache, None) };
    }
}

/// Log the driver's compiler statistics of one pipeline (`INFR_VK_PIPELINE_STATS=1`):
/// one `info` line per executable with every statistic the driver names. With
/// `INFR_VK_PIPELINE_IR=DIR` the driver's internal representations (where it offers any) are
/// also written to `DIR/<kernel>.<executable>.<n>.txt`.
fn log_pipeline_stats(ctx: &Context, name: &str, pipeline: vk::Pipeline) {
    let pe = ash::khr::pipeline_executable_properties::Device::new(&ctx.instance.raw, &ctx.device);
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    let ir_dir = std::env::var_os("INFR_VK_PIPELINE_IR").map(PathBuf::from);
    // SAFETY: the pipeline was created with CAPTURE_STATISTICS (and CAPTURE_INTERNAL_
    // REPRESENTATIONS when a directory is named) on a device with the extension and feature
    // enabled; the output structs are default-initialised and the data buffers outlive the calls.
    unsafe {
        let Ok(execs) = pe.get_pipeline_executable_properties(&info) else { return };
        for i in 0..execs.len() as u32 {
            let ex = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(i);
            let Ok(stats) = pe.get_pipeline_executable_statistics(&ex) else { continue };
            let line: Vec<String> = stats
                .iter()
                .map(|s| {
                    let label = s.name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
                    let v = match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => s.value.b32.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => format!("{:.2}", s.value.f64),
                        _ => "?".into(),
                    };
                    format!("{label}={v}")
                })
                .collect();
            tracing::info!(kernel = name, "pipeline stats: {}", line.join(", "));
            if let Some(dir) = &ir_dir {
                write_internal_representations(&pe, &ex, dir, &format!("{name}.{i}"));
            }
        }
    }
}

/// Write the driver's internal representations of one pipeline executable as text files.
///
/// # Safety
/// `ex` names an executable of a pipeline created with CAPTURE_INTERNAL_REPRESENTATIONS.
unsafe fn write_internal_representations(
    pe: &ash::khr::pipeline_executable_properties::Device,
    ex: &vk::PipelineExecutableInfoKHR,
    dir: &std::path::Path,
    stem: &str,
) {
    // SAFETY (whole body): two-call idiom; the second call writes at most `data_size` bytes
    // into each buffer, which live until the end of the function.
    unsafe {
        let Ok(mut reps) = pe.get_pipeline_executable_internal_representations(ex) else { return };
        let mut bufs: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
        for (r, b) in reps.iter_mut().zip(bufs.iter_mut()) {
            r.p_data = b.as_mut_ptr().cast();
        }
        let mut count = reps.len() as u32;
        let f = pe.fp().get_pipeline_executable_internal_representations_khr;
        if f(pe.device(), ex, &mut count, reps.as_mut_ptr()) != vk::Result::SUCCESS {
            return;
        }
        let _ = std::fs::create_dir_all(dir);
        for (n, (r, b)) in reps.iter().zip(&bufs).enumerate() {
            let label = r.name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
            let text = if r.is_text == vk::TRUE {
                String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(&[])).into_owned()
            } else {
                format!("(binary, {} bytes)", b.len())
            };
            let _ = std::fs::write(dir.join(format!("{stem}.{n}.txt")), format!("# {label}\n{text}"));
        }
    }
}

#[cfg(test)]
mod tests {
    /// Read-only bindings are read, `read_write` and atomic ones written, undeclared ones
    /// neither (the plan's barriers rest on this).
    #[test]
    fn storage_access_follows_the_declared_access_modes() {
        let src = "
@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<atomic<u32>>;
@group(0) @binding(5) var<storage> D: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    Y[g.x] = A[g.x] + D[g.x];
    atomicAdd(&C[0], 1u);
}";
        let c = super::compile_wgsl("access", src, false).expect("compiles");
        assert_eq!(c.reads, 0b101101);
        assert_eq!(c.writes, 0b001100);
    }

    #[test]
    fn cache_saves_of_one_process_use_distinct_temporary_files() {
        let (a, b) = (super::unique_tmp_extension(), super::unique_tmp_extension());
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("tmp{}-", std::process::id())), "{a}");
    }
}
