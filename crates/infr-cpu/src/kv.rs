//! The KV cache in host memory: per layer, K and V as `[slots, n_kv_head * head_dim]`, and
//! the recurrent state slots.

use bytemuck::Zeroable;
use half::f16;
use half::slice::HalfFloatSliceExt;
use infr_core::{BackendError, KvDType, KvSpec};
use infr_quant::blocks::BlockQ8_0;
use infr_quant::legacy::quantize_row_q8_0;
use infr_quant::GgmlType;

/// Storage of one cache tensor.
#[derive(Debug)]
pub(crate) enum KvStore {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// `block_q8_0`s (an f16 scale and 32 int8s), as llama.cpp stores `--cache-type-k/v q8_0`;
    /// rows are whole blocks, so element offsets map to block indices.
    Q8_0(Vec<BlockQ8_0>),
}

/// Values per q8_0 block.
const Q8_BLOCK: usize = BlockQ8_0::ELEMS;

impl KvStore {
    fn new(dtype: KvDType, n: usize) -> Result<Self, BackendError> {
        debug_assert!(dtype != KvDType::Q8_0 || n.is_multiple_of(Q8_BLOCK));
        // An allocation the host cannot make is an error, not an abort.
        fn zeroed<T: Clone>(n: usize, zero: T) -> Result<Vec<T>, BackendError> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| BackendError::OutOfMemory {
                device: "CPU".into(),
                what: "KV cache".into(),
                bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
            })?;
            v.resize(n, zero);
            Ok(v)
        }
        match dtype {
            KvDType::F32 => Ok(KvStore::F32(zeroed(n, 0.0)?)),
            KvDType::F16 => Ok(KvStore::F16(zeroed(n, f16::ZERO)?)),
            KvDType::Q8_0 => Ok(KvStore::Q8_0(zeroed(n / Q8_BLOCK, BlockQ8_0::zeroed())?)),
        }
    }

    /// Write `src` at element offset `at`, rounding to the storage type (q8_0: `at` and the
    /// length are whole blocks, as every cache row is).
    pub(crate) fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            KvStore::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            KvStore::F16(v) => v[at..at + src.len()].convert_from_f32_slice(src),
            KvStore::Q8_0(v) => {
                let b = at / Q8_BLOCK;
                quantize_row_q8_0(src, &mut v[b..b + src.len() / Q8_BLOCK]);
            }
        }
    }

    /// Read `dst.len()` elements at `at` as f32.
    pub(crate) fn read(&self, at: usize, dst: &mut [f32]) {
        match self {
            KvStore::F32(v) => dst.copy_from_slice(&v[at..at + dst.len()]),
            KvStore::F16(v) => {
                let n = dst.len();
                v[at..at + n].convert_to_f32_slice(dst);
            }
            KvStore::Q8_0(v) => {
                let b = at / Q8_BLOCK;
                let blocks = bytemuck::cast_slice(&v[b..b + dst.len() / Q8_BLOCK]);
                infr_quant::dequantize(GgmlType::Q8_0, blocks, dst).expect("cache rows are whole q8_0 blocks");
            }
        }
    }

    /// The whole store as f16 values, if it holds f16 (attention reads rows in place).
    pub(crate) fn f16_slice(&self) -> Option<&[f16]> {
        match self {
            KvStore::F16(v) => Some(v),
            _ => None,
        }
    }

    /// Whether values are rounded to f16 (then attention also rounds q and p, like ggml).
    pub(crate) fn is_f16(&self) -> bool {
        matches!(self, KvStore::F16(_))
    }

    /// Whether values are q8_0 blocks (then attention rounds q to q8_0, as the vec_dot of
    /// llama.cpp's flash attention over a q8_0 cache does).
    pub(crate) fn is_q8_0(&self) -> bool {
        matches!(self, KvStore::Q8_0(_))
    }

    fn copy_within(&mut self, src: usize, dst: usize, len: usize) {
        match self {
            KvStore::F32(v) => v.copy_within(src..src + len, dst),
            KvStore::F16(v) => v.copy_within(src..src + len, dst),
            KvStore::Q8_0(v) => v.copy_within(src / Q8_BLOCK..(src + len) / Q8_BLOCK, dst / Q8_BLOCK),
        }
    }
}

/// One layer's K and V.
#[derive(Debug)]
pub(crate) struct KvLayer {
    pub k: KvStore,
    pub v: KvStore,
    pub k_width: usize,
    pub v_width: usize,
    /// In the window pages (a sliding-window layer's ring), not the context pages.
    pub windowed: bool,
}

impl KvLayer {
    /// The page list of `seq` this layer's cache is addressed by.
    pub(crate) fn pages_of<'a>(&self, seq: &infr_core::SeqPages<'a>) -> &'a [u32] {
        if self.windowed {
            seq.window_pages
        } else {
            seq.pages
        }
    }
}

/// The whole cache.
#[derive(Debug)]
pub(crate) struct KvCache {
    pub layers: Vec<KvLayer>,
    /// Recurrent state slots beside the pages.
    pub state: crate::state::StateCache,
    pub page_size: u32,
    pub n_pages: u32,
    pub spec: KvSpec,
}

impl KvCache {
    pub(crate) fn new(spec: &KvSpec) -> Result<Self, BackendError> {
        let layers = spec
            .layers
            .iter()
            .map(|l| {
                let pages = if l.window.is_some() { spec.n_window_pages } else { spec.n_pages };
                let slots = pages as usize * spec.page_size as usize;
                let kw = (l.n_kv_head * l.head_dim_k) as usize;
                let vw = (l.n_kv_head * l.head_dim_v) as usize;
                if spec.dtype == KvDType::Q8_0
                    && (!(l.head_dim_k as usize).is_multiple_of(Q8_BLOCK)
                        || !(l.head_dim_v as usize).is_multiple_of(Q8_BLOCK))
                {
                    return Err(BackendError::Unsupported {
                        backend: "cpu".into(),
                        what: format!(
                            "q8_0 KV cache with head dims {}/{} (not multiples of 32)",
                            l.head_dim_k, l.head_dim_v
                        ),
                    });
                }
                Ok(KvLayer {
                    k: KvStore::new(spec.dtype, slots * kw)?,
                    v: KvStore::new(spec.dtype, slots * vw)?,
                    k_width: kw,
                    v_width: vw,
                    windowed: l.window.is_some(),
                })
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        let state = crate::state::StateCache::new(spec)?;
        Ok(Self { layers, state, page_size: spec.page_size, n_pages: spec.n_pages, spec: spec.clone() })
    }

    /// Copy context pages in every layer that uses them (not the windowed layers' rings).
    pub(crate) fn copy_pages(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        let ps = self.page_size as usize;
        for &(s, d) in pairs {
            if s >= self.n_pages || d >= self.n_pages {
                return Err(BackendError::InvalidInput(format!("page copy {s} -> {d} out of range")));
            }
            for l in self.layers.iter_mut().filter(|l| !l.windowed) {
                l.k.copy_within(s as usize * ps * l.k_width, d as usize * ps * l.k_width, ps * l.k_width);
                l.v.copy_within(s as usize * ps * l.v_width, d as usize * ps * l.v_width, ps * l.v_width);
            }
        }
        Ok(())
    }
}
