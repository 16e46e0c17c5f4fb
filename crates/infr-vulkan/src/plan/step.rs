//! The step buffer's words: what a plan's kernels read of each step's inputs (tokens,
//! positions, sequences, output rows, page tables, handed-in activations), laid out as
//! [`crate::lower::StepLayout`] says.

use infr_core::StepInputs;

use super::Plan;

impl Plan {
    /// Fill the step buffer's words from the inputs (already validated).
    pub(super) fn step_data(&mut self, inp: &StepInputs<'_>) {
        let l = self.layout;
        let w = &mut self.step_words;
        w.clear();
        w.extend_from_slice(inp.tokens);
        w.extend_from_slice(inp.positions);
        w.extend_from_slice(inp.token_seq);
        w.extend_from_slice(inp.output_rows);
        debug_assert_eq!(w.len() as u32, l.tok_pages);
        let tok_pages_at = w.len();
        w.resize(w.len() + inp.tokens.len(), 0);
        debug_assert_eq!(w.len() as u32, l.tok_state);
        w.extend(inp.token_seq.iter().map(|&s| inp.seqs[s as usize].state_slot));
        debug_assert_eq!(w.len() as u32, l.tok_wpages);
        let tok_wpages_at = w.len();
        w.resize(w.len() + inp.tokens.len(), 0);
        debug_assert_eq!(w.len() as u32, l.hidden);
        w.extend(inp.hidden.iter().map(|v| v.to_bits()));
        debug_assert_eq!(w.len() as u32, l.pages);
        let mut seq_start = Vec::with_capacity(inp.seqs.len());
        let mut at = l.pages;
        for s in inp.seqs {
            seq_start.push(at);
            at += s.pages.len() as u32;
        }
        let mut wseq_start = Vec::with_capacity(inp.seqs.len());
        for s in inp.seqs {
            wseq_start.push(at);
            at += s.window_pages.len() as u32;
        }
        for (t, &s) in inp.token_seq.iter().enumerate() {
            w[tok_pages_at + t] = seq_start[s as usize];
            w[tok_wpages_at + t] = wseq_start[s as usize];
        }
        for s in inp.seqs {
            w.extend_from_slice(s.pages);
        }
        for s in inp.seqs {
            w.extend_from_slice(s.window_pages);
        }
    }
}
