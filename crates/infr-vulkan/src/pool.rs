//! Activations, temporaries and attention scratch shared by every plan of a backend. Plans run
//! one at a time (each submission waits on its fence), so one set of buffers as large as the
//! largest plan needs serves them all: device memory grows with the largest step shape, not
//! with the number of shapes planned.

use std::sync::Arc;

use crate::device::Context;
use crate::error::VkResult;
use crate::memory::{Buffer, MemKind};

/// What one plan needs from the pool: activation bytes, attention scratch bytes, and the
/// bytes of each of its temporary buffers (`Res::Temp` indices).
#[derive(Debug, Clone, Default)]
pub(crate) struct PoolNeeds {
    pub act: u64,
    pub scratch: u64,
    pub temps: Vec<u64>,
}

impl PoolNeeds {
    /// Element-wise maxima of two needs.
    fn max(&self, o: &PoolNeeds) -> PoolNeeds {
        let n = self.temps.len().max(o.temps.len());
        let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        PoolNeeds {
            act: self.act.max(o.act),
            scratch: self.scratch.max(o.scratch),
            temps: (0..n).map(|i| at(&self.temps, i).max(at(&o.temps, i))).collect(),
        }
    }
}

/// The shared buffers (see the module doc).
#[derive(Default)]
pub(crate) struct ActPool {
    act: Option<Buffer>,
    scratch: Option<Buffer>,
    temps: Vec<Option<Buffer>>,
    /// What the plans built so far need (element-wise maxima).
    held: PoolNeeds,
    /// Whether a buffer was replaced since [`ActPool::take_changed`] last looked.
    changed: bool,
}

impl ActPool {
    /// Grow to hold `needs` as well as what earlier plans need. On failure (out of memory)
    /// the pool goes back to what the earlier plans need, so that a smaller plan can be
    /// tried; either way [`ActPool::take_changed`] says whether recorded plans must record
    /// again.
    pub fn reserve(&mut self, ctx: &Arc<Context>, needs: &PoolNeeds) -> VkResult<()> {
        let target = self.held.max(needs);
        match self.grow_to(ctx, &target) {
            Ok(()) => {
                self.held = target;
                Ok(())
            }
            Err(e) => {
                // Free what the failed plan grew, then hold the earlier plans' needs again.
                self.act = None;
                self.scratch = None;
                self.temps.clear();
                self.changed = true;
                let held = self.held.clone();
                self.grow_to(ctx, &held)?;
                Err(e)
            }
        }
    }

    fn grow_to(&mut self, ctx: &Arc<Context>, needs: &PoolNeeds) -> VkResult<()> {
        self.changed |= grow(ctx, &mut self.act, needs.act, "activations")?;
        self.changed |= grow(ctx, &mut self.scratch, needs.scratch, "attention scratch")?;
        if self.temps.len() < needs.temps.len() {
            self.temps.resize_with(needs.temps.len(), || None);
        }
        for (slot, &bytes) in self.temps.iter_mut().zip(&needs.temps) {
            self.changed |= grow(ctx, slot, bytes, "temporary buffer")?;
        }
        Ok(())
    }

    /// Whether buffers were replaced since the last call (plans, and their tails, recorded
    /// against the old ones must record again before they run).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    pub fn act(&self) -> Option<&Buffer> {
        self.act.as_ref()
    }

    pub fn scratch(&self) -> Option<&Buffer> {
        self.scratch.as_ref()
    }

    pub fn temp(&self, i: usize) -> Option<&Buffer> {
        self.temps.get(i).and_then(Option::as_ref)
    }
}

/// Make `slot` hold at least `bytes` (the old buffer is freed first: nothing is in flight).
fn grow(ctx: &Arc<Context>, slot: &mut Option<Buffer>, bytes: u64, what: &str) -> VkResult<bool> {
    if slot.as_ref().is_some_and(|b| b.size >= bytes.max(16)) {
        return Ok(false);
    }
    *slot = None;
    *slot = Some(Buffer::new(ctx, bytes, MemKind::DeviceLocal, what)?);
    Ok(true)
}
