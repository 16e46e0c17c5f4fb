//! Lowering of the mixture-of-experts op: routing on the device, the chosen experts' gated
//! FFNs over (token, slot) pairs reading their rows of the 3-D expert tensors in place, the
//! shared expert, and the weighted sum. The routed buffers are plan temporaries shared by
//! every MoE node of a plan (the nodes run one after another). Which kernel the expert
//! matmuls take, and their dispatches on it: `moe_path.rs`; their rounded operands:
//! `moe/inputs.rs`.

use std::collections::HashMap;

use infr_core::{ExpertGateUp, MoeGating, MoeParams, SharedExpert, TensorId, WeightId};

use super::moe_path::{ExpertDispatch, ExpertPath, SlotWeights, WeightBuf};
use super::{bytes, u32_of, Features, Res};
use crate::error::{VkError, VkResult};
use crate::expert_cache as ec;
use crate::fusion::Q8Info;
use crate::kernels;
use crate::moe_kernels::{self as mk, MOE_MAX_USED, MOE_TILE_C};
use crate::pipeline::KernelSpec;
use crate::prefill_matmul::{grow_temp, Emit, F16Buffers, RoundedCopy};
use crate::weights::GpuWeight;

mod inputs;

/// The plan temporaries (`Res::Temp` indices) of the MoE nodes.
#[derive(Debug, Clone, Copy)]
pub(super) struct MoeTemps {
    /// Expert ids then weight bits of every (token, slot) pair.
    pub(super) route: u32,
    /// Gate and up outputs side by side.
    gu: u32,
    /// The gated activation, and its copy rounded for the down projection.
    h: u32,
    hr: u32,
    /// Routed experts' down outputs (weighted), and the shared expert's.
    y: u32,
    sy: u32,
    /// The tiled expert matmuls' work list (`moe_tiles.wgsl`).
    pub(super) tiles: u32,
    /// The input in f16, rounded for the gate/up weights (cooperative batches).
    x16: u32,
    /// Int8 copies of the input and of the gated activation (integer-dot decode).
    qx: u32,
    qh: u32,
    /// The expert copies a paged layer's step needs (`expert_cache`).
    jobs: u32,
    /// Each routed pair's input times its weight, and that rounded for the float expert
    /// matmuls (mixtures that weight the input).
    xp: u32,
    xpr: u32,
}

impl MoeTemps {
    fn new(temp_bytes: &mut Vec<u64>) -> Self {
        let mut next = || {
            temp_bytes.push(16);
            temp_bytes.len() as u32 - 1
        };
        Self {
            route: next(),
            gu: next(),
            h: next(),
            hr: next(),
            y: next(),
            sy: next(),
            tiles: next(),
            x16: next(),
            qx: next(),
            qh: next(),
            jobs: next(),
            xp: next(),
            xpr: next(),
        }
    }
}

/// One MoE node as the lowering sees it.
pub(super) struct MoeNode<'a> {
    /// The node's index in the graph.
    pub index: u32,
    pub x: TensorId,
    pub logits: TensorId,
    pub p: &'a MoeParams,
    pub n_tokens: usize,
    pub cols: usize,
    pub out_cols: usize,
    pub out: Res,
}

/// Why the Vulkan lowering cannot run this MoE op, if it cannot (checked up front).
pub(super) fn unsupported(p: &MoeParams) -> Option<String> {
    // Pairs outside a slice run local expert 0 with weight 0: with the weight applied to the
    // input, biases would leave something behind.
    let biased = p.gate_up_bias.is_some() || p.down_bias.is_some();
    if p.expert_slice.is_some() && p.weight_before && biased {
        return Some("a slice of biased experts weighted before their FFN".into());
    }
    (p.n_used > MOE_MAX_USED).then(|| format!("mixture-of-experts with {} experts per token", p.n_used))
}

/// What the lowering of a MoE node shares with the rest of the plan.
pub(super) struct Side<'a> {
    /// The MoE temporaries (made by the plan's first MoE node, shared by the others).
    pub temps: &'a mut Option<MoeTemps>,
    pub temp_bytes: &'a mut Vec<u64>,
    pub rounded: &'a mut RoundedCopy,
    /// Int8 copies of activations made by earlier dispatches ((node, group) → temp): a
    /// norm before the experts quantizes its output once for them (`norm_q8`).
    pub qact_of: &'a HashMap<(u32, u32), u32>,
    /// Where the node's reader adds up its routed rows ([`routed_planes`]): the register of
    /// deferred planes, which then replaces the `moe_combine` dispatch.
    pub planes: Option<&'a mut F16Buffers>,
}

/// The expert weights of `p` (gate/up first, down last).
fn expert_weights(p: &MoeParams) -> Vec<WeightId> {
    match p.gate_up {
        ExpertGateUp::Separate { gate, up } => vec![gate, up, p.down],
        ExpertGateUp::Fused(gu) => vec![gu, p.down],
    }
}

/// Every tensor of `p` indexed by expert: the expert weights, then their biases.
fn expert_tensors(p: &MoeParams) -> Vec<WeightId> {
    let biases = match p.gate_up_bias {
        Some(ExpertGateUp::Separate { gate, up }) => vec![gate, up],
        Some(ExpertGateUp::Fused(gu)) => vec![gu],
        None => Vec::new(),
    };
    expert_weights(p).into_iter().chain(biases).chain(p.down_bias).collect()
}

/// How a MoE node of `n` tokens over `cols` inputs reads int8 activations, if its expert
/// matmuls take the integer-dot kernel (the fusion pass lets a norm before it quantize).
pub(super) fn int8_input(
    p: &MoeParams,
    n: usize,
    cols: usize,
    feat: Features,
    weights: &HashMap<WeightId, GpuWeight>,
) -> Option<Q8Info> {
    let ws = expert_weights(p).iter().map(|id| weights.get(id)).collect::<Option<Vec<_>>>()?;
    match ExpertPath::choose(p, n, cols, feat, &ws) {
        ExpertPath::Int8 { gx, .. } => {
            Some(Q8Info { group: gx, ty: ws[0].layout.ty, k: cols, single_chunk: ws[0].chunks.len() == 1 })
        }
        _ => None,
    }
}

/// Whether the reader of a MoE node of `n` tokens may add up its expert rows itself: one token
/// on the integer-dot path (its `k` weighted routed rows are consecutive, planes of the
/// output's width, and a shared expert's row, scaled by its gate, follows them).
pub(super) fn routed_planes(
    p: &MoeParams,
    n: usize,
    cols: usize,
    feat: Features,
    weights: &HashMap<WeightId, GpuWeight>,
) -> bool {
    n == 1 && int8_input(p, n, cols, feat, weights).is_some()
}

/// Emit the dispatches of one MoE node: routing, the routed experts, the shared expert,
/// the weighted sum (each stage a method of [`MoeLowering`]).
pub(super) fn lower(
    m: &MoeNode<'_>,
    weights: &HashMap<WeightId, GpuWeight>,
    feat: Features,
    side: Side<'_>,
) -> VkResult<Vec<Emit>> {
    let Side { temps, temp_bytes, rounded, qact_of, planes } = side;
    let p = m.p;
    if let Some(why) = unsupported(p) {
        return Err(VkError::Unsupported(why));
    }
    let mut l = MoeLowering {
        m,
        p,
        weights,
        feat,
        t: *temps.get_or_insert_with(|| MoeTemps::new(temp_bytes)),
        path: ExpertPath::PerPair,
        paged: false,
        max_tiles: 0,
        pairs: m.n_tokens * p.n_used as usize,
        slot: None,
        x16_mode: None,
        pairs_scaled: false,
        xpr_mode: None,
        temp_bytes,
        rounded,
        emits: Vec::new(),
    };
    let experts = expert_weights(p).iter().map(|id| l.one_chunk(id)).collect::<VkResult<Vec<_>>>()?;
    l.path = ExpertPath::choose(p, m.n_tokens, m.cols, feat, &experts);
    l.paged = l.pages_fit()?;
    // A one-token step whose reader adds up the rows runs the shared expert as each token's
    // last pair, where it reads like the routed experts.
    if let (Some(sh), true) = (&p.shared, planes.is_some()) {
        l.slot = l.shared_slot(sh)?;
        if l.slot.is_some() {
            l.pairs = m.n_tokens * (p.n_used as usize + 1);
        }
    }
    let (n, ff, out, pairs) = (m.n_tokens, p.n_ff as usize, m.out_cols, l.pairs);
    let fs = match &p.shared {
        Some(s) => l.weight(&s.gate)?.rows,
        None => 0,
    };
    l.grow(l.t.route, 2 * pairs);
    l.grow(l.t.gu, (pairs * 2 * ff).max(n * 2 * fs));
    l.grow(l.t.h, (pairs * ff).max(n * fs));
    l.grow(l.t.hr, (pairs * ff).max(n * fs));
    l.grow(l.t.y, (pairs + n) * out);
    l.grow(l.t.sy, n * out);
    l.route()?;
    l.routed_experts(qact_of)?;
    // The reader adds up the routed rows (and the shared expert's, written after them) where
    // the plan lets it and this step's path makes them planes; else they are summed here.
    let as_planes = planes.is_some() && matches!(l.path, ExpertPath::Int8 { .. }) && n == 1;
    let shared = match &p.shared {
        Some(sh) if l.slot.is_none() => l.shared_expert(sh, fs, as_planes)?,
        _ => (Res::Dummy, Res::Dummy),
    };
    match planes {
        Some(bufs) if as_planes => {
            let rows = p.n_used + p.shared.is_some() as u32;
            bufs.defer(m.index, Res::Temp(l.t.y), rows, u32_of(out, "output columns")?);
        }
        _ => l.combine(shared)?,
    }
    Ok(l.emits)
}

/// The shared expert run as one more pair of each token: its weights' buffers and scale-plane
/// offsets, and its gate vector (the pair's weight is 1 without one).
#[derive(Debug, Clone, Copy)]
struct SharedSlot {
    gate: WeightBuf,
    up: WeightBuf,
    down: WeightBuf,
    gated: Option<WeightId>,
}

/// The state of lowering one MoE node: what every stage reads, and the dispatches so far.
struct MoeLowering<'a, 'b> {
    m: &'a MoeNode<'a>,
    p: &'a MoeParams,
    weights: &'a HashMap<WeightId, GpuWeight>,
    feat: Features,
    t: MoeTemps,
    path: ExpertPath,
    /// Whether the expert matmuls read the expert cache's slots (every expert tensor is
    /// paged and the step routes no more pairs than there are slots).
    paged: bool,
    /// Upper bound of the tiled paths' work list (set by `route`).
    max_tiles: u32,
    /// Routed (token, slot) pairs (with the shared expert's slot where `slot` is set).
    pairs: usize,
    /// The shared expert as each token's last pair, where it runs so.
    slot: Option<SharedSlot>,
    /// The rounding `x16` holds the input in, once a cooperative matmul asked for it.
    x16_mode: Option<u32>,
    /// Whether `xp` holds the weighted pair inputs, and the rounding `xpr` holds them in.
    pairs_scaled: bool,
    xpr_mode: Option<u32>,
    temp_bytes: &'b mut Vec<u64>,
    rounded: &'b mut RoundedCopy,
    emits: Vec<Emit>,
}

impl<'a> MoeLowering<'a, '_> {
    fn weight(&self, id: &WeightId) -> VkResult<&'a GpuWeight> {
        self.weights.get(id).ok_or_else(|| VkError::Unsupported(format!("moe: weight {} not loaded", id.0)))
    }

    /// A weight the expert kernels read as one buffer.
    fn one_chunk(&self, id: &WeightId) -> VkResult<&'a GpuWeight> {
        let gw = self.weight(id)?;
        if gw.chunks.len() != 1 {
            return Err(VkError::Unsupported(format!("moe: weight {} spans {} buffers", id.0, gw.chunks.len())));
        }
        Ok(gw)
    }

    /// Whether this step's expert matmuls can read the expert cache: every expert tensor
    /// has slots (the same number, for this node's experts) and the step routes no more
    /// pairs than that, so each routed expert finds one.
    fn pages_fit(&self) -> VkResult<bool> {
        let mut slots = None;
        for id in expert_tensors(self.p) {
            let Some(pe) = self.one_chunk(&id)?.paged.as_ref() else { return Ok(false) };
            if pe.n_expert != self.p.held_experts().1 || slots.is_some_and(|s| s != pe.slots) {
                return Ok(false);
            }
            slots = Some(pe.slots);
        }
        Ok(slots.is_some_and(|s| self.pairs <= s as usize))
    }

    /// The shared expert `sh` as each token's last pair, where a one-token step on the
    /// integer-dot path can: routed gate and up of one type in one dispatch, the shared
    /// expert's weights of the routed ones' types and shapes, no biases, every expert held,
    /// not paged, routed by rank.
    fn shared_slot(&self, sh: &SharedExpert) -> VkResult<Option<SharedSlot>> {
        let p = self.p;
        let ExpertGateUp::Separate { gate, up } = p.gate_up else { return Ok(None) };
        let fits = self.m.n_tokens == 1
            && matches!(self.path, ExpertPath::Int8 { .. })
            && !self.paged
            && mk::moe_shared_slot_enabled()
            && p.n_expert <= mk::MOE_ROUTE_RANK_MAX_EXPERTS
            && p.held_experts() == (0, p.n_expert)
            && p.gate_up_bias.is_none()
            && p.down_bias.is_none();
        if !fits {
            return Ok(None);
        }
        let (cols, ff, out) = (self.m.cols, p.n_ff as usize, self.m.out_cols);
        // (shared weight, routed weight, rows, columns)
        let pairs = [(sh.gate, gate, ff, cols), (sh.up, up, ff, cols), (sh.down, p.down, out, ff)];
        for (s, r, rows, k) in pairs {
            let (sw, rw) = (self.one_chunk(&s)?, self.one_chunk(&r)?);
            if sw.layout != rw.layout || sw.rows != rows || sw.cols != k || rw.cols != k {
                return Ok(None);
            }
        }
        if let Some(g) = sh.gate_inp {
            self.vec_of(&g, cols)?;
        }
        Ok(Some(SharedSlot {
            gate: self.expert_buf(&sh.gate)?,
            up: self.expert_buf(&sh.up)?,
            down: self.expert_buf(&sh.down)?,
            gated: sh.gate_inp,
        }))
    }

    /// The buffer the expert kernels read tensor `id` from, and its scale-plane offset (a
    /// weight without expert-cache slots, as the shared expert's: its own buffer).
    fn expert_buf(&self, id: &WeightId) -> VkResult<WeightBuf> {
        let gw = self.one_chunk(id)?;
        Ok(match (&gw.paged, self.paged) {
            (Some(pe), true) => (Res::ExpertSlots(*id), pe.soff_words),
            _ => (Res::WeightChunk(*id, 0), gw.chunks[0].soff_words),
        })
    }

    /// Slots for the step's routed experts (the first tensor's table decides for all), the
    /// copies of the missing ones into every tensor's slots, routed ids rewritten to slots.
    fn fetch_experts(&mut self) -> VkResult<()> {
        let tensors = expert_tensors(self.p);
        let slots = self.one_chunk(&tensors[0])?.paged.as_ref().map_or(0, |pe| pe.slots);
        self.grow(self.t.jobs, ec::jobs_words(slots));
        let cp = ec::MoeCacheParams {
            n_pairs: u32_of(self.pairs, "routed pairs")?,
            n_expert: self.p.held_experts().1,
            slots,
            pad: 0,
        };
        let res = vec![Res::Temp(self.t.route), Res::ExpertTable(tensors[0]), Res::Temp(self.t.jobs)];
        self.emit(ec::moe_cache(), res, bytes(&cp), 1, None);
        let copies = slots.min(cp.n_pairs);
        for id in &tensors {
            let gw = self.one_chunk(id)?;
            let Some(pe) = gw.paged.as_ref() else { continue };
            let fp = ec::MoeFetchParams::of(pe, gw.chunks[0].soff_words);
            let groups = copies
                .checked_mul(fp.pieces)
                .ok_or_else(|| VkError::Unsupported(format!("moe: expert copies of {}", id.0)))?;
            let res = vec![Res::WeightChunk(*id, 0), Res::ExpertSlots(*id), Res::Temp(self.t.jobs)];
            let shape = Some(format!("expert copies {}", id.0));
            self.emits.push(Emit { spec: ec::moe_fetch(), res, push: bytes(&fp), groups, shape });
        }
        Ok(())
    }

    fn vec_of(&self, id: &WeightId, len: usize) -> VkResult<Res> {
        if self.weight(id)?.vec_len() != Some(len) {
            return Err(VkError::Unsupported(format!("moe: weight {} is not a vector of {len}", id.0)));
        }
        Ok(Res::WeightVec(*id))
    }

    /// Make temporary `i` hold at least `words` 4-byte words.
    fn grow(&mut self, i: u32, words: usize) {
        grow_temp(self.temp_bytes, i, words as u64 * 4);
    }

    fn emit(&mut self, spec: KernelSpec, res: Vec<Res>, push: Vec<u8>, groups: u32, shape: Option<String>) {
        self.emits.push(Emit { spec, res, push, groups, shape });
    }

    /// Top-k routing of every token (expert ids then weights in `route`), and the tiled
    /// paths' per-expert work list.
    fn route(&mut self) -> VkResult<()> {
        let (p, n) = (self.p, self.m.n_tokens);
        let tile_c = match self.path {
            ExpertPath::Coop { tile, .. } => tile.bn,
            _ => MOE_TILE_C,
        };
        let tiled = matches!(self.path, ExpertPath::Coop { .. } | ExpertPath::Tiled);
        if tiled {
            self.grow(self.t.tiles, mk::moe_tile_words(self.pairs, p.n_expert as usize, tile_c));
        }
        let rp = mk::MoeRouteParams {
            n_tokens: u32_of(n, "tokens")?,
            n_expert: p.n_expert,
            k: p.n_used,
            gating: match p.gating {
                MoeGating::Softmax => 0,
                MoeGating::Sigmoid => 1,
                MoeGating::SoftmaxChosen => 2,
            },
            renorm: p.renorm as u32,
            has_scale: p.expert_scale.is_some() as u32,
            first: p.held_experts().0,
            count: p.held_experts().1,
            shared_slot: self.slot.map_or(0, |s| if s.gated.is_some() { 2 } else { 1 }),
            in_cols: u32_of(self.m.cols, "input columns")?,
        };
        let scale = match &p.expert_scale {
            Some(s) => self.vec_of(s, p.n_expert as usize)?,
            None => Res::Dummy,
        };
        let (x, gate) = match self.slot.and_then(|s| s.gated) {
            Some(g) => (Res::Act(self.m.x.0), Res::WeightVec(g)),
            None => (Res::Dummy, Res::Dummy),
        };
        let res = vec![Res::Act(self.m.logits.0), scale, Res::Temp(self.t.route), x, gate];
        self.emit(mk::moe_route(p.n_expert), res, bytes(&rp), u32_of(n, "tokens")?, None);
        if self.paged {
            self.fetch_experts()?;
        }
        self.max_tiles = u32_of(mk::moe_max_tiles(self.pairs, p.n_expert as usize, tile_c), "expert tiles")?;
        if tiled {
            let n_pairs = u32_of(self.pairs, "routed pairs")?;
            let tp = mk::MoeTilesParams { n_pairs, n_expert: p.n_expert, c: tile_c };
            let res = vec![Res::Temp(self.t.route), Res::Temp(self.t.tiles)];
            self.emit(mk::moe_tiles(), res, bytes(&tp), 1, None);
        }
        Ok(())
    }

    /// A per-expert bias `{m, n_expert}` (f32 rows, read as the weight's raw plane).
    fn bias_res(&self, b: Option<WeightId>, m: u32) -> VkResult<Res> {
        let Some(b) = b else { return Ok(Res::Dummy) };
        let bw = self.one_chunk(&b)?;
        let held = self.p.held_experts().1;
        if bw.layout.ty != infr_quant::GgmlType::F32 || bw.cols != m as usize || bw.rows != held as usize {
            return Err(VkError::Unsupported(format!("moe: expert bias {} is not f32 {m}x{held}", b.0)));
        }
        Ok(self.expert_buf(&b)?.0)
    }

    /// One expert matmul over the routed pairs (with a second weight of the same shape when
    /// gate and up run as one dispatch, and the shared expert's weights for its slot).
    fn expert_matmul(
        &mut self,
        (id, bias): (WeightId, Option<WeightId>),
        second: Option<(WeightId, Option<WeightId>)>,
        shared: Option<SlotWeights>,
        (x, y): (Res, Res),
        mp: mk::MoeMatmulParams,
        role: &str,
    ) -> VkResult<()> {
        let gw = self.one_chunk(&id)?;
        let (w, soff) = self.expert_buf(&id)?;
        let mp = mk::MoeMatmulParams { soff, has_bias: bias.is_some() as u32, ..mp };
        let second = match second {
            Some((id2, bias2)) => {
                let (w2, soff2) = self.expert_buf(&id2)?;
                Some((w2, soff2, self.bias_res(bias2, mp.m)?, bias2.is_some()))
            }
            None => None,
        };
        let bias = self.bias_res(bias, mp.m)?;
        let d = ExpertDispatch { w, gw, bias, x, y, mp, max_tiles: self.max_tiles, second, shared };
        let (spec, res, push, groups) = d.lower(self.path, &self.t, self.feat)?;
        let shape = format!("{role} {}x{} pairs={}", mp.m, mp.k, mp.n_pairs);
        self.emit(spec, res, push, groups, Some(shape));
        Ok(())
    }

    /// The routed experts: gate and up (side by side in `gu`), the activation, down (each
    /// pair's output weighted by its routing weight, in `y`).
    fn routed_experts(&mut self, qact_of: &HashMap<(u32, u32), u32>) -> VkResult<()> {
        let (p, n, cols) = (self.p, self.m.n_tokens, self.m.cols);
        let (ff, pairs, t) = (p.n_ff as usize, self.pairs, self.t);
        let (gate_b, up_b) = match p.gate_up_bias {
            Some(ExpertGateUp::Separate { gate, up }) => (Some(gate), Some(up)),
            Some(ExpertGateUp::Fused(gu)) => (Some(gu), None),
            None => (None, None),
        };
        let gate_up: Vec<(WeightId, Option<WeightId>, usize, usize, &str)> = match p.gate_up {
            ExpertGateUp::Separate { gate, up } => {
                vec![(gate, gate_b, ff, 0, "gate_exps"), (up, up_b, ff, ff, "up_exps")]
            }
            ExpertGateUp::Fused(gu) => vec![(gu, gate_b, 2 * ff, 0, "gate_up_exps")],
        };
        let n_pairs = u32_of(pairs, "routed pairs")?;
        // The int8 input of the gate/up matmuls: the norm's quantized output, or quantized here.
        // Where the routing weight scales the expert input (Llama 4), each pair's input is
        // rounded after its scaling, as llama.cpp's CPU does: one row per pair.
        let per_pair_input = p.weight_before;
        let mut qx = Res::Temp(t.qx);
        if let ExpertPath::Int8 { gx, .. } = self.path {
            match qact_of.get(&(self.m.x.0, gx)).filter(|_| !per_pair_input) {
                Some(&qi) => qx = Res::Temp(qi),
                None => {
                    let rows = if per_pair_input { pairs } else { n };
                    grow_temp(self.temp_bytes, t.qx, kernels::qact_bytes(rows, cols));
                    let n_blocks = u32_of(rows * cols / 32, "activation blocks")?;
                    let scale_off = (rows * cols / 16) as u32;
                    let base = kernels::QuantizeParams { k: cols as u32, n_blocks, scale_off, group: gx };
                    let mut res = vec![Res::Act(self.m.x.0), Res::Temp(t.qx), Res::Temp(t.qx)];
                    let (spec, push) = if per_pair_input {
                        res.push(Res::Temp(t.route));
                        let pairs_per_token = u32_of(pairs / n, "pairs per token")?;
                        let qp = kernels::QuantizePairsParams { base, pairs_per_token, n_pairs };
                        (kernels::quantize_pairs(), bytes(&qp))
                    } else {
                        (kernels::quantize_act(), bytes(&base))
                    };
                    self.emit(spec, res, push, n_blocks.div_ceil(8), None);
                }
            }
        }
        // On the integer-dot path, separate gate and up weights of one type run as one dispatch.
        let paired = matches!(self.path, ExpertPath::Int8 { .. })
            && gate_up.len() == 2
            && self.one_chunk(&gate_up[0].0)?.layout.ty == self.one_chunk(&gate_up[1].0)?.layout.ty;
        let second = paired.then(|| (gate_up[1].0, gate_up[1].1));
        let gate_up = if paired { &gate_up[..1] } else { &gate_up[..] };
        for &(id, bias, rows, col0, role) in gate_up {
            let x = match self.path {
                ExpertPath::Int8 { .. } => qx,
                ExpertPath::Coop { .. } => self.routed_input16(self.one_chunk(&id)?)?,
                _ => self.routed_input(self.one_chunk(&id)?)?,
            };
            let role = if paired { "gate_up_exps" } else { role };
            let mp = mk::MoeMatmulParams {
                k: cols as u32,
                m: rows as u32,
                n_pairs,
                out_stride: 2 * p.n_ff,
                out_col0: col0 as u32,
                soff: 0,
                x_div: if per_pair_input { 1 } else { u32_of(pairs / n, "pairs per token")? },
                // The weight is in the pair inputs (weight before) or weighs the down output.
                scale: 0,
                tiles_m: 0,
                has_bias: 0,
            };
            let shared = self.slot.map(|s| match (paired, col0) {
                (true, _) => (s.gate, Some(s.up)),
                (false, 0) => (s.gate, None),
                (false, _) => (s.up, None),
            });
            self.expert_matmul((id, bias), second, shared, (x, Res::Temp(t.gu)), mp, role)?;
        }
        // The f16 down input of the cooperative path, quantized and scaled back as llama.cpp
        // rounds it for an int8 weight type: written by the GLU (as `round_act16` would).
        let down_mode = kernels::act_round16_mode(self.one_chunk(&p.down)?.layout.ty, ff);
        let coop_group = kernels::int8_round_group(down_mode).filter(|_| self.feat.subgroups);
        let h = match (self.path, coop_group) {
            (ExpertPath::Int8 { gh, .. }, _) => {
                grow_temp(self.temp_bytes, t.qh, kernels::qact_bytes(pairs, ff));
                self.glu_quantized(gh, crate::fused_kernels::QuantOut::Int8, t.qh)?;
                Res::Temp(t.qh)
            }
            (ExpertPath::Coop { .. }, Some(group)) => {
                grow_temp(self.temp_bytes, t.hr, (pairs * ff * 2) as u64);
                self.glu_quantized(group, crate::fused_kernels::QuantOut::F16, t.hr)?;
                Res::Temp(t.hr)
            }
            _ => {
                let gp = mk::MoeGluParams { n_pairs, n_ff: p.n_ff };
                let glu_groups = u32_of((pairs * ff).div_ceil(64), "activations")?;
                self.emit(mk::moe_glu(p.act), vec![Res::Temp(t.gu), Res::Temp(t.h)], bytes(&gp), glu_groups, None);
                if matches!(self.path, ExpertPath::Coop { .. }) {
                    self.round16(down_mode, (Res::Temp(t.h), t.hr), pairs * ff)?;
                    Res::Temp(t.hr)
                } else {
                    self.round_h(self.one_chunk(&p.down)?, ff, pairs * ff)?
                }
            }
        };
        let mp = mk::MoeMatmulParams {
            k: p.n_ff,
            m: self.m.out_cols as u32,
            n_pairs,
            out_stride: self.m.out_cols as u32,
            out_col0: 0,
            soff: 0,
            x_div: 1,
            scale: if p.weight_before { 0 } else { 2 },
            tiles_m: 0,
            has_bias: 0,
        };
        let shared = self.slot.map(|s| (s.down, None));
        self.expert_matmul((p.down, p.down_bias), None, shared, (h, Res::Temp(t.y)), mp, "down_exps")
    }

    /// The routed pairs' gated activation (gate | up rows of `gu` into `h`) fused with its
    /// int8 quantization (`QuantOut::Int8`, quants and scales in temporary `q`) or that
    /// quantization scaled back to f16 (`QuantOut::F16`, into `q`), `group` blocks of 32 per
    /// scale.
    fn glu_quantized(&mut self, group: u32, out: crate::fused_kernels::QuantOut, q: u32) -> VkResult<()> {
        let (ff, t) = (self.p.n_ff as usize, self.t);
        let n_words = u32_of(self.pairs * ff / 4, "activations")?;
        let gp = crate::fused_kernels::GluQ8Params {
            n_words,
            group,
            scale_off: n_words / 4,
            ab_words: self.p.n_ff / 4,
            a_parts: 1,
            a_stride: 0,
            b_parts: 1,
            b_stride: 0,
            row_words: u32_of(ff / 4, "columns")?,
            b_row_words: 0,
            b_off_words: 0,
            b_norm_words: 0,
            b_norm_eps: 0.0,
            b_len_words: 0,
            b_period_words: 0,
            a_row_words: 0,
            a_len_words: 0,
            a_period_words: 0,
            a_off_words: 0,
        };
        let res = vec![Res::Temp(t.gu), Res::Temp(t.gu), Res::Temp(t.h), Res::Temp(q), Res::Temp(q)];
        let spec = crate::fused_kernels::glu_q8(self.p.act, out, false);
        self.emit(spec, res, bytes(&gp), n_words.div_ceil(64), None);
        Ok(())
    }

    /// One dense matmul of the shared expert over every token, on the kernel a plain linear
    /// node of that many rows would take over f32 activations (matrix-vector, cooperative, ...).
    /// With `row_scale`, each token's outputs are multiplied by its entry there (the float
    /// matrix-vector kernels' `has_bias` 2; decode only).
    fn dense(
        &mut self,
        id: WeightId,
        (x, y): (Res, Res),
        (k_in, stride, col0): (usize, usize, usize),
        row_scale: Option<Res>,
    ) -> VkResult<()> {
        let n = self.m.n_tokens;
        let gw = self.one_chunk(&id)?;
        let (spec, c, r) = super::matmul::float_matmul_kernel(gw, n, self.feat);
        let tiles_m = (gw.rows as u32).div_ceil(r);
        let groups = tiles_m
            .checked_mul((n as u32).div_ceil(c))
            .ok_or_else(|| VkError::Unsupported("moe: shared expert grid".into()))?;
        let mp = kernels::MatmulParams {
            k: k_in as u32,
            m: gw.rows as u32,
            n: n as u32,
            out_stride: stride as u32,
            out_col0: col0 as u32,
            soff: gw.chunks[0].soff_words,
            has_bias: if row_scale.is_some() { 2 } else { 0 },
            tiles_m,
        };
        let shape = format!("shexp {}x{k_in} n={n}", gw.rows);
        let res = vec![Res::WeightChunk(id, 0), x, y, row_scale.unwrap_or(Res::Dummy), Res::Tables];
        self.emit(spec, res, bytes(&mp), groups, Some(shape));
        Ok(())
    }

    /// The shared expert's gated FFN of `fs` hidden columns over every token, into `sy`;
    /// returns its output and its sigmoid gate's weight (if it has one) for `combine`. With
    /// `as_plane` (one token) it writes its row after the routed rows in `y` instead, scaled by
    /// its gate as the combine would, for the reader to add up with them.
    fn shared_expert(&mut self, sh: &SharedExpert, fs: usize, as_plane: bool) -> VkResult<(Res, Res)> {
        let (n, cols, t) = (self.m.n_tokens, self.m.cols, self.t);
        for (id, col0) in [(sh.gate, 0), (sh.up, fs)] {
            let x = self.input(self.one_chunk(&id)?)?;
            self.dense(id, (x, Res::Temp(t.gu)), (cols, 2 * fs, col0), None)?;
        }
        let gate = match &sh.gate_inp {
            Some(g) => self.vec_of(g, cols)?,
            None => Res::Dummy,
        };
        // As a plane, each token's gate goes into `sy` (unused then), beside the gate/up
        // products, for the down projection to scale its row by.
        let scale = if as_plane && sh.gate_inp.is_some() {
            let gp = mk::MoeSharedGateParams { n_tokens: n as u32, in_cols: cols as u32 };
            let res = vec![Res::Act(self.m.x.0), gate, Res::Temp(t.sy)];
            self.emit(mk::moe_shared_gate(), res, bytes(&gp), u32_of(n, "tokens")?, None);
            Some(Res::Temp(t.sy))
        } else {
            None
        };
        let gp = mk::MoeGluParams { n_pairs: n as u32, n_ff: fs as u32 };
        let groups = u32_of((n * fs).div_ceil(64), "activations")?;
        self.emit(mk::moe_glu(self.p.act), vec![Res::Temp(t.gu), Res::Temp(t.h)], bytes(&gp), groups, None);
        let h = self.round_h(self.one_chunk(&sh.down)?, fs, n * fs)?;
        let out = self.m.out_cols;
        if as_plane {
            self.dense(sh.down, (h, Res::Temp(t.y)), (fs, out, self.pairs * out), scale)?;
            return Ok((Res::Dummy, Res::Dummy));
        }
        self.dense(sh.down, (h, Res::Temp(t.sy)), (fs, out, 0), None)?;
        Ok((Res::Temp(t.sy), gate))
    }

    /// The node's output: each token's routed pairs summed, plus the (gated) shared expert.
    fn combine(&mut self, (shared, shared_gate): (Res, Res)) -> VkResult<()> {
        let (p, n, out) = (self.p, self.m.n_tokens, self.m.out_cols);
        let cp = mk::MoeCombineParams {
            n_tokens: n as u32,
            k: p.n_used,
            out_cols: out as u32,
            in_cols: self.m.cols as u32,
            has_shared: p.shared.is_some() as u32,
            gated: p.shared.is_some_and(|s| s.gate_inp.is_some()) as u32,
        };
        let res = vec![Res::Temp(self.t.y), shared, Res::Act(self.m.x.0), shared_gate, self.m.out];
        let groups = u32_of(n * out.div_ceil(64), "token column chunks")?;
        self.emit(mk::moe_combine(), res, bytes(&cp), groups, None);
        Ok(())
    }
}
