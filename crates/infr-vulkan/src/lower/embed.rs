//! Lowering of the embedding ops: a token-row gather from the table (`Op::Embed`) and the
//! embedding mixture of a diffusion canvas (`Op::MixEmbed`: each row a distribution over the
//! vocabulary, split over vocabulary slices and added up by `mix_reduce`), and the
//! activations a pipeline stage hands in (`Op::Input`).

use std::collections::HashMap;

use infr_core::WeightId;

use super::{bytes, one, threads_groups, u32_of, weight_of, Res, StepLayout};
use crate::error::{VkError, VkResult};
use crate::kernels;
use crate::prefill_matmul::Emit;
use crate::weights::GpuWeight;

/// `Op::Input` of node `i`: the handed-in activations copied from the step buffer (where the
/// host wrote their f32 bits) into the node's output, with the column-slice kernel.
pub(super) fn input(graph: &infr_core::Graph, i: usize, st: &StepLayout) -> VkResult<Emit> {
    let node = &graph.nodes[i];
    let (cells, cols) = (node.shape.elements(), u32_of(node.cols(), "columns")?);
    let p = crate::recurrent_kernels::SliceColsParams {
        n: u32_of(cells, "elements")?,
        in_cols: cols,
        out_cols: cols,
        period: cols,
        offset: st.hidden,
        len: cols,
    };
    Ok(Emit {
        spec: crate::recurrent_kernels::slice_cols(),
        res: vec![Res::Step, Res::Act(i as u32)],
        push: bytes(&p),
        groups: threads_groups(cells)?,
        shape: None,
    })
}

/// The table of node `i` with its matrix form.
fn table_of(weights: &HashMap<WeightId, GpuWeight>, i: usize, table: WeightId) -> VkResult<&GpuWeight> {
    let tw = weight_of(weights, i, &table)?;
    if tw.chunks.is_empty() {
        return Err(VkError::Unsupported(format!("node {i}: weight {} has no matrix form", table.0)));
    }
    Ok(tw)
}

/// `Op::Embed` of node `i`: rows of `table` for the step's `n_tok` tokens.
pub(super) fn embed(
    i: usize,
    table: WeightId,
    n_tok: usize,
    st: &StepLayout,
    weights: &HashMap<WeightId, GpuWeight>,
) -> VkResult<Vec<Emit>> {
    let tw = table_of(weights, i, table)?;
    let spec = kernels::embed(&tw.layout);
    let mut emits = Vec::new();
    for (c, ch) in tw.chunks.iter().enumerate() {
        let p = kernels::EmbedParams {
            cols: u32_of(tw.cols, "embedding width")?,
            row0: ch.row0,
            rows: ch.rows,
            soff: ch.soff_words,
            n_tokens: n_tok as u32,
            tok_off: st.tokens,
        };
        let res = vec![Res::WeightChunk(table, c), Res::Step, Res::Act(i as u32), Res::Tables];
        emits.push(one(spec.clone(), res, bytes(&p), threads_groups(n_tok * tw.cols / 4)?));
    }
    Ok(emits)
}

/// `Op::MixEmbed` of node `i` over `n_tok` rows: its dispatches and the table's vocabulary
/// (the width of the step's mixture rows). Adds the slice partials' temporary.
pub(super) fn mix_embed(
    i: usize,
    table: WeightId,
    n_tok: usize,
    weights: &HashMap<WeightId, GpuWeight>,
    temp_bytes: &mut Vec<u64>,
) -> VkResult<(Vec<Emit>, usize)> {
    let tw = table_of(weights, i, table)?;
    let n_vocab = u32_of(tw.rows, "vocabulary")?;
    let spec = kernels::mix_embed(&tw.layout);
    let cols = u32_of(tw.cols, "embedding width")?;
    let tiles = n_tok.div_ceil(kernels::MIX_EMBED_TOKENS);
    let max_slices = tw.chunks.iter().map(|c| kernels::mix_embed_slices(c.rows as usize).0).max();
    let ti = temp_bytes.len() as u32;
    temp_bytes.push((max_slices.unwrap_or(1) * n_tok * tw.cols * 4) as u64);
    let mut emits = Vec::new();
    for (c, ch) in tw.chunks.iter().enumerate() {
        let (slices, slice_rows) = kernels::mix_embed_slices(ch.rows as usize);
        let p = kernels::MixEmbedParams {
            cols,
            row0: ch.row0,
            rows: ch.rows,
            soff: ch.soff_words,
            n_tokens: n_tok as u32,
            n_vocab,
            slice_rows: slice_rows as u32,
        };
        let res = vec![Res::WeightChunk(table, c), Res::Mix, Res::Temp(ti), Res::Tables];
        emits.push(one(spec.clone(), res, bytes(&p), threads_groups(slices * tiles * tw.cols / 4)?));
        let n_words = n_tok * tw.cols / 4;
        let r = kernels::MixReduceParams { n_words: n_words as u32, slices: slices as u32, accumulate: (c > 0) as u32 };
        let res = vec![Res::Temp(ti), Res::Act(i as u32)];
        emits.push(one(kernels::mix_reduce(), res, bytes(&r), threads_groups(n_words)?));
    }
    Ok((emits, tw.rows))
}
