//! Which kernel a MoE node's expert matmuls take (integer-dot decode, cooperative or scalar
//! tiles for batches, one pair per work item otherwise), and the dispatch of one expert
//! matmul on that kernel.

use infr_core::MoeParams;

use super::moe::MoeTemps;
use super::{bytes, Features, Res};
use crate::error::{VkError, VkResult};
use crate::features::Coop;
use crate::kernels::{self, CoopTile};
use crate::moe_kernels::{self as mk, MOE_TILED_MIN_TOKENS, MOE_TILES_MAX_EXPERTS};
use crate::pipeline::KernelSpec;
use crate::weights::GpuWeight;

/// Which kernel a node's expert matmuls take.
#[derive(Debug, Clone, Copy)]
pub(super) enum ExpertPath {
    /// Decode on the integer-dot kernel, one routed pair per work item; `gx`, `gh`: blocks per
    /// shared scale of the gate/up input and of the down input (8: Q8_K rounding, 1: Q8_0).
    Int8 { gx: u32, gh: u32 },
    /// Batches on cooperative matrices over tiles of one expert's pairs.
    Coop { coop: Coop, tile: CoopTile },
    /// Batches on the scalar kernel over tiles of up to [`MOE_TILE_C`](crate::moe_kernels::MOE_TILE_C) pairs.
    Tiled,
    /// Decode on the scalar kernel, one routed pair per work item.
    PerPair,
}

impl ExpertPath {
    /// The path for `n` tokens of `cols` inputs with expert weights `experts` (gate/up first,
    /// down last). Batches group their pairs by expert so that each weight read serves a tile
    /// of pairs, on cooperative matrices where the device has them and every expert weight can
    /// (64 tokens and up); decode steps take the integer-dot kernel where every weight type has
    /// it, as the dense FFN's decode path does.
    pub(super) fn choose(p: &MoeParams, n: usize, cols: usize, feat: Features, experts: &[&GpuWeight]) -> Self {
        let (down, gate_up) = experts.split_last().expect("expert weights");
        if n >= MOE_TILED_MIN_TOKENS && p.n_expert <= MOE_TILES_MAX_EXPERTS {
            let coop_ok = experts.iter().all(|gw| gw.layout.ty != infr_quant::GgmlType::F32 && gw.cols % 32 == 0);
            return match feat.coopmat {
                Some(coop) if coop_ok && n >= mk::moe_coop_min_tokens() => {
                    let tile = mk::moe_coop_tile(coop.frag, feat.shared_bytes);
                    Self::Coop { coop, tile }
                }
                _ => Self::Tiled,
            };
        }
        let group = |gw: &GpuWeight, k_in: usize| {
            let ok = feat.int8 && feat.subgroups && k_in % 32 == 0 && kernels::vec_q8_lanes(gw.layout.ty).is_some();
            ok.then(|| if kernels::q8k_acts(gw.layout.ty) && k_in % 256 == 0 { 8u32 } else { 1 })
        };
        let gx = group(gate_up[0], cols);
        let same = gate_up.iter().all(|gw| group(gw, cols) == gx);
        match (mk::moe_q8_enabled() && same, gx, group(down, p.n_ff as usize)) {
            (true, Some(gx), Some(gh)) => Self::Int8 { gx, gh },
            _ => Self::PerPair,
        }
    }
}

/// One expert matmul to lower: `y[pair] = x[pair / x_div] · W_eᵀ` for every routed pair.
pub(super) struct ExpertDispatch<'a> {
    /// The weight's buffer (its host tensor or its expert-cache slots).
    pub(super) w: Res,
    pub(super) gw: &'a GpuWeight,
    /// The per-expert bias rows, or a dummy binding.
    pub(super) bias: Res,
    pub(super) x: Res,
    pub(super) y: Res,
    /// Shape, routing and output placement (`soff` and `has_bias` filled in).
    pub(super) mp: mk::MoeMatmulParams,
    /// Most tiles the node's tile list can hold.
    pub(super) max_tiles: u32,
    /// A second weight of the same shape and type computed in the same dispatch into the
    /// columns after the first one's (the up weight beside the gate; integer-dot path only):
    /// its buffer, scale-plane offset and bias.
    pub(super) second: Option<(Res, u32, Res, bool)>,
    /// The shared expert's weight (buffer, scale-plane offset) for pairs routed to its slot,
    /// and its up weight beside `second` (integer-dot path only).
    pub(super) shared: Option<SlotWeights>,
}

/// A weight buffer and its scale-plane offset.
pub(super) type WeightBuf = (Res, u32);

/// The shared expert's weight for the pairs of its slot, and its up weight beside a gate.
pub(super) type SlotWeights = (WeightBuf, Option<WeightBuf>);

impl ExpertDispatch<'_> {
    /// The kernel, bindings, push constants and workgroups of this matmul on `path`.
    pub(super) fn lower(
        &self,
        path: ExpertPath,
        t: &MoeTemps,
        feat: Features,
    ) -> VkResult<(KernelSpec, Vec<Res>, Vec<u8>, u32)> {
        let (mp, w) = (self.mp, self.w);
        let grid = |tiles_m: u32, items: u32| {
            tiles_m.checked_mul(items).ok_or_else(|| VkError::Unsupported("moe grid".into()))
        };
        Ok(match path {
            ExpertPath::Int8 { .. } => {
                let gate_up = self.second.is_some();
                let sh = self.shared.is_some();
                let fitted = super::matmul::fitted_rows(&self.gw.layout, mp.k as usize).and_then(|r| {
                    Some((mk::matmul_vec_q8_moe(&self.gw.layout, r, gate_up, Some(feat.shared_bytes), sh)?, r))
                });
                let (spec, r) = match fitted {
                    Some(hit) => hit,
                    None => {
                        let r = super::matmul::vec_q8_rows(mp.m as usize, 1);
                        let spec = mk::matmul_vec_q8_moe(&self.gw.layout, r, gate_up, None, sh).ok_or_else(|| {
                            VkError::Unsupported(format!("moe: no integer-dot kernel for {}", self.gw.layout.ty))
                        })?;
                        (spec, r)
                    }
                };
                let tiles_m = mp.m.div_ceil(r);
                let mm = kernels::MatmulParams {
                    k: mp.k,
                    m: mp.m,
                    n: 1,
                    out_stride: mp.out_stride,
                    out_col0: mp.out_col0,
                    soff: mp.soff,
                    has_bias: mp.has_bias,
                    tiles_m,
                };
                let x_rows = mp.n_pairs / mp.x_div;
                let q = kernels::MatmulQ8Params { mm, qs_off: x_rows * mp.k / 16 };
                let qp = mk::MoeQ8Params { q, n_pairs: mp.n_pairs, x_div: mp.x_div, scale: mp.scale };
                let mut res = vec![w, self.x, self.y, self.bias, self.x, Res::Temp(t.route)];
                let groups = grid(tiles_m, mp.n_pairs)?;
                match (self.second, self.shared) {
                    (Some((w1, soff1, bias1, has_bias1)), shared) => {
                        res.extend([w1, bias1]);
                        let gp = mk::MoeQ8GateUpParams { gate: qp, soff1, bias1: has_bias1 as u32 };
                        let push = match shared {
                            None => bytes(&gp),
                            Some(((ws, soff_s), Some((ws1, soff_s1)))) => {
                                res.extend([ws, ws1]);
                                bytes(&mk::MoeQ8GateUpSharedParams { routed: gp, soff_s, soff_s1 })
                            }
                            Some((_, None)) => {
                                return Err(VkError::Unsupported("moe: shared slot without its up weight".into()))
                            }
                        };
                        (spec, res, push, grid(groups, 2)?)
                    }
                    (None, None) => (spec, res, bytes(&qp), groups),
                    (None, Some(((ws, soff_s), _))) => {
                        res.push(ws);
                        (spec, res, bytes(&mk::MoeQ8SharedParams { routed: qp, soff_s }), groups)
                    }
                }
            }
            ExpertPath::Coop { coop, tile } => {
                let tiles_m = mp.m.div_ceil(tile.bm);
                let cp = kernels::MoeCoopParams {
                    k: mp.k,
                    m: mp.m,
                    n: self.max_tiles * tile.bn,
                    out_stride: mp.out_stride,
                    out_col0: mp.out_col0,
                    soff: mp.soff,
                    has_bias: mp.has_bias,
                    tiles_m,
                    n_pairs: mp.n_pairs,
                    x_div: mp.x_div,
                    scale: mp.scale,
                };
                let spec = kernels::matmul_coop(kernels::CoopOperands::Experts(&self.gw.layout), coop, tile);
                let res = vec![w, self.x, self.y, self.bias, Res::Tables, Res::Temp(t.route), Res::Temp(t.tiles)];
                (spec, res, bytes(&cp), grid(tiles_m, self.max_tiles)?)
            }
            ExpertPath::Tiled | ExpertPath::PerPair => {
                let tiled = matches!(path, ExpertPath::Tiled);
                let rows = mk::moe_rows();
                let r = if tiled { rows.1 } else { rows.0 };
                let mp = mk::MoeMatmulParams { tiles_m: mp.m.div_ceil(r), ..mp };
                let tiles = if tiled { Res::Temp(t.tiles) } else { Res::Dummy };
                let res = vec![w, self.x, self.y, Res::Temp(t.route), Res::Tables, self.bias, tiles];
                let items = if tiled { self.max_tiles } else { mp.n_pairs };
                let spec = mk::matmul_moe(&self.gw.layout, feat.subgroups, r, tiled);
                (spec, res, bytes(&mp), grid(mp.tiles_m, items)?)
            }
        })
    }
}
