//! Which kernels a device gets: the capabilities and settings that select them.

/// Device features that select kernels.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Features {
    /// Subgroup arithmetic in compute shaders (fast reductions, matrix-vector kernels).
    pub subgroups: bool,
    /// Subgroup shuffles among at least 4 lanes (rows of the delta-rule state split over lanes).
    pub shuffles4: bool,
    /// f16 cooperative matrices with f32 accumulators for the prefill kernels.
    pub coopmat: Option<Coop>,
    /// Packed int8 dot products (integer matrix-vector kernels for decode).
    pub int8: bool,
    /// Whether several nodes may share one dispatch (`fusion`).
    pub fusion: bool,
    /// Storage-buffer bindings a shader may use.
    pub max_bindings: u32,
    /// Workgroup memory per workgroup.
    pub shared_bytes: u32,
    /// Bytes one storage buffer may hold (binding range and allocation size).
    pub max_binding_bytes: u64,
    /// Key splits of a decode attention row (`None`: automatic).
    pub attention_splits: Option<u32>,
    /// Most bytes of one weight slice the f16 prefill path dequantizes at once
    /// ([`F16_SLICE_BYTES`] unless a test asks for less).
    pub f16_slice_bytes: u64,
    /// Whether prefill matmuls may run over f16 copies of weights and activations
    /// (`prefill_matmul.rs`; off again for a plan that does not fit with their buffers).
    pub f16_prefill: bool,
    /// Steps of at least this many tokens run the delta rule in its chunked form
    /// ([`DELTA_CHUNK_MIN`], i.e. never, unless `INFR_VK_DELTA_CHUNK_MIN` or a test says
    /// otherwise; 0: never).
    pub delta_chunk_min: u32,
    /// Decode attention over an f16 cache runs by lane groups, the query heads of a KV head in
    /// one workgroup (`attention_decode`; `INFR_VK_ATTN_LANES=1`). Off by default: on an H100
    /// its first form (every lane over all the heads) took 41 against the per-head kernel's
    /// 10 µs a layer at 8 keys, 152 against 27 at 4,096 (Qwen3-30B-A3B); the present one
    /// (each head its own lanes) is not timed.
    pub lane_attention: bool,
    /// The device's smallest subgroup where it has subgroup shuffles (else 0): the most lanes
    /// the lane-group kernels may give one key or row.
    pub min_subgroup: u32,
    /// Prefill's Q4_K / Q6_K dequantization to f16 stores in stripes (each of a workgroup's
    /// four 16-byte stores covers consecutive words across its threads) instead of 64 bytes
    /// a thread (`INFR_VK_DEQ16_STRIPED=0` turns it off). On an H100: Qwen3-8B pp512 10,613
    /// -> 11,000 t/s, Qwen3.5-9B 7,945 -> 8,265.
    pub striped_dequant: bool,
    /// Lanes per state row and state rows per workgroup of the one-step delta rule, where
    /// `INFR_VK_DELTA_SHAPE=LANESxROWS` (tuning, e.g. `8x16`) asks for a shape other than
    /// [`crate::recurrent_kernels::delta_net_shape`]'s default.
    pub delta_shape: Option<(u32, u32)>,
    /// Tokens the one-step delta rule stages at once, where `INFR_VK_DELTA_BLOCK` (tuning)
    /// asks for other than [`crate::recurrent_kernels::delta_block_tokens`]'s default.
    pub delta_block: Option<u32>,
}

/// Fewest tokens of a step that take the chunked delta rule by default: 0, never. The
/// chunked form passes the parity and oracle tests on lavapipe and NVIDIA, but on an H100
/// it was ~10x slower than the one-step recurrence (Qwen3.5-9B pp512: 5.4 ms against 0.57
/// ms a layer; 2,572 against 7,184 t/s), so the recurrence stays the default;
/// `INFR_VK_DELTA_CHUNK_MIN=64` turns it on for prefill chunks of 64 tokens and more (not
/// the batched decode steps of a server, up to 32 rows of one token each).
pub const DELTA_CHUNK_MIN: u32 = 0;

/// Most bytes of one dequantized weight slice (and of the plan's f16 weight buffer): a
/// whole weight matrix of the common models is one slice. Smaller slices, sized to stay in
/// the L2 cache, left too few workgroups per matmul on an H200 (a 4096x12288 down
/// projection in 1280-row slices ran 3x slower than in one).
pub const F16_SLICE_BYTES: u64 = 256 << 20;

/// The cooperative-matrix configuration the prefill kernels are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Coop {
    /// Fragment edge: 16, or 8 on devices that offer only 8x8x8 (lavapipe).
    pub frag: u32,
    /// The device's fixed subgroup size (workgroups are built from whole subgroups).
    pub subgroup: u32,
    /// The quantized loader reads Q4_K and Q6_K units as raw words and dequantizes them when
    /// staging (see `coop_kernels::matmul_coop`).
    pub raw_units: bool,
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
        // 16x16x16 where offered (NVIDIA), else 8x8x8 (lavapipe).
        let frag = [16u32, 8]
            .into_iter()
            .find(|&f| caps.coopmat.iter().any(|s| (s.m, s.n, s.k, s.ab, s.c) == (f, f, f, "f16", "f32")));
        let coopmat = match (frag, fixed_sg) {
            (Some(frag), Some(subgroup))
                if shuffles
                    && !no_coopmat
                    && caps.shader_f16
                    && caps.vulkan_memory_model
                    && caps.shared_memory_bytes >= 24 * 1024
                    && (4..=64).contains(&subgroup) =>
            {
                Some(Coop { frag, subgroup, raw_units: true })
            }
            _ => None,
        };
        Self {
            subgroups,
            shuffles4: shuffles && caps.subgroup_size_range.map_or(caps.subgroup_size, |(lo, _)| lo) >= 4,
            coopmat,
            int8: shuffles && caps.int_dot && !no_int8,
            fusion: !no_fusion,
            max_bindings: caps.max_storage_buffers_per_stage,
            shared_bytes: caps.shared_memory_bytes,
            max_binding_bytes: caps.max_storage_buffer_range.min(caps.max_allocation_bytes),
            attention_splits: None,
            f16_slice_bytes: F16_SLICE_BYTES,
            f16_prefill: true,
            delta_chunk_min: std::env::var("INFR_VK_DELTA_CHUNK_MIN")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DELTA_CHUNK_MIN),
            lane_attention: std::env::var("INFR_VK_ATTN_LANES").is_ok_and(|v| v.trim() == "1"),
            min_subgroup: if shuffles { caps.subgroup_size_range.map_or(caps.subgroup_size, |(lo, _)| lo) } else { 0 },
            striped_dequant: std::env::var("INFR_VK_DEQ16_STRIPED").map_or(true, |v| v.trim() != "0"),
            delta_shape: std::env::var("INFR_VK_DELTA_SHAPE").ok().and_then(|v| {
                let (lanes, rows) = v.trim().split_once('x')?;
                Some((lanes.parse().ok()?, rows.parse().ok()?))
            }),
            delta_block: std::env::var("INFR_VK_DELTA_BLOCK").ok().and_then(|v| v.trim().parse().ok()),
        }
    }
}

impl Features {
    /// Steps of at least `min` tokens take the chunked delta rule (0: keep the setting).
    pub fn with_delta_chunk_min(mut self, min: u32) -> Self {
        if min > 0 {
            self.delta_chunk_min = min;
        }
        self
    }

    /// Decode attention by lane groups (`Some(on)`; `None` keeps the setting).
    pub fn with_lane_attention(mut self, on: Option<bool>) -> Self {
        if let Some(on) = on {
            self.lane_attention = on;
        }
        self
    }

    /// Prefill dequantizes Q4_K / Q6_K weights in stripes (`Some(on)`; `None` keeps the
    /// setting).
    pub fn with_striped_dequant(mut self, on: Option<bool>) -> Self {
        if let Some(on) = on {
            self.striped_dequant = on;
        }
        self
    }

    /// Whether the cooperative matmul reads Q4_K / Q6_K units raw (the default; off with
    /// `VulkanOptions::coop_dequant_on_read`).
    pub fn with_coop_raw_units(mut self, on: bool) -> Self {
        if let Some(c) = self.coopmat.as_mut() {
            c.raw_units = on;
        }
        self
    }

    /// Set the key splits of decode attention (0: automatic).
    pub fn with_attention_splits(mut self, splits: u32) -> Self {
        self.attention_splits = (splits > 0).then_some(splits);
        self
    }

    /// The same without the f16 prefill path.
    pub fn without_f16_prefill(mut self) -> Self {
        self.f16_prefill = false;
        self
    }

    /// Cap the f16 prefill path's weight slices at `bytes` (0: [`F16_SLICE_BYTES`]).
    pub fn with_f16_slice_bytes(mut self, bytes: u64) -> Self {
        self.f16_slice_bytes = if bytes > 0 { bytes.min(F16_SLICE_BYTES) } else { F16_SLICE_BYTES };
        self
    }
}

impl crate::device::DeviceCaps {
    /// What the backend runs on this device with default settings, for `infr devices`
    /// (derived from the same [`Features`] the kernels are chosen by).
    pub fn kernel_summary(&self) -> Vec<String> {
        let f = Features::of(self, false, false, false, false);
        // Vulkan only: the CPU's cache is host memory already.
        let mut out = vec![
            "every op and weight type of the CPU backend; KV cache f32, f16, q8_0 (layers past the memory budget in host memory, kv.spill_to_host)"
                .to_owned(),
            // Vulkan only as well: the CPU's weights are in host memory already.
            "MoE experts past the expert cache (INFR_CACHE, or the memory budget) in host memory behind device slots filled per step, least recently used out (device.expert_paging)".to_owned(),
            "diffusion canvases sampled on the device".to_owned(),
        ];
        if let Some(c) = f.coopmat {
            // The attention needs subgroups of a multiple of the fragment edge.
            let attention = crate::kernels::attention_coop(64, c.frag, c.subgroup, infr_core::KvDType::F16).is_some();
            let what =
                if attention { "matmuls and attention (f16 and q8_0 caches, causal and canvas)" } else { "matmuls" };
            out.push(format!("cooperative-matrix prefill {what} ({0}x{0} fragments)", c.frag));
        }
        if f.int8 {
            out.push("int8 dot decode matmuls".into());
        }
        if f.subgroups {
            // Vulkan only: the CPU selects sampling candidates from whole rows.
            out.push("top-k / greedy sampling candidates selected on the device".into());
        }
        if f.int8 {
            out.push(
                "fused decode kernels (norm+quantize, norm/add/scale runs, q/k norm+RoPE+KV append, batched matmuls)"
                    .into(),
            );
        } else if f.subgroups {
            out.push("fused norm/add/scale runs, q/k norm+RoPE+KV append".into());
        } else {
            out.push("fused q/k norm+RoPE+KV append".into());
        }
        out
    }
}
