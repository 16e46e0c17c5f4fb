//! The expert matmuls' operands: the MoE node's input (or each routed pair's weighted row)
//! and the gated activation, rounded as llama.cpp rounds them for each weight type, in f32
//! for the integer-emulating float kernels or in f16 for the cooperative ones.

use super::MoeLowering;
use crate::error::VkResult;
use crate::kernels;
use crate::lower::{bytes, u32_of, Res};
use crate::moe_kernels as mk;
use crate::prefill_matmul::{grow_temp, round_params};
use crate::weights::GpuWeight;

impl MoeLowering<'_, '_> {
    /// The node's input for a matmul with weight `gw`, rounded as llama.cpp's CPU rounds
    /// activations for that weight type.
    pub(super) fn input(&mut self, gw: &GpuWeight) -> VkResult<Res> {
        let (x, cols) = (self.m.x.0, self.m.cols);
        let elems = self.m.n_tokens * cols;
        let Some(mode) = kernels::act_round_mode(gw.layout.ty, cols) else { return Ok(Res::Act(x)) };
        let (ri, round) = self.rounded.prepare(x, mode, elems, (elems * 4) as u64, self.temp_bytes)?;
        if let Some(rp) = round {
            self.emit(kernels::round_act(), vec![Res::Act(x), Res::Temp(ri)], bytes(&rp), rp.n_groups, None);
        }
        Ok(Res::Temp(ri))
    }

    /// `elems` values of temporary `h`, rounded into `hr` for a matmul over `k_in` columns of
    /// `gw` where its type asks for it.
    pub(super) fn round_h(&mut self, gw: &GpuWeight, k_in: usize, elems: usize) -> VkResult<Res> {
        let Some(mode) = kernels::act_round_mode(gw.layout.ty, k_in) else { return Ok(Res::Temp(self.t.h)) };
        let rp = round_params(elems, mode)?;
        let res = vec![Res::Temp(self.t.h), Res::Temp(self.t.hr)];
        self.emit(kernels::round_act(), res, bytes(&rp), rp.n_groups, None);
        Ok(Res::Temp(self.t.hr))
    }

    /// `elems` values of `src` rounded by `mode` and stored in f16 into temporary `dst` (the
    /// cooperative expert matmuls' operand).
    pub(super) fn round16(&mut self, mode: u32, (src, dst): (Res, u32), elems: usize) -> VkResult<()> {
        grow_temp(self.temp_bytes, dst, (elems * 2) as u64);
        let rp = round_params(elems, mode)?;
        self.emit(kernels::round_act16(), vec![src, Res::Temp(dst)], bytes(&rp), rp.n_groups, None);
        Ok(())
    }

    /// The node's input in f16 for a cooperative expert matmul with weight `gw` (rounded
    /// once per node and rounding).
    fn input16(&mut self, gw: &GpuWeight) -> VkResult<Res> {
        let mode = kernels::act_round16_mode(gw.layout.ty, self.m.cols);
        if self.x16_mode != Some(mode) {
            let elems = self.m.n_tokens * self.m.cols;
            self.round16(mode, (Res::Act(self.m.x.0), self.t.x16), elems)?;
            self.x16_mode = Some(mode);
        }
        Ok(Res::Temp(self.t.x16))
    }

    /// Each routed pair's input, its token's row times the pair's routing weight (in `xp`),
    /// where the weight scales the expert input (Llama 4): the float expert matmuls then round
    /// the scaled rows, as llama.cpp's CPU quantizes `ggml_mul(cur, weights)`.
    fn scaled_pairs(&mut self) -> VkResult<Res> {
        let (t, pairs, cols) = (self.t, self.pairs, self.m.cols);
        if !self.pairs_scaled {
            grow_temp(self.temp_bytes, t.xp, (pairs * cols * 4) as u64);
            let sp = mk::MoePairInputParams {
                n_pairs: u32_of(pairs, "routed pairs")?,
                words: u32_of(cols / 4, "input words")?,
                pairs_per_token: u32_of(pairs / self.m.n_tokens, "pairs per token")?,
                pad: 0,
            };
            let groups = u32_of((pairs * cols / 4).div_ceil(64), "pair input words")?;
            let res = vec![Res::Act(self.m.x.0), Res::Temp(t.route), Res::Temp(t.xp)];
            self.emit(mk::moe_pair_inputs(), res, bytes(&sp), groups, None);
            self.pairs_scaled = true;
        }
        Ok(Res::Temp(t.xp))
    }

    /// The routed experts' input for a float matmul with weight `gw`: the node's input
    /// ([`Self::input`]), or each pair's own weighted row ([`Self::scaled_pairs`]) rounded as
    /// `gw`'s type asks where the weight scales the input.
    pub(super) fn routed_input(&mut self, gw: &GpuWeight) -> VkResult<Res> {
        if !self.p.weight_before {
            return self.input(gw);
        }
        let src = self.scaled_pairs()?;
        let Some(mode) = kernels::act_round_mode(gw.layout.ty, self.m.cols) else { return Ok(src) };
        if self.xpr_mode != Some(mode) {
            let elems = self.pairs * self.m.cols;
            grow_temp(self.temp_bytes, self.t.xpr, (elems * 4) as u64);
            let rp = round_params(elems, mode)?;
            self.emit(kernels::round_act(), vec![src, Res::Temp(self.t.xpr)], bytes(&rp), rp.n_groups, None);
            self.xpr_mode = Some(mode);
        }
        Ok(Res::Temp(self.t.xpr))
    }

    /// [`Self::routed_input`] in f16 for a cooperative expert matmul.
    pub(super) fn routed_input16(&mut self, gw: &GpuWeight) -> VkResult<Res> {
        if !self.p.weight_before {
            return self.input16(gw);
        }
        let mode = kernels::act_round16_mode(gw.layout.ty, self.m.cols);
        if self.x16_mode != Some(mode) {
            let src = self.scaled_pairs()?;
            self.round16(mode, (src, self.t.x16), self.pairs * self.m.cols)?;
            self.x16_mode = Some(mode);
        }
        Ok(Res::Temp(self.t.x16))
    }
}
