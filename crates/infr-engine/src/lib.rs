//! The engine: drives a [`Model`](infr_models::Model) on a [`Backend`](infr_core::Backend).
//!
//! [`Runner`] owns the backend, the compiled plans (one per step shape) and the KV page pool,
//! and runs forward steps over one or many sequences at once. [`Sampler`] turns logits into
//! tokens with llama.cpp's sampler chain.

mod diffusion;
mod error;
pub mod oracle;
mod pages;
pub mod pipeline;
pub mod placement;
mod request;
mod runner;
mod sampling;
mod scheduler;
mod shapes;
pub mod sharded;

pub use diffusion::{
    accept_by_entropy, canvas_stats, denoise_canvas, draw_rows, generate_diffusion, temperature, Canvas, DenoiseStep,
    DiffusionEvent, DiffusionOptions, DiffusionOutput, NoiseSource, SeededNoise, StoppingRule,
};
pub use error::EngineError;
pub use pages::PagePool;
pub use pipeline::PipelineBackend;
pub use request::{
    event_channel, ChannelSink, Done, Event, EventReceiver, EventSink, Finish, Request, RequestError, StartInfo,
    Timings, TokenConstraint, TokenLogprob, Usage, MAX_LOGPROBS,
};
pub use runner::{max_context, Candidates, CanvasDraws, PendingStep, Runner, RunnerOptions, SeqId, StepItem};
pub use sampling::{argmax as argmax_token, Sampler, SamplingParams};
pub use scheduler::{
    slot_runner_options, Scheduler, SchedulerHandle, SchedulerOptions, SchedulerStats, SchedulerThread,
};
pub use shapes::ShapeLadder;
pub use sharded::ShardedBackend;
