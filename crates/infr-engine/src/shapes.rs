//! The fixed set of step shapes plans are built for (bounded plans: a server that sees any
//! number of prompt lengths holds the same plans, all built at start).
//!
//! A step's rows are cut into pieces whose token counts are on a ladder: every count up to
//! `small` (decode steps of up to `n_seq` sequences run whole), then powers of two and the
//! ubatch. A small piece computes logits for all its rows; a larger one for a power-of-two
//! number of rows (its real output rows, padded by repeating one), so the output counts are on
//! a ladder too. A prompt chunk of 300 tokens runs as 256 + 32 + 8 + 4.

/// The step-shape ladder of a runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeLadder {
    /// Token counts, ascending (always starting at 1).
    tokens: Vec<usize>,
    /// Pieces of at most this many tokens compute every row's logits.
    small: usize,
    /// Largest power-of-two output count a large piece needs (sequences per step).
    max_outputs: usize,
}

impl ShapeLadder {
    /// The ladder for steps of at most `ubatch` tokens over at most `n_seq` sequences.
    pub fn new(ubatch: usize, n_seq: usize) -> Self {
        let ubatch = ubatch.max(1);
        let small = n_seq.max(8).min(ubatch);
        let mut tokens: Vec<usize> = (1..=small).collect();
        let mut p = 16;
        while p < ubatch {
            if p > small {
                tokens.push(p);
            }
            p *= 2;
        }
        if ubatch > small {
            tokens.push(ubatch);
        }
        Self { tokens, small, max_outputs: n_seq.max(1).next_power_of_two() }
    }

    /// Tokens of the next piece of a step with `remaining` rows left.
    pub fn piece(&self, remaining: usize) -> usize {
        self.tokens.iter().copied().take_while(|&t| t <= remaining).last().unwrap_or(1)
    }

    /// Output rows of a piece of `tokens` rows of which `real` are outputs.
    pub fn outputs(&self, tokens: usize, real: usize) -> usize {
        if tokens <= self.small {
            tokens
        } else {
            real.max(1).next_power_of_two().min(tokens)
        }
    }

    /// Every `(tokens, outputs)` shape a serving step can take (a piece with more outputs than
    /// sequences, as a whole-prompt logits request makes, is built when first needed).
    pub fn serving_shapes(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for &t in &self.tokens {
            if t <= self.small {
                out.push((t, t));
                continue;
            }
            let mut o = 1;
            while o <= self.max_outputs.min(t) {
                out.push((t, o));
                o *= 2;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_and_pieces() {
        let l = ShapeLadder::new(512, 4);
        assert_eq!(l.tokens, vec![1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512]);
        let mut left = 300;
        let mut pieces = Vec::new();
        while left > 0 {
            let p = l.piece(left);
            pieces.push(p);
            left -= p;
        }
        assert_eq!(pieces, vec![256, 32, 8, 4]);
        assert_eq!(l.outputs(5, 1), 5);
        assert_eq!(l.outputs(256, 0), 1);
        assert_eq!(l.outputs(256, 3), 4);
        assert_eq!(l.outputs(32, 32), 32);
        assert_eq!(l.serving_shapes().len(), 8 + 6 * 3);
        // A ubatch that is not a power of two is on the ladder; tiny ones are all small.
        assert_eq!(ShapeLadder::new(300, 2).piece(1000), 300);
        assert_eq!(ShapeLadder::new(4, 16).tokens, vec![1, 2, 3, 4]);
    }
}
