//! Helpers of the matmul lowering: which matrix-vector kernel a matmul takes and the
//! bindings and push constants of several matmuls of one input run as one integer-dot dispatch.

use std::collections::HashMap;

use infr_core::{Graph, Op, WeightId};

use super::{bytes, Features, Res};
use crate::error::{VkError, VkResult};
use crate::fusion::Q8Info;
use crate::kernels;
use crate::weights::GpuWeight;

/// Weight rows per workgroup of the matrix-vector kernel.
pub(super) const VEC_R: u32 = 2;

/// Weight rows per workgroup of the integer-dot matrix-vector kernel for `m` rows: four
/// when that still leaves a thousand workgroups (more loads in flight per thread), else two.
pub(super) fn vec_q8_rows(m: usize) -> u32 {
    if m >= 4096 {
        4
    } else {
        VEC_R
    }
}

/// How a matmul with weight `lw` and `n` activation rows reads int8 activations, if it runs
/// the integer-dot kernel.
pub(super) fn q8_info(lw: &GpuWeight, n: usize, feat: Features) -> Option<Q8Info> {
    let k = lw.cols;
    let ty = lw.layout.ty;
    let q8 = feat.int8 && n <= kernels::VEC_MAX_COLS && k % 32 == 0 && !lw.chunks.is_empty();
    (q8 && kernels::vec_q8_lanes(ty).is_some()).then_some(Q8Info {
        group: if kernels::q8k_acts(ty) && k % 256 == 0 { 8 } else { 1 },
        ty,
        k,
        single_chunk: lw.chunks.len() == 1,
    })
}

/// The weight and bias of matmul node `j` (a member of a multi-job matrix-vector dispatch).
pub(super) fn job_weight<'w>(
    graph: &Graph,
    j: usize,
    weights: &'w HashMap<WeightId, GpuWeight>,
) -> VkResult<(&'w GpuWeight, Option<WeightId>)> {
    match &graph.nodes[j].op {
        Op::Linear { weight, bias, .. } => weights
            .get(weight)
            .map(|w| (w, *bias))
            .ok_or_else(|| VkError::Unsupported(format!("node {j}: weight {} not loaded", weight.0))),
        _ => Err(VkError::Unsupported(format!("node {j} is not a matmul"))),
    }
}

/// The bindings, push constants, workgroups and profile shape of one integer-dot dispatch
/// over several matmuls of one input (job j's workgroups follow job j-1's).
pub(super) struct GemvJobs {
    pub res: Vec<Res>,
    pub push: Vec<u8>,
    pub groups: u32,
    pub shape: String,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn gemv_jobs(
    graph: &Graph,
    members: &[usize],
    jw: &[(&GpuWeight, Option<WeightId>)],
    biases: &[Option<Res>],
    qi: u32,
    r: u32,
    n: usize,
    k: usize,
    bindings: u32,
) -> GemvJobs {
    let mut res = vec![Res::Dummy; bindings as usize];
    let mut jobs = Vec::new();
    let mut tile0 = 0u32;
    let mut shape = String::new();
    for (jn, ((&j, (jwt, _)), jb)) in members.iter().zip(jw).zip(biases).enumerate() {
        // Job 0 has the plain bindings (W 0, Y 2, bias 3); job j ≥ 1 has 5+3(j-1)...
        let (wi, yi, bi) = if jn == 0 { (0, 2, 3) } else { (5 + 3 * (jn - 1), 6 + 3 * (jn - 1), 7 + 3 * (jn - 1)) };
        if let Op::Linear { weight, .. } = &graph.nodes[j].op {
            res[wi] = Res::WeightChunk(*weight, 0);
        }
        res[yi] = Res::Act(j as u32);
        res[bi] = jb.unwrap_or(Res::Dummy);
        jobs.push(kernels::MatmulJobParams {
            m: jwt.rows as u32,
            soff: jwt.chunks[0].soff_words,
            has_bias: jb.is_some() as u32,
            tile0,
        });
        tile0 += (jwt.rows as u32).div_ceil(r);
        shape.push_str(&format!("{}{}x{}", if jn == 0 { "" } else { "+" }, jwt.rows, jwt.cols));
    }
    res[1] = Res::Temp(qi);
    res[4] = Res::Temp(qi);
    let j0 = jobs[0];
    let mm = kernels::MatmulParams {
        k: k as u32,
        m: j0.m,
        n: n as u32,
        out_stride: j0.m,
        out_col0: 0,
        soff: j0.soff,
        has_bias: j0.has_bias,
        tiles_m: tile0,
    };
    let mut push = bytes(&kernels::MatmulQ8Params { mm, qs_off: (n * k / 16) as u32 });
    for jp in &jobs[1..] {
        push.extend_from_slice(bytemuck::bytes_of(jp));
    }
    GemvJobs { res, push, groups: tile0, shape: format!("{shape} n={n}") }
}
