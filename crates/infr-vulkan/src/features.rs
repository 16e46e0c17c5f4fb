//! Which kernels a device gets: the capabilities and settings that select them.

/// Device features that select kernels.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Features {
    /// Subgroup arithmetic in compute shaders (fast reductions, matrix-vector kernels).
    pub subgroups: bool,
    /// f16 16x16x16 cooperative matrices with f32 accumulators, and the (fixed) subgroup
    /// size the cooperative kernel's workgroup is built from.
    pub coopmat: Option<u32>,
    /// Packed int8 dot products (integer matrix-vector kernels for decode).
    pub int8: bool,
    /// Whether several nodes may share one dispatch (`fusion`).
    pub fusion: bool,
    /// Storage-buffer bindings a shader may use.
    pub max_bindings: u32,
    /// Workgroup memory per workgroup.
    pub shared_bytes: u32,
    /// Most key splits of a decode attention row (`None`: automatic).
    pub max_splits: Option<u32>,
}

impl Features {
    /// What the kernels may use on a device (`portable` turns off everything optional,
    /// `no_coopmat` only the cooperative-matrix kernels).
    pub fn of(
        caps: &crate::device::DeviceCaps,
        portable: bool,
        no_coopmat: bool,
        no_int8: bool,
        no_fusion: bool,
    ) -> Self {
        let subgroups = caps.subgroup_arithmetic && !portable;
        // The int8 quantization (q8_block.wgsl) and the cooperative attention use shuffles.
        let shuffles = subgroups && caps.subgroup_shuffle;
        let fixed_sg = match caps.subgroup_size_range {
            Some((lo, hi)) => (lo == hi).then_some(lo),
            None => Some(caps.subgroup_size),
        };
        let shape = caps.coopmat.iter().any(|s| (s.m, s.n, s.k, s.ab, s.c) == (16, 16, 16, "f16", "f32"));
        let coopmat = (shuffles
            && !no_coopmat
            && shape
            && caps.shader_f16
            && caps.vulkan_memory_model
            && caps.shared_memory_bytes >= 24 * 1024)
            .then_some(fixed_sg)
            .flatten()
            .filter(|&s| (4..=64).contains(&s));
        Self {
            subgroups,
            coopmat,
            int8: shuffles && caps.int_dot && !no_int8,
            fusion: !no_fusion,
            max_bindings: caps.max_storage_buffers_per_stage,
            shared_bytes: caps.shared_memory_bytes,
            max_splits: None,
        }
    }
}

impl Features {
    /// Cap the key splits of decode attention (0: automatic).
    pub fn with_max_splits(mut self, max: u32) -> Self {
        self.max_splits = (max > 0).then_some(max);
        self
    }
}
