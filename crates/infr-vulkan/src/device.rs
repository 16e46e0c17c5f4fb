//! The device layer: loading Vulkan, the instance (with optional validation), probing physical
//! devices for capabilities, and the logical device with its compute queue.

use std::ffi::{c_void, CStr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use ash::vk;

use crate::error::{CallExt, VkError, VkResult};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// One cooperative-matrix configuration a device offers (`VK_KHR_cooperative_matrix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopMatShape {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A / rows of B.
    pub k: u32,
    /// Element type of A and B (`f16`, `bf16`, `i8`…).
    pub ab: &'static str,
    /// Element type of the accumulator.
    pub c: &'static str,
}

/// What a physical device is and can do, probed through Vulkan queries.
#[derive(Debug, Clone, Default)]
pub struct DeviceCaps {
    /// `Vulkan0`, `Vulkan1`… in enumeration order.
    pub id: String,
    /// Index in `vkEnumeratePhysicalDevices`.
    pub index: usize,
    /// Device name.
    pub name: String,
    /// Driver name and info (`VkPhysicalDeviceDriverProperties`), if known.
    pub driver: String,
    /// Supported API version, `major.minor.patch`.
    pub api_version: (u32, u32, u32),
    /// Size of the largest device-local heap.
    pub device_local_bytes: u64,
    /// Budget of that heap (`VK_EXT_memory_budget`), when the driver reports one.
    pub budget_bytes: Option<u64>,
    /// Default subgroup size.
    pub subgroup_size: u32,
    /// Smallest and largest subgroup sizes (subgroup size control), if reported.
    pub subgroup_size_range: Option<(u32, u32)>,
    /// Whether subgroup arithmetic (`subgroupAdd`) works in compute shaders.
    pub subgroup_arithmetic: bool,
    /// Whether subgroup shuffles (`subgroupShuffleXor`) work in compute shaders.
    pub subgroup_shuffle: bool,
    /// Pipelines can require full subgroups (`computeFullSubgroups`, and every kernel's
    /// workgroup size is a multiple of the largest subgroup size): kernels that give each
    /// invocation its data by subgroup lane order rely on it.
    pub full_subgroups: bool,
    /// Workgroup (shared) memory per workgroup.
    pub shared_memory_bytes: u32,
    /// Largest range of one storage-buffer binding.
    pub max_storage_buffer_range: u64,
    /// Largest single memory allocation.
    pub max_allocation_bytes: u64,
    /// Minimum alignment of storage-buffer binding offsets.
    pub storage_offset_alignment: u64,
    /// Largest workgroup count in x.
    pub max_workgroup_count: [u32; 3],
    /// Largest workgroup size (invocations).
    pub max_workgroup_invocations: u32,
    /// Bytes of push constants.
    pub max_push_constants: u32,
    /// Storage-buffer bindings one compute shader may use.
    pub max_storage_buffers_per_stage: u32,
    /// f16 arithmetic in shaders (`shaderFloat16`).
    pub shader_f16: bool,
    /// 16-bit storage buffer access.
    pub storage_16bit: bool,
    /// Packed int8 dot products (`shaderIntegerDotProduct`).
    pub int_dot: bool,
    /// Packed signed int8 dot is accelerated in hardware.
    pub int_dot_accelerated: bool,
    /// `VK_KHR_shader_bfloat16` is offered.
    pub bf16: bool,
    /// The Vulkan memory model (needed by cooperative-matrix shaders).
    pub vulkan_memory_model: bool,
    /// Cooperative matrix shapes (empty without `VK_KHR_cooperative_matrix`).
    pub coopmat: Vec<CoopMatShape>,
    /// Nanoseconds per timestamp tick; 0 if compute queues have no timestamps.
    pub timestamp_period_ns: f32,
    /// `pipelineCacheUUID` (keys the on-disk pipeline cache).
    pub pipeline_cache_uuid: [u8; 16],
    has_memory_budget: bool,
    has_coopmat_ext: bool,
    has_int_dot_ext: bool,
    /// `VK_KHR_pipeline_executable_properties` is offered (compiler statistics per pipeline).
    pub has_pipeline_stats_ext: bool,
}

impl DeviceCaps {
    /// Capability lines for `infr devices` / [`infr_core::DeviceInfo::features`].
    pub fn feature_lines(&self) -> Vec<String> {
        let (a, b, c) = self.api_version;
        let mut f = vec![format!("vulkan {a}.{b}.{c}")];
        if !self.driver.is_empty() {
            f.push(format!("driver {}", self.driver));
        }
        match self.subgroup_size_range {
            Some((lo, hi)) if lo != hi => f.push(format!("subgroup {} ({lo}..{hi})", self.subgroup_size)),
            _ => f.push(format!("subgroup {}", self.subgroup_size)),
        }
        if self.subgroup_arithmetic {
            f.push("subgroup arithmetic".into());
        }
        if self.subgroup_shuffle {
            f.push("subgroup shuffle".into());
        }
        if self.full_subgroups {
            f.push("full subgroups".into());
        }
        f.push(format!("shared memory {} KiB", self.shared_memory_bytes / 1024));
        f.push(format!("max storage buffer range {}", self.max_storage_buffer_range));
        f.push(format!("max allocation {}", self.max_allocation_bytes));
        if let Some(b) = self.budget_bytes {
            f.push(format!("memory budget {b}"));
        }
        if self.shader_f16 {
            f.push("f16".into());
        }
        if self.int_dot {
            f.push(if self.int_dot_accelerated { "int8 dot (accelerated)".into() } else { "int8 dot".into() });
        }
        if self.bf16 {
            f.push("bf16".into());
        }
        for s in &self.coopmat {
            f.push(format!("coopmat {}x{}x{} {}->{}", s.m, s.n, s.k, s.ab, s.c));
        }
        f
    }

    /// The trait-level description of this device.
    pub fn device_info(&self) -> infr_core::DeviceInfo {
        infr_core::DeviceInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            memory_bytes: self.device_local_bytes,
            features: self.feature_lines(),
        }
    }
}

/// Validation messages collected by the debug-utils messenger.
#[derive(Debug, Default)]
pub struct MessageSink {
    messages: Mutex<Vec<String>>,
}

impl MessageSink {
    /// Take the collected warnings and errors.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.messages.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the loader passes a valid callback-data pointer for the duration of the call, and
    // `user` is the `MessageSink` kept alive by the `Instance` that owns the messenger.
    unsafe {
        let msg = if data.is_null() || (*data).p_message.is_null() {
            String::from("(no message)")
        } else {
            CStr::from_ptr((*data).p_message).to_string_lossy().into_owned()
        };
        let line = format!("{severity:?} {types:?}: {msg}");
        tracing::warn!(target: "infr_vulkan::validation", "{line}");
        if let Some(sink) = (user as *const MessageSink).as_ref() {
            sink.messages.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    }
    vk::FALSE
}

/// The Vulkan instance plus its optional validation messenger.
pub struct Instance {
    /// The loaded Vulkan entry points.
    pub entry: ash::Entry,
    /// The instance.
    pub raw: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Messages the validation layer reported (empty without validation).
    pub sink: Arc<MessageSink>,
    /// Whether the validation layer is active.
    pub validation: bool,
    api_version: u32,
}

/// Whether the validation layer should be on: `INFR_VK_VALIDATION=1`.
pub fn validation_requested() -> bool {
    std::env::var("INFR_VK_VALIDATION").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The system Vulkan loader, loaded once per process and kept: unloading it unloads the
/// drivers, and the NVIDIA driver cannot be loaded again many times in one process (after
/// about 20 instance lifetimes `vkCreateInstance` found no driver).
fn vulkan_loader() -> VkResult<ash::Entry> {
    static LOADER: std::sync::OnceLock<Result<ash::Entry, String>> = std::sync::OnceLock::new();
    // SAFETY: loading the system Vulkan loader runs its initialisers; it has no other
    // preconditions. A missing loader is an error, not a crash.
    let loaded = LOADER.get_or_init(|| unsafe { ash::Entry::load() }.map_err(|e| e.to_string()));
    loaded.clone().map_err(VkError::NoLoader)
}

impl Instance {
    /// Load Vulkan and create an instance; `validation` enables `VK_LAYER_KHRONOS_validation`
    /// when it is installed (a missing layer is logged and ignored).
    pub fn new(validation: bool) -> VkResult<Self> {
        let entry = vulkan_loader()?;
        // SAFETY: plain queries on a loaded entry.
        let loader_version = unsafe { entry.try_enumerate_instance_version() }
            .vk("vkEnumerateInstanceVersion")?
            .unwrap_or(vk::API_VERSION_1_0);
        if loader_version < vk::API_VERSION_1_1 {
            return Err(VkError::MissingCapability { device: "loader".into(), what: "Vulkan 1.1".into() });
        }
        let api_version = loader_version.min(vk::API_VERSION_1_3);
        // SAFETY: plain queries on a loaded entry.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
        let has_layer = layers.iter().any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION_LAYER));
        // SAFETY: as above.
        let exts = unsafe { entry.enumerate_instance_extension_properties(None) }.unwrap_or_default();
        let has_debug_utils =
            exts.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == ash::ext::debug_utils::NAME));
        let validation = if validation && !has_layer {
            tracing::warn!("INFR_VK_VALIDATION: {VALIDATION_LAYER:?} is not installed; running without it");
            false
        } else {
            validation
        };
        let use_debug = validation && has_debug_utils;
        let app =
            vk::ApplicationInfo::default().application_name(c"infr").engine_name(c"infr").api_version(api_version);
        let layer_ptrs = if validation { vec![VALIDATION_LAYER.as_ptr()] } else { vec![] };
        let ext_ptrs = if use_debug { vec![ash::ext::debug_utils::NAME.as_ptr()] } else { vec![] };
        let info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_ptrs)
            .enabled_extension_names(&ext_ptrs);
        // SAFETY: `info` and everything it points to outlive the call.
        let raw = unsafe { entry.create_instance(&info, None) }.vk("vkCreateInstance")?;
        let sink = Arc::new(MessageSink::default());
        let debug = if use_debug {
            let du = ash::ext::debug_utils::Instance::new(&entry, &raw);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(debug_callback))
                .user_data(Arc::as_ptr(&sink) as *mut c_void);
            // SAFETY: the sink outlives the messenger (both owned by `Self`, messenger destroyed first).
            let m = unsafe { du.create_debug_utils_messenger(&info, None) }.vk("vkCreateDebugUtilsMessengerEXT")?;
            Some((du, m))
        } else {
            None
        };
        Ok(Self { entry, raw, debug, sink, validation, api_version })
    }

    /// Physical devices in enumeration order.
    pub fn physical_devices(&self) -> VkResult<Vec<vk::PhysicalDevice>> {
        // SAFETY: valid instance.
        unsafe { self.raw.enumerate_physical_devices() }.vk("vkEnumeratePhysicalDevices")
    }

    /// Probe one physical device.
    pub fn probe(&self, index: usize, pd: vk::PhysicalDevice) -> DeviceCaps {
        probe(self, index, pd)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: no child objects remain (devices are dropped before their instance: `Context`
        // holds an `Arc<Instance>`).
        unsafe {
            if let Some((du, m)) = self.debug.take() {
                du.destroy_debug_utils_messenger(m, None);
            }
            self.raw.destroy_instance(None);
        }
    }
}

fn has_ext(exts: &[vk::ExtensionProperties], name: &CStr) -> bool {
    exts.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
}

fn component_name(t: vk::ComponentTypeKHR) -> &'static str {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => "f16",
        vk::ComponentTypeKHR::FLOAT32 => "f32",
        vk::ComponentTypeKHR::FLOAT64 => "f64",
        vk::ComponentTypeKHR::SINT8 => "i8",
        vk::ComponentTypeKHR::UINT8 => "u8",
        vk::ComponentTypeKHR::SINT32 => "i32",
        vk::ComponentTypeKHR::UINT32 => "u32",
        vk::ComponentTypeKHR::SINT16 => "i16",
        vk::ComponentTypeKHR::UINT16 => "u16",
        // VK_COMPONENT_TYPE_BFLOAT16_KHR (1000141000) is newer than this ash release.
        t if t.as_raw() == 1_000_141_000 => "bf16",
        _ => "other",
    }
}

fn probe(inst: &Instance, index: usize, pd: vk::PhysicalDevice) -> DeviceCaps {
    let i = &inst.raw;
    // SAFETY: `pd` comes from this instance; all out-structs are properly chained and live
    // across the calls.
    unsafe {
        let props = i.get_physical_device_properties(pd);
        let dev_api = props.api_version.min(inst.api_version);
        let exts = i.enumerate_device_extension_properties(pd).unwrap_or_default();
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut sg_size = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        let mut int_dot_props = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
        let v12 = dev_api >= vk::API_VERSION_1_2;
        let v13 = dev_api >= vk::API_VERSION_1_3;
        let has_int_dot_ext = has_ext(&exts, ash::khr::shader_integer_dot_product::NAME);
        {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
            if v12 {
                p2 = p2.push_next(&mut driver);
            }
            if v13 {
                p2 = p2.push_next(&mut sg_size);
            }
            if v13 || has_int_dot_ext {
                p2 = p2.push_next(&mut int_dot_props);
            }
            i.get_physical_device_properties2(pd, &mut p2);
        }
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut f16b = vk::PhysicalDevice16BitStorageFeatures::default();
        {
            let mut f2 = vk::PhysicalDeviceFeatures2::default();
            if v12 {
                f2 = f2.push_next(&mut f11).push_next(&mut f12);
            } else {
                f2 = f2.push_next(&mut f16b);
            }
            if v13 {
                f2 = f2.push_next(&mut f13);
            }
            i.get_physical_device_features2(pd, &mut f2);
        }
        let has_memory_budget = has_ext(&exts, ash::ext::memory_budget::NAME);
        let mem = i.get_physical_device_memory_properties(pd);
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        if has_memory_budget {
            let mut m2 = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
            i.get_physical_device_memory_properties2(pd, &mut m2);
        }
        let mut best_heap = None;
        for h in 0..mem.memory_heap_count as usize {
            let heap = mem.memory_heaps[h];
            if heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL) && best_heap.is_none_or(|(_, s)| heap.size > s) {
                best_heap = Some((h, heap.size));
            }
        }
        let (heap_idx, heap_size) = best_heap.unwrap_or((0, mem.memory_heaps[0].size));
        let has_coopmat_ext = has_ext(&exts, ash::khr::cooperative_matrix::NAME);
        let mut coopmat = Vec::new();
        if has_coopmat_ext {
            let cm = ash::khr::cooperative_matrix::Instance::new(&inst.entry, i);
            for p in cm.get_physical_device_cooperative_matrix_properties(pd).unwrap_or_default() {
                if p.scope == vk::ScopeKHR::SUBGROUP {
                    coopmat.push(CoopMatShape {
                        m: p.m_size,
                        n: p.n_size,
                        k: p.k_size,
                        ab: component_name(p.a_type),
                        c: component_name(p.c_type),
                    });
                }
            }
        }
        let queue_families = i.get_physical_device_queue_family_properties(pd);
        let ts_ok = queue_families
            .iter()
            .any(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE) && q.timestamp_valid_bits > 0);
        let driver_name = if v12 {
            let n = driver.driver_name_as_c_str().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let info = driver.driver_info_as_c_str().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            if info.is_empty() {
                n
            } else {
                format!("{n} {info}")
            }
        } else {
            String::new()
        };
        let l = &props.limits;
        DeviceCaps {
            id: format!("Vulkan{index}"),
            index,
            name: props.device_name_as_c_str().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
            driver: driver_name,
            api_version: (
                vk::api_version_major(props.api_version),
                vk::api_version_minor(props.api_version),
                vk::api_version_patch(props.api_version),
            ),
            device_local_bytes: heap_size,
            budget_bytes: has_memory_budget.then(|| budget.heap_budget[heap_idx]),
            subgroup_size: subgroup.subgroup_size,
            subgroup_size_range: v13.then_some((sg_size.min_subgroup_size, sg_size.max_subgroup_size)),
            subgroup_arithmetic: subgroup.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
                && subgroup.supported_operations.contains(vk::SubgroupFeatureFlags::ARITHMETIC),
            subgroup_shuffle: subgroup.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
                && subgroup.supported_operations.contains(vk::SubgroupFeatureFlags::SHUFFLE),
            shared_memory_bytes: l.max_compute_shared_memory_size,
            max_storage_buffer_range: l.max_storage_buffer_range as u64,
            max_allocation_bytes: {
                let mut m3 = vk::PhysicalDeviceMaintenance3Properties::default();
                let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut m3);
                i.get_physical_device_properties2(pd, &mut p2);
                m3.max_memory_allocation_size
            },
            storage_offset_alignment: l.min_storage_buffer_offset_alignment.max(4),
            max_workgroup_count: l.max_compute_work_group_count,
            max_workgroup_invocations: l.max_compute_work_group_invocations,
            max_push_constants: l.max_push_constants_size,
            max_storage_buffers_per_stage: l.max_per_stage_descriptor_storage_buffers,
            shader_f16: v12 && f12.shader_float16 == vk::TRUE,
            storage_16bit: if v12 {
                f11.storage_buffer16_bit_access == vk::TRUE
            } else {
                f16b.storage_buffer16_bit_access == vk::TRUE
            },
            int_dot: v13 && f13.shader_integer_dot_product == vk::TRUE,
            full_subgroups: v13
                && f13.compute_full_subgroups == vk::TRUE
                && sg_size.max_subgroup_size > 0
                && 64 % sg_size.max_subgroup_size == 0,
            int_dot_accelerated: int_dot_props.integer_dot_product4x8_bit_packed_signed_accelerated == vk::TRUE,
            bf16: has_ext(&exts, c"VK_KHR_shader_bfloat16"),
            vulkan_memory_model: v12 && f12.vulkan_memory_model == vk::TRUE,
            coopmat,
            timestamp_period_ns: if ts_ok { l.timestamp_period } else { 0.0 },
            pipeline_cache_uuid: props.pipeline_cache_uuid,
            has_memory_budget,
            has_coopmat_ext,
            has_int_dot_ext,
            has_pipeline_stats_ext: has_ext(&exts, ash::khr::pipeline_executable_properties::NAME),
        }
    }
}

/// The process's Vulkan instance (one with the validation layer asked for, one without),
/// created on first use and kept until exit. Destroying an instance lets the loader unload
/// the driver; the NVIDIA driver could not be loaded again after about 20 instance lifetimes
/// in one process (`vkCreateInstance`: no driver found), which a server that loads models
/// repeatedly, or a test binary, would hit.
pub fn shared_instance(validation: bool) -> VkResult<Arc<Instance>> {
    static INSTANCES: Mutex<[Option<Arc<Instance>>; 2]> = Mutex::new([None, None]);
    let mut held = INSTANCES.lock().unwrap_or_else(|e| e.into_inner());
    let slot = &mut held[usize::from(validation)];
    if let Some(inst) = slot {
        return Ok(inst.clone());
    }
    let inst = Arc::new(Instance::new(validation)?);
    *slot = Some(inst.clone());
    Ok(inst)
}

/// List the Vulkan devices with their capabilities (`infr devices`).
pub fn list_device_caps() -> VkResult<Vec<DeviceCaps>> {
    let inst = shared_instance(false)?;
    let pds = inst.physical_devices()?;
    Ok(pds.iter().enumerate().map(|(i, &pd)| inst.probe(i, pd)).collect())
}

/// List the Vulkan devices as trait-level [`infr_core::DeviceInfo`] (`Vulkan0..N`).
pub fn list_devices() -> VkResult<Vec<infr_core::DeviceInfo>> {
    Ok(list_device_caps()?.iter().map(DeviceCaps::device_info).collect())
}

/// A logical device with one compute queue, plus what it was created with.
pub struct Context {
    /// The instance (kept alive as long as the device).
    pub instance: Arc<Instance>,
    /// The physical device.
    pub physical: vk::PhysicalDevice,
    /// The logical device.
    pub device: ash::Device,
    /// The compute queue.
    pub queue: vk::Queue,
    /// Its family.
    pub queue_family: u32,
    /// Capabilities of the device.
    pub caps: DeviceCaps,
    /// Memory types and heaps.
    pub memory: vk::PhysicalDeviceMemoryProperties,
    /// Pipelines are built with compiler statistics, logged once per pipeline built
    /// (`INFR_VK_PIPELINE_STATS=1` on a device with `VK_KHR_pipeline_executable_properties`).
    pub pipeline_stats: bool,
    /// Device-local bytes the buffers of this context hold now.
    pub device_bytes: AtomicU64,
    /// The device's index and whether validation is on (how it was created; see `Devices`).
    index: usize,
    validation: bool,
    /// Most device-local bytes its buffers may hold (0: no limit but the device's).
    pub device_limit: AtomicU64,
}

/// Whether `INFR_VK_PIPELINE_STATS=1` asks for per-pipeline compiler statistics (registers,
/// shared memory, spills as the driver reports them), a tuning aid for kernel authors.
fn pipeline_stats_requested() -> bool {
    std::env::var("INFR_VK_PIPELINE_STATS").is_ok_and(|v| v == "1")
}

impl Context {
    /// Open device `index` (as numbered by [`list_devices`]).
    pub fn new(index: usize, validation: bool) -> VkResult<Self> {
        let instance = shared_instance(validation)?;
        let pds = instance.physical_devices()?;
        let &physical =
            pds.get(index).ok_or_else(|| VkError::NoDevice(format!("Vulkan{index} ({} found)", pds.len())))?;
        let caps = instance.probe(index, physical);
        let i = &instance.raw;
        // SAFETY: valid physical device of this instance.
        let families = unsafe { i.get_physical_device_queue_family_properties(physical) };
        let compute = |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE);
        let queue_family = families
            .iter()
            .position(|f| compute(f) && f.timestamp_valid_bits > 0)
            .or_else(|| families.iter().position(compute))
            .ok_or_else(|| VkError::MissingCapability { device: caps.name.clone(), what: "a compute queue".into() })?
            as u32;
        let prio = [1.0f32];
        let qinfo = [vk::DeviceQueueCreateInfo::default().queue_family_index(queue_family).queue_priorities(&prio)];
        let mut ext_names = Vec::new();
        if caps.has_memory_budget {
            ext_names.push(ash::ext::memory_budget::NAME.as_ptr());
        }
        if caps.has_coopmat_ext {
            ext_names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        }
        if caps.has_int_dot_ext && caps.api_version.1 < 3 {
            ext_names.push(ash::khr::shader_integer_dot_product::NAME.as_ptr());
        }
        let pipeline_stats = caps.has_pipeline_stats_ext && pipeline_stats_requested();
        if pipeline_stats {
            ext_names.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        }
        let v12 = caps.api_version.1 >= 2;
        let v13 = caps.api_version.1 >= 3;
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(caps.storage_16bit);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(caps.shader_f16)
            .vulkan_memory_model(caps.vulkan_memory_model);
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default()
            .shader_integer_dot_product(caps.int_dot)
            .compute_full_subgroups(caps.full_subgroups);
        let mut cm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut pe =
            vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
        let mut f2 = vk::PhysicalDeviceFeatures2::default();
        if v12 {
            f2 = f2.push_next(&mut f11).push_next(&mut f12);
        }
        if v13 {
            f2 = f2.push_next(&mut f13);
        }
        if caps.has_coopmat_ext {
            f2 = f2.push_next(&mut cm);
        }
        if pipeline_stats {
            f2 = f2.push_next(&mut pe);
        }
        let dinfo = vk::DeviceCreateInfo::default()
            .queue_create_infos(&qinfo)
            .enabled_extension_names(&ext_names)
            .push_next(&mut f2);
        let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        let reuse = devices.idle.iter().position(|d| d.index == index && d.validation == validation);
        let device = match reuse {
            Some(at) => devices.idle.swap_remove(at).device,
            // SAFETY: all create-info structs live across the call; features requested were reported supported.
            None => unsafe { i.create_device(physical, &dinfo, None) }.vk("vkCreateDevice")?,
        };
        devices.live += 1;
        drop(devices);
        // SAFETY: the family was created with one queue.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        // SAFETY: valid physical device.
        let memory = unsafe { i.get_physical_device_memory_properties(physical) };
        Ok(Self {
            instance,
            physical,
            device,
            queue,
            queue_family,
            caps,
            memory,
            pipeline_stats,
            device_bytes: AtomicU64::new(0),
            device_limit: AtomicU64::new(0),
            index,
            validation,
        })
    }

    /// Validation messages collected so far (drained); the instance is shared by every
    /// context of the process, so these are its messages, whichever device caused them.
    pub fn take_messages(&self) -> Vec<String> {
        self.instance.sink.take()
    }

    /// Wait until the device is idle.
    pub fn wait_idle(&self) {
        // SAFETY: valid device; external synchronisation of the queue is given by `&mut` users.
        let _ = unsafe { self.device.device_wait_idle() };
    }
}

/// The process's logical devices: how many contexts are alive, and the idle devices of
/// dropped contexts. NVIDIA's driver (580.159) can deadlock in `vkDestroyDevice` while another
/// device of the process is alive (the destroyed device's worker thread spins while the other
/// device's worker waits on a driver lock; a parity-test process with two devices never
/// ended, about one run in ten). So a device is destroyed only when no other is alive; until
/// then a dropped context's device waits idle and the next context of the same physical
/// device (created the same way) takes it, which also bounds how many devices exist at once.
struct Devices {
    live: usize,
    idle: Vec<IdleDevice>,
}

struct IdleDevice {
    index: usize,
    validation: bool,
    device: ash::Device,
    /// Kept alive until the device is destroyed.
    instance: Arc<Instance>,
}

static DEVICES: std::sync::Mutex<Devices> = std::sync::Mutex::new(Devices { live: 0, idle: Vec::new() });

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: owners of device objects (buffers, pipelines…) are dropped before the context.
        let _ = unsafe { self.device.device_wait_idle() };
        let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        devices.live -= 1;
        devices.idle.push(IdleDevice {
            index: self.index,
            validation: self.validation,
            device: self.device.clone(),
            instance: self.instance.clone(),
        });
        if devices.live == 0 {
            for d in devices.idle.drain(..) {
                // SAFETY: every object of the device is gone and no other device is alive;
                // its instance outlives the call.
                unsafe { d.device.destroy_device(None) };
                drop(d.instance);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every caller gets the one instance of its kind (none where no Vulkan loader exists).
    #[test]
    fn the_instance_is_shared() {
        let (Ok(a), Ok(b)) = (shared_instance(false), shared_instance(false)) else { return };
        assert!(Arc::ptr_eq(&a, &b));
    }
}
