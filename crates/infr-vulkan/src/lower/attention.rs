//! Lowering of the attention op: the KV append (alone or fused with q/k norm and RoPE), the
//! cooperative-matrix prefill kernel where it applies, the scalar/split kernel, and the merge of
//! split partials (fused with the int8 quantization of the output where the next matmul wants it).

use std::collections::HashMap;

use infr_core::{AttnParams, Graph, KvSpec, Op, TensorId, WeightId};

use super::{bytes, rope_gpu, threads_groups, u32_of, Features, Res, StepLayout};
use crate::error::{VkError, VkResult};
use crate::fused_kernels;
use crate::fusion::{Fusions, HeadNorm};
use crate::kernels;
use crate::pipeline::KernelSpec;
use crate::prefill_matmul::{Emit, F16Buffers};
use crate::skinny_matmul;
use crate::weights::GpuWeight;

/// One attention node as the lowering sees it.
pub(super) struct AttnNode<'a> {
    pub index: usize,
    pub q: TensorId,
    pub k: TensorId,
    pub v: TensorId,
    pub params: &'a AttnParams,
    pub out: Res,
    pub rows: usize,
    pub cols: usize,
}

/// Plan-wide state the attention lowering adds to: split partials (scratch bytes), the int8
/// copy of its output that the merge writes for the next matmul, and the f16 buffers (where
/// the q / k / v split-K products left their partial planes).
pub(super) struct Side<'a> {
    pub scratch: &'a mut u64,
    pub temp_bytes: &'a mut Vec<u64>,
    pub qact_of: &'a mut HashMap<(u32, u32), u32>,
    pub f16_bufs: &'a mut F16Buffers,
}

fn emit(emits: &mut Vec<Emit>, spec: &KernelSpec, res: Vec<Res>, push: Vec<u8>, groups: u32) {
    emits.push(Emit { spec: spec.clone(), res, push, groups, shape: None });
}

/// Emit the dispatches of one attention node.
#[allow(clippy::too_many_arguments)]
pub(super) fn lower(
    graph: &Graph,
    node: &AttnNode<'_>,
    fx: &Fusions,
    kv: Option<&KvSpec>,
    st: &StepLayout,
    feat: Features,
    weights: &HashMap<WeightId, GpuWeight>,
    side: &mut Side<'_>,
) -> VkResult<Vec<Emit>> {
    let (ap, n_tok, cells) = (node.params, graph.n_tokens, node.rows * node.cols);
    let vec_of = |id: &WeightId, len: usize| -> VkResult<Res> {
        let gw =
            weights.get(id).ok_or_else(|| VkError::Unsupported(format!("attention: weight {} not loaded", id.0)))?;
        if gw.vec_len() != Some(len) {
            return Err(VkError::Unsupported(format!("attention: weight {} is not a vector of {len}", id.0)));
        }
        Ok(Res::WeightVec(*id))
    };
    let mut emits = Vec::new();
    let kv = kv.ok_or_else(|| VkError::Unsupported("attention before init_kv".into()))?;
    let layer = kv.layers.get(ap.kv_layer as usize).ok_or_else(|| {
        VkError::Unsupported(format!("attention reads KV layer {} of {}", ap.kv_layer, kv.layers.len()))
    })?;
    if (layer.n_kv_head, layer.head_dim_k, layer.head_dim_v) != (ap.n_kv_head, ap.head_dim_k, ap.head_dim_v) {
        return Err(VkError::Unsupported(format!("attention shape differs from KV layer {}", ap.kv_layer)));
    }
    if ap.head_dim_k % 2 != 0 || ap.head_dim_v % 2 != 0 {
        return Err(VkError::Unsupported("odd attention head dims".into()));
    }
    let kw = ap.n_kv_head * ap.head_dim_k;
    let vw = ap.n_kv_head * ap.head_dim_v;
    // A windowed layer's cache is addressed through the window page lists.
    let pt_off = if layer.window.is_some() { st.tok_wpages } else { st.tok_pages };
    let kv_write_params = kernels::KvWriteParams {
        kw,
        vw,
        n_tokens: n_tok as u32,
        page_size: kv.page_size,
        pos_off: st.positions,
        pt_off,
    };
    // A q8_0 cache is written a block at a time by its own kernel, after the fused kernel.
    let q8_cache = kv.dtype == infr_core::KvDType::Q8_0;
    if let Some(prep) = fx.attn_prep.get(&node.index) {
        let Op::Rope { params: rp, .. } = &graph.node(prep.q.rope).op else {
            return Err(VkError::Unsupported(format!("node {}: fused attention input is not a RoPE", node.index)));
        };
        let rope = rope_gpu(rp)?;
        let ff = match &rp.freq_factors {
            Some(f) => vec_of(f, rp.n_rot as usize / 2)?,
            None => Res::Dummy,
        };
        let norm = |side: &crate::fusion::RopeSide| -> VkResult<(u32, f32, Res)> {
            Ok(match side.norm {
                None => (0, 0.0, Res::Dummy),
                Some(HeadNorm { weight: None, eps }) => (1, eps, Res::Dummy),
                Some(HeadNorm { weight: Some(w), eps }) => (2, eps, vec_of(&w, ap.head_dim_k as usize)?),
            })
        };
        let (q_norm, q_eps, wq) = norm(&prep.q)?;
        let (k_norm, k_eps, wk) = norm(&prep.k)?;
        let (xq, q_parts, _) = super::norm::read_planes(prep.q.x, side.f16_bufs);
        let (xk, k_parts, _) = super::norm::read_planes(prep.k.x, side.f16_bufs);
        let (xv, v_parts, _) = if q8_cache {
            // The q8_0 cache's own append reads V after this dispatch: sum its planes first.
            if let Some(planes) = side.f16_bufs.take_planes(node.v.0) {
                emits.extend(skinny_matmul::reduce_planes(&planes, Res::Act(node.v.0), n_tok, vw)?);
            }
            (Res::Act(node.v.0), 1, 0)
        } else {
            super::norm::read_planes(prep.v_norm.map_or(node.v, |vn| vn.x), side.f16_bufs)
        };
        if [q_parts, k_parts, v_parts].iter().any(|&p| p > 255) {
            return Err(VkError::Unsupported(format!("node {}: more than 255 partial planes", node.index)));
        }
        let p = fused_kernels::QkRopeParams {
            rope,
            dk: ap.head_dim_k,
            dv: ap.head_dim_v,
            n_head: ap.n_head,
            n_kv_head: ap.n_kv_head,
            n_tokens: n_tok as u32,
            q_norm,
            k_norm,
            q_eps,
            k_eps,
            write_kv: (ap.write_kv && !q8_cache) as u32,
            page_size: kv.page_size,
            pos_off: st.positions,
            pt_off,
            kw,
            vw,
            parts: q_parts | (k_parts << 8) | (v_parts << 16),
            v_norm: prep.v_norm.is_some() as u32,
            v_eps: prep.v_norm.map_or(0.0, |vn| vn.eps),
            q_period: prep.q.slice.map_or(0, |(period, _)| period),
            q_off: prep.q.slice.map_or(0, |(_, off)| off),
        };
        let (kc, vc) =
            if p.write_kv != 0 { (Res::KvK(ap.kv_layer), Res::KvV(ap.kv_layer)) } else { (Res::Dummy, Res::Dummy) };
        let res = vec![xq, Res::Act(prep.q.rope.0), xk, Res::Act(prep.k.rope.0), xv, kc, vc, Res::Step, ff, wq, wk];
        let heads = ap.n_head + ap.n_kv_head * (1 + p.write_kv);
        let groups = u32_of(n_tok * heads as usize, "attention heads")?;
        emit(&mut emits, &fused_kernels::qk_rope(kv.dtype, ap.head_dim_k), res, bytes(&p), groups);
    }
    if ap.write_kv && (q8_cache || !fx.attn_prep.contains_key(&node.index)) {
        let res = vec![Res::Act(node.k.0), Res::Act(node.v.0), Res::KvK(ap.kv_layer), Res::KvV(ap.kv_layer), Res::Step];
        let groups = threads_groups(kernels::kv_write_threads(kv.dtype, n_tok, kw, vw))?;
        emit(&mut emits, &kernels::kv_write(kv.dtype), res, bytes(&kv_write_params), groups);
    }
    // Decode rows (steps too short for the cooperative kernel) over an f16 cache: lane groups,
    // the query heads of a KV head in one workgroup (`attention_decode`), where turned on and
    // the device has the shuffles (off by default: slower than the per-head kernel on an H100).
    let group_heads = kernels::attention_decode_heads(ap.n_head / ap.n_kv_head.max(1));
    let lanes = match kv.dtype {
        infr_core::KvDType::F16
            if feat.lane_attention && feat.min_subgroup >= 4 && ap.n_head % ap.n_kv_head.max(1) == 0 && n_tok < 16 =>
        {
            kernels::attention_decode(ap.head_dim_k, ap.head_dim_v, group_heads, feat.min_subgroup, feat.shared_bytes)
        }
        _ => None,
    };
    let n_split = match lanes {
        Some(_) => kernels::attention_decode_splits(n_tok * (ap.n_head / group_heads) as usize, feat.attention_splits),
        None => kernels::attention_splits(n_tok * ap.n_head as usize, feat.attention_splits),
    };
    let p = kernels::AttnParamsGpu {
        n_head: ap.n_head,
        group: ap.n_head / ap.n_kv_head,
        dk: ap.head_dim_k,
        dv: ap.head_dim_v,
        scale: ap.scale,
        softcap: ap.softcap.unwrap_or(0.0),
        window: kernels::attn_mask_word(ap.window, ap.chunk, ap.bidirectional),
        page_size: kv.page_size,
        kw,
        vw,
        n_tokens: n_tok as u32,
        pos_off: st.positions,
        pt_off,
        // 1: q and probabilities through f16 (llama.cpp's f16 matmuls); 2: q through q8_0,
        // probabilities f32 (its flash attention over a q8_0 cache).
        round_q: match kv.dtype {
            infr_core::KvDType::F16 => 1,
            infr_core::KvDType::Q8_0 => 2,
            infr_core::KvDType::F32 => 0,
        },
        n_split,
        flash_rows: 0,
        has_sinks: ap.sinks.is_some() as u32,
    };
    let sinks = match &ap.sinks {
        Some(s) => vec_of(s, ap.n_head as usize)?,
        None => Res::Dummy,
    };
    let rows = n_tok * ap.n_head as usize;
    // Prefill chunks: the cooperative-matrix kernel takes the rows of blocks of
    // one sequence, the scalar kernel below the rest.
    let coop = match feat.coopmat {
        Some(c) if p.n_split == 1 && n_tok >= 16 && ap.head_dim_k == ap.head_dim_v => {
            kernels::attention_coop(ap.head_dim_k, c.frag, c.subgroup, kv.dtype).map(|s| (s, c.frag))
        }
        _ => None,
    };
    let mut p = p;
    // Both attention kernels bind Q, the layer's K/V, the step, the output, the
    // split partials and the sinks.
    let res = vec![
        Res::Act(node.q.0),
        Res::KvK(ap.kv_layer),
        Res::KvV(ap.kv_layer),
        Res::Step,
        node.out,
        Res::Scratch,
        sinks,
    ];
    // The lane-group kernel takes decode rows only: it does not skip rows the cooperative one did.
    debug_assert!(lanes.is_none() || coop.is_none());
    if let Some((spec, frag)) = coop {
        p.flash_rows = kernels::attn_coop_rows(frag);
        let groups = u32_of(n_tok.div_ceil(p.flash_rows as usize) * ap.n_head as usize, "attention groups")?;
        emit(&mut emits, &spec, res.clone(), bytes(&p), groups);
    }
    // A workgroup per (row, split): rows of (token, head group) for the lane-group kernel, of
    // (token, head) for the per-head one.
    let (spec, work_rows) = match lanes {
        Some(spec) => (spec, n_tok * (ap.n_head / group_heads) as usize),
        None => (kernels::attention(kv.dtype, ap.head_dim_k, ap.head_dim_v, feat.subgroups), rows),
    };
    let groups = u32_of(work_rows * p.n_split as usize, "attention groups")?;
    emit(&mut emits, &spec, res, bytes(&p), groups);
    if p.n_split > 1 {
        *side.scratch = (*side.scratch).max((rows * p.n_split as usize * (ap.head_dim_v as usize + 2) * 4) as u64);
        if let Some(&group) = fx.attn_q8.get(&node.index) {
            let qi = side.temp_bytes.len() as u32;
            side.temp_bytes.push(kernels::qact_bytes(node.rows, node.cols));
            side.qact_of.insert((node.index as u32, group), qi);
            let cp = fused_kernels::AttnCombineQ8Params {
                n_tokens: n_tok as u32,
                n_head: ap.n_head,
                dv: ap.head_dim_v,
                n_split: p.n_split,
                window: p.window,
                pos_off: st.positions,
                group,
                scale_off: (cells / 16) as u32,
            };
            let res = vec![Res::Scratch, node.out, Res::Step, Res::Temp(qi), Res::Temp(qi)];
            let groups = u32_of(n_tok * (node.cols / 4).div_ceil(64), "attention merge groups")?;
            emit(&mut emits, &fused_kernels::attn_combine_q8(), res, bytes(&cp), groups);
            return Ok(emits);
        }
        let cp = kernels::AttnCombineParams {
            n_rows: rows as u32,
            dv: ap.head_dim_v,
            n_split: p.n_split,
            n_head: ap.n_head,
            window: p.window,
            pos_off: st.positions,
        };
        let res = vec![Res::Scratch, node.out, Res::Step];
        emit(&mut emits, &kernels::attention_combine(), res, bytes(&cp), rows as u32);
    }
    Ok(emits)
}
