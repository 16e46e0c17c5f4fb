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

/// The shared buffers (see the module doc).
#[derive(Default)]
pub(crate) struct ActPool {
    act: Option<Buffer>,
    scratch: Option<Buffer>,
    temps: Vec<Option<Buffer>>,
}

impl ActPool {
    /// Grow to hold `needs`. True when a buffer was replaced or added: plans (and their
    /// tails) recorded against the old ones must record again before they run.
    pub fn reserve(&mut self, ctx: &Arc<Context>, needs: &PoolNeeds) -> VkResult<bool> {
        let mut grew = grow(ctx, &mut self.act, needs.act, "activations")?;
        grew |= grow(ctx, &mut self.scratch, needs.scratch, "attention scratch")?;
        if self.temps.len() < needs.temps.len() {
            self.temps.resize_with(needs.temps.len(), || None);
        }
        for (slot, &bytes) in self.temps.iter_mut().zip(&needs.temps) {
            grew |= grow(ctx, slot, bytes, "temporary buffer")?;
        }
        Ok(grew)
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
