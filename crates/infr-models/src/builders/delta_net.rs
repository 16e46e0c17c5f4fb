//! Gated DeltaNet mixer (Qwen3.5 / Qwen3-Next linear-attention layers): fused qkv projection,
//! causal conv with SiLU, L2-normalised q/k, the gated delta rule over a per-sequence state,
//! gated RMS norm and output projection (llama.cpp `llama_model_qwen35::graph::
//! build_layer_attn_linear` and `llm_build_delta_net_base`).

use infr_core::{
    Activation, Conv1dParams, DeltaNetParams, GraphBuilder, StateLayerSpec, TensorId, WeightId, WeightSource,
};

use super::blk;
use crate::{Hparams, ModelError, TensorLoader};

/// DeltaNet widths from the `ssm.*` keys.
#[derive(Debug, Clone, Copy)]
pub struct DeltaNetHparams {
    /// Key (and value) head dimension (`ssm.state_size`).
    pub head_dim: usize,
    /// Query/key heads (`ssm.group_count`).
    pub n_k_head: usize,
    /// Value heads (`ssm.time_step_rank`).
    pub n_v_head: usize,
    /// Convolution taps (`ssm.conv_kernel`).
    pub conv_kernel: usize,
}

/// Largest widths a file may declare (real models: head dim 128, 64 value heads, 4 taps).
const MAX_HEAD_DIM: usize = 1024;
const MAX_HEADS: usize = 4096;
const MAX_KERNEL: usize = 64;

impl DeltaNetHparams {
    /// Read and check the `ssm.*` keys.
    pub fn read(hp: &Hparams, src: &dyn WeightSource) -> Result<Self, ModelError> {
        let k = hp.keys(src.metadata());
        let head_dim = k.req_u("ssm.state_size")?;
        let n_k_head = k.req_u("ssm.group_count")?;
        let n_v_head = k.req_u("ssm.time_step_rank")?;
        let conv_kernel = k.req_u("ssm.conv_kernel")?;
        let inner = k.req_u("ssm.inner_size")?;
        let bad = |m: String| Err(ModelError::BadHparam(m));
        if head_dim == 0 || head_dim > MAX_HEAD_DIM || n_k_head == 0 || n_v_head == 0 || n_v_head > MAX_HEADS {
            return bad(format!("ssm.state_size {head_dim}, group_count {n_k_head}, time_step_rank {n_v_head}"));
        }
        if n_v_head % n_k_head != 0 {
            return bad(format!("ssm.time_step_rank {n_v_head} is not a multiple of ssm.group_count {n_k_head}"));
        }
        if inner != head_dim * n_v_head {
            return bad(format!("ssm.inner_size {inner} != state_size {head_dim} x time_step_rank {n_v_head}"));
        }
        if conv_kernel == 0 || conv_kernel > MAX_KERNEL {
            return bad(format!("ssm.conv_kernel = {conv_kernel}"));
        }
        Ok(Self { head_dim, n_k_head, n_v_head, conv_kernel })
    }

    /// Channels of the convolution: q, k and v.
    pub fn conv_channels(&self) -> usize {
        (2 * self.n_k_head + self.n_v_head) * self.head_dim
    }

    /// The two state layers of one DeltaNet layer: the conv window, then the state matrices.
    pub fn state_layers(&self) -> [StateLayerSpec; 2] {
        let conv = ((self.conv_kernel - 1) * self.conv_channels()) as u32;
        let s = (self.n_v_head * self.head_dim * self.head_dim) as u32;
        [StateLayerSpec { floats: conv }, StateLayerSpec { floats: s }]
    }
}

/// The tensors of one DeltaNet layer and where its state lives.
#[derive(Debug, Clone, Copy)]
pub struct DeltaNetLayer {
    pub qkv: WeightId,
    pub gate: WeightId,
    pub conv: WeightId,
    pub dt_bias: WeightId,
    pub a: WeightId,
    pub beta: WeightId,
    pub alpha: WeightId,
    pub norm: WeightId,
    pub out: WeightId,
    pub hp: DeltaNetHparams,
    /// Index of the conv window's state layer; the state matrices are the next one.
    pub state: u32,
    pub eps: f32,
}

/// Load layer `il`'s DeltaNet tensors; `state` is its first state layer index.
pub fn load_delta_net(
    tl: &mut TensorLoader<'_>,
    hp: &Hparams,
    dn: DeltaNetHparams,
    il: usize,
    state: u32,
) -> Result<DeltaNetLayer, ModelError> {
    let e = hp.n_embd;
    let (d, hv) = (dn.head_dim, dn.n_v_head);
    let c = dn.conv_channels();
    Ok(DeltaNetLayer {
        qkv: tl.require(&blk(il, "attn_qkv.weight"), &[e, c])?,
        gate: tl.require(&blk(il, "attn_gate.weight"), &[e, hv * d])?,
        conv: tl.require(&blk(il, "ssm_conv1d.weight"), &[dn.conv_kernel, c])?,
        dt_bias: tl.require(&blk(il, "ssm_dt.bias"), &[hv])?,
        a: tl.require(&blk(il, "ssm_a"), &[hv])?,
        beta: tl.require(&blk(il, "ssm_beta.weight"), &[e, hv])?,
        alpha: tl.require(&blk(il, "ssm_alpha.weight"), &[e, hv])?,
        norm: tl.require(&blk(il, "ssm_norm.weight"), &[d])?,
        out: tl.require(&blk(il, "ssm_out.weight"), &[hv * d, e])?,
        hp: dn,
        state,
        eps: hp.rms_eps,
    })
}

impl DeltaNetLayer {
    /// Build on normalised input `x`; returns the projected output.
    pub fn build(&self, g: &mut GraphBuilder<'_>, x: TensorId) -> TensorId {
        let dn = self.hp;
        let (d, hk, hv) = (dn.head_dim, dn.n_k_head, dn.n_v_head);
        let c = dn.conv_channels();
        let qkv = g.linear(x, self.qkv, None);
        let z = g.linear(x, self.gate, None);
        let beta = g.linear(x, self.beta, None);
        let alpha = g.linear(x, self.alpha, Some(self.dt_bias));
        let conv = Conv1dParams { weight: self.conv, kernel: dn.conv_kernel as u32, state: self.state, silu: true };
        let mixed = g.conv1d(qkv, conv);
        // L2 norm as llama.cpp's build_gdn_l2_norm: rms_norm(eps / n) / sqrt(n).
        let l2 = |g: &mut GraphBuilder<'_>, t: TensorId| {
            let t = g.rms_norm(t, None, self.eps / d as f32, d);
            g.scale(t, 1.0 / (d as f32).sqrt())
        };
        let q = g.slice_cols(mixed, c, 0, hk * d);
        let q = l2(g, q);
        let k = g.slice_cols(mixed, c, hk * d, hk * d);
        let k = l2(g, k);
        let v = g.slice_cols(mixed, c, 2 * hk * d, hv * d);
        let p = DeltaNetParams {
            n_k_head: hk as u32,
            n_v_head: hv as u32,
            head_dim: d as u32,
            decay: self.a,
            scale: 1.0 / (d as f32).sqrt(),
            state: self.state + 1,
        };
        let o = g.delta_net(q, k, v, alpha, beta, p);
        let o = g.rms_norm(o, Some(self.norm), self.eps, d);
        let o = g.glu(z, o, Activation::Silu);
        g.linear(o, self.out, None)
    }
}
