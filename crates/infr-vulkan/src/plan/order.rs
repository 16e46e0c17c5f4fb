//! Where a plan needs its barriers. A full barrier after every dispatch drains the GPU between
//! two kernels that could run side by side (the Q, K and V projections of a decode step; a
//! dense branch beside a routed one). Each dispatch instead gets a level: one more than the
//! highest level of any earlier dispatch it conflicts with (reads what it writes, writes what
//! it reads or writes, on overlapping byte ranges). Dispatches are recorded level by level, in
//! their original order within a level, with one barrier between levels. This is the fewest
//! full barriers that keep every read-after-write, write-after-read and write-after-write
//! order of the original sequence (the same hazards `ggml_vk_sync_buffers` in llama.cpp's
//! Vulkan backend looks for, which it only checks between neighbours). Steps of many tokens
//! keep their order and only drop the barriers between independent neighbours
//! ([`in_order_levels`]).

use std::collections::HashMap;
use std::hash::Hash;

use ash::vk;
use infr_core::Graph;

use crate::lower::{Dispatch, Res};

/// Most tokens of a step whose dispatches [`levels`] regroups (decode and batched decode: many
/// short dispatches, bound by latency); larger steps keep their order
/// ([`in_order_levels`]). H100, tg128 against one barrier after every dispatch: Gemma 4 E4B
/// 150.7 → 165.7 t/s, 26B-A4B 163 → 192, 31B 60.5 → 66.7, Qwen3-8B 209.3 → 214.5.
pub(crate) const REGROUP_MAX_TOKENS: usize = 64;

/// One storage binding of a dispatch: a byte range of a buffer (a `vk::Buffer` when
/// recording; a symbolic resource when placing activations before any buffer exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access<B = vk::Buffer> {
    pub buffer: B,
    pub start: u64,
    pub end: u64,
    pub write: bool,
}

impl<B: PartialEq> Access<B> {
    /// The range `offset..offset + range` of `buffer`.
    pub fn new(buffer: B, offset: u64, range: u64, write: bool) -> Self {
        Self { buffer, start: offset, end: offset.saturating_add(range), write }
    }

    /// Whether the two must stay in order: one writes bytes the other touches.
    fn conflicts(&self, other: &Self) -> bool {
        self.buffer == other.buffer && (self.write || other.write) && self.start < other.end && other.start < self.end
    }
}

/// The level of each dispatch, given each one's accesses in the original order.
pub(crate) fn levels<B: Copy + Eq + Hash>(dispatches: &[Vec<Access<B>>]) -> Vec<u32> {
    // Per buffer: every earlier access with the level of its dispatch.
    let mut seen: HashMap<B, Vec<(Access<B>, u32)>> = HashMap::new();
    let mut out = Vec::with_capacity(dispatches.len());
    for accesses in dispatches {
        let mut level = 0u32;
        for a in accesses {
            let Some(prev) = seen.get(&a.buffer) else { continue };
            for (p, l) in prev {
                if a.conflicts(p) {
                    level = level.max(l + 1);
                }
            }
        }
        for a in accesses {
            seen.entry(a.buffer).or_default().push((*a, level));
        }
        out.push(level);
    }
    out
}

/// Levels that keep the original order: a dispatch joins the level of the one before it
/// unless it conflicts with a dispatch of that level. Prefill plans use these: their
/// dispatches fill the GPU on their own, and the order of the f16 products and the next
/// weight's dequantization beside each (`prefill_matmul`) was tuned as recorded (Qwen3-8B
/// pp512 on an H100: 10,489 t/s in order, 8,592 with the dispatches regrouped by [`levels`]).
pub(crate) fn in_order_levels<B: Copy + Eq + Hash>(dispatches: &[Vec<Access<B>>]) -> Vec<u32> {
    let mut level = 0u32;
    let mut current: Vec<Access<B>> = Vec::new();
    let mut out = Vec::with_capacity(dispatches.len());
    for accesses in dispatches {
        let conflicts = accesses.iter().any(|a| current.iter().any(|c| a.conflicts(c)));
        if conflicts {
            level += 1;
            current.clear();
        }
        current.extend_from_slice(accesses);
        out.push(level);
    }
    out
}

/// What each dispatch reads and writes, by symbolic resource (a node's output, a temporary,
/// a KV layer…).
fn symbolic_accesses(dispatches: &[Dispatch]) -> Vec<Vec<Access<Res>>> {
    dispatches.iter().map(|x| x.accessed().map(|(_, r, write)| Access::new(r, 0, 1, write)).collect()).collect()
}

/// Byte offsets of every node's output in one activation buffer, and its size in bytes.
///
/// A node's output is live from its first dispatch to its last reader, both in the
/// original dispatch order (which the recorded order keeps for every pair of conflicting
/// accesses) and in [`levels`] (over the dispatches with each output as its own resource).
/// Two outputs share bytes (first fit) only when neither span meets the other's: sharing
/// between outputs whose dispatches could run side by side would add an order the data does
/// not need, and a barrier with it. The last node (the plan's output, copied back after the
/// dispatches) stays live to the end.
pub(crate) fn place_activations(graph: &Graph, dispatches: &[Dispatch], align: u64) -> (Vec<u64>, u64) {
    let accesses = symbolic_accesses(dispatches);
    let levels = levels(&accesses);
    let n = graph.nodes.len();
    // Per node: (first, last) dispatch index and (first, last) level touching its output.
    let mut seq = vec![(usize::MAX, 0usize); n];
    let mut lvl = vec![(u32::MAX, 0u32); n];
    for (d, (acc, &l)) in accesses.iter().zip(&levels).enumerate() {
        for a in acc {
            if let Res::Act(i) = a.buffer {
                let (s, v) = (&mut seq[i as usize], &mut lvl[i as usize]);
                *s = (s.0.min(d), s.1.max(d));
                *v = (v.0.min(l), v.1.max(l));
            }
        }
    }
    if let (Some(s), Some(v)) = (seq.last_mut(), lvl.last_mut()) {
        (s.1, v.1) = (usize::MAX, u32::MAX);
    }
    let meets = |a: usize, b: usize| {
        let (sa, sb, la, lb) = (seq[a], seq[b], lvl[a], lvl[b]);
        (sa.0 <= sb.1 && sb.0 <= sa.1) || (la.0 <= lb.1 && lb.0 <= la.1)
    };
    let mut nodes: Vec<usize> = (0..n).filter(|&i| seq[i].0 != usize::MAX).collect();
    nodes.sort_by_key(|&i| (seq[i].0, i));
    let mut placed: Vec<(u64, u64, usize)> = Vec::new(); // (offset, size, node)
    let mut offsets = vec![0u64; n];
    let mut high = 0u64;
    for i in nodes {
        let size = graph.nodes[i].bytes().max(16).next_multiple_of(align);
        let mut taken: Vec<(u64, u64)> = placed.iter().filter(|p| meets(p.2, i)).map(|p| (p.0, p.1)).collect();
        taken.sort_unstable();
        let mut at = 0u64;
        for (o, s) in taken {
            if o >= at + size {
                break;
            }
            at = at.max((o + s).next_multiple_of(align));
        }
        offsets[i] = at;
        high = high.max(at + size);
        placed.push((at, size, i));
    }
    (offsets, high)
}

/// The recording order for `levels`: dispatch indices level by level, stable within a level.
pub(crate) fn order(levels: &[u32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..levels.len()).collect();
    idx.sort_by_key(|&i| levels[i]);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk::Handle;

    fn buf(n: u64) -> vk::Buffer {
        vk::Buffer::from_raw(n)
    }

    fn r(b: u64, start: u64, end: u64) -> Access {
        Access::new(buf(b), start, end - start, false)
    }

    fn w(b: u64, start: u64, end: u64) -> Access {
        Access::new(buf(b), start, end - start, true)
    }

    /// Three projections of one normed input share a level; what reads all three waits.
    #[test]
    fn independent_readers_of_one_input_share_a_level() {
        let d = vec![
            vec![r(1, 0, 64), w(1, 64, 128)],                  // norm
            vec![r(1, 64, 128), r(9, 0, 10), w(1, 128, 192)],  // q
            vec![r(1, 64, 128), r(9, 10, 20), w(1, 192, 256)], // k
            vec![r(1, 64, 128), r(9, 20, 30), w(1, 256, 320)], // v
            vec![r(1, 128, 320), w(2, 0, 100)],                // attention
        ];
        let l = levels(&d);
        assert_eq!(l, vec![0, 1, 1, 1, 2]);
        assert_eq!(order(&l), vec![0, 1, 2, 3, 4]);
    }

    /// A later write to a range an earlier dispatch reads (buffer reuse) waits for the read,
    /// and a write after a write of the same range waits too.
    #[test]
    fn write_after_read_and_write_after_write_wait() {
        let d = vec![
            vec![w(1, 0, 64)],
            vec![r(1, 0, 64), w(1, 64, 128)],
            vec![w(1, 32, 48)],   // overwrites what dispatch 1 reads
            vec![w(1, 100, 110)], // overwrites what dispatch 1 writes
            vec![w(1, 200, 300)], // touches nothing earlier
        ];
        assert_eq!(levels(&d), vec![0, 1, 2, 2, 0]);
        assert_eq!(order(&levels(&d)), vec![0, 4, 1, 2, 3]);
    }

    /// Touching ranges do not overlap; reads never conflict with reads.
    #[test]
    fn adjacent_ranges_and_shared_reads_do_not_conflict() {
        let d = vec![vec![w(1, 0, 64)], vec![w(1, 64, 128)], vec![r(2, 0, 8)], vec![r(2, 0, 8)], vec![w(3, 0, 8)]];
        assert_eq!(levels(&d), vec![0, 0, 0, 0, 0]);
        let d = vec![vec![w(1, 0, 64)], vec![r(1, 63, 64)]];
        assert_eq!(levels(&d), vec![0, 1]);
    }

    /// In order, a dispatch shares the level before it only where it conflicts with nothing
    /// there; it never moves ahead of a conflicting dispatch's level.
    #[test]
    fn in_order_levels_keep_the_order() {
        let d = vec![
            vec![w(1, 0, 64)],
            vec![r(1, 0, 64), w(1, 64, 128)],
            vec![w(2, 0, 8)],    // independent: joins level 1
            vec![r(1, 64, 128)], // reads level 1's write
            vec![w(3, 0, 8)],    // independent, but stays after the barrier
        ];
        assert_eq!(in_order_levels(&d), vec![0, 1, 1, 2, 2]);
        assert_eq!(levels(&d), vec![0, 1, 0, 2, 0]);
    }

    /// A chain stays a chain: the level of each dispatch is its depth.
    #[test]
    fn a_chain_gets_one_level_per_dispatch() {
        let d: Vec<_> = (0..5u64).map(|i| vec![r(1, i * 8, i * 8 + 8), w(1, i * 8 + 8, i * 8 + 16)]).collect();
        assert_eq!(levels(&d), vec![0, 1, 2, 3, 4]);
    }
}
