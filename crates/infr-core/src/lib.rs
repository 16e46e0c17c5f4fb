//! The contract between models and backends.
//!
//! A model step (a prefill chunk, a decode batch, or both mixed) is described as a [`Graph`]:
//! an ordered list of coarse semantic ops over typed tensors of up to four dimensions (today's
//! ops read and write f32 `[rows, cols]` matrices, rows are tokens). A [`Backend`] compiles a graph once into a plan and replays it with new
//! [`StepInputs`] (token ids, positions, KV page tables). Weights come from a
//! [`WeightSource`] and are uploaded once, in whatever layout the backend prefers.

mod backend;
mod graph;
mod params;
mod profile;
mod top_k;
mod weights;

pub use backend::{
    f32_outputs_only, host_meminfo_bytes, Backend, BackendError, CanvasDraw, CanvasSampleInputs, DeviceInfo, KvDType,
    KvLayerSpec, KvSpec, PlanId, Readback, SeqPages, StateLayerSpec, StepInputs, StepOutput, Submitted, WeightPlace,
};
pub use graph::{DType, Graph, GraphBuilder, Node, Op, Shape, TensorId, WeightId};
pub use infr_gguf::TensorData;
pub use infr_quant::GgmlType;
pub use params::{
    Activation, AttnParams, Conv1dParams, DeltaNetParams, ExpertGateUp, MoeGating, MoeParams, RopeMode, RopeParams,
    RopeScaling, SharedExpert, TempScaleParams, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT,
};
pub use profile::{prof_by_shape, prof_enabled, set_profiling, OpLabel, Profile, ProfileOnDrop};
pub use top_k::{adjust_rows, top_k, top_k_rows, top_k_rows_adjusted, LogitAdjust, MAX_LOGIT_ADJUST};
pub use weights::{GgufWeights, WeightData, WeightInfo, WeightSource};
