//! Helpers of the generation loop (the scheduler's; `infr run` and `infr serve` both decode
//! through it).

/// Length of the common prefix of two token lists.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
