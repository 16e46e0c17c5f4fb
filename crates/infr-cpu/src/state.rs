//! Recurrent state in host memory: per state layer, `n_slots` fixed blocks of f32.

use infr_core::{BackendError, KvSpec};

/// Every state layer's slots.
#[derive(Debug, Default)]
pub(crate) struct StateCache {
    /// Per layer: `n_slots * floats` values, slot-major.
    pub layers: Vec<Vec<f32>>,
    pub floats: Vec<usize>,
    pub n_slots: usize,
}

impl StateCache {
    pub(crate) fn new(spec: &KvSpec) -> Result<Self, BackendError> {
        let n_slots = spec.n_state_slots as usize;
        let mut layers = Vec::with_capacity(spec.states.len());
        for l in &spec.states {
            let n = (l.floats as usize).saturating_mul(n_slots);
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| BackendError::OutOfMemory {
                device: "CPU".into(),
                what: "recurrent state".into(),
                bytes: n as u64 * 4,
            })?;
            v.resize(n, 0.0);
            layers.push(v);
        }
        Ok(Self { layers, floats: spec.states.iter().map(|l| l.floats as usize).collect(), n_slots })
    }

    /// The slot `slot` of state layer `layer`.
    pub(crate) fn slot_mut(&mut self, layer: u32, slot: u32) -> Result<&mut [f32], BackendError> {
        let l = layer as usize;
        let (Some(data), Some(&n)) = (self.layers.get_mut(l), self.floats.get(l)) else {
            return Err(BackendError::InvalidInput(format!("no recurrent state layer {layer}")));
        };
        if slot as usize >= self.n_slots {
            return Err(BackendError::InvalidInput(format!("state slot {slot} beyond {}", self.n_slots)));
        }
        Ok(&mut data[slot as usize * n..(slot as usize + 1) * n])
    }

    /// Copy slots `src → dst` in every layer.
    pub(crate) fn copy_slots(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        for &(s, d) in pairs {
            if s as usize >= self.n_slots || d as usize >= self.n_slots {
                return Err(BackendError::InvalidInput(format!("state copy {s} -> {d} out of range")));
            }
            for (data, &n) in self.layers.iter_mut().zip(&self.floats) {
                data.copy_within(s as usize * n..(s as usize + 1) * n, d as usize * n);
            }
        }
        Ok(())
    }
}
