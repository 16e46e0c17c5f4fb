//! What a client hands the [`Scheduler`](crate::Scheduler) and what it gets back.
//!
//! A [`Request`] carries prompt token ids and generation limits; the scheduler answers on
//! the request's own [`EventSink`] with [`Event`]s: one [`Event::Started`] when the request
//! gets a slot, one [`Event::Token`] per generated token, then [`Event::Done`] or
//! [`Event::Error`]. A sink whose receiver is gone cancels its request at the next step.

use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::SamplingParams;

/// One generation request.
#[derive(Debug, Clone)]
pub struct Request {
    /// Prompt token ids (already templated and tokenized, BOS included where the model wants it).
    pub prompt: Vec<u32>,
    /// Sampling settings; each request gets its own (seeded) [`Sampler`](crate::Sampler).
    pub sampling: SamplingParams,
    /// Most tokens to generate (`None`: until a stop token or the slot's context is full).
    pub max_tokens: Option<usize>,
    /// Token ids that end generation (end-of-generation tokens); they are not emitted.
    pub stop_ids: Vec<u32>,
    /// Longest time from submission to completion (`None`: the scheduler's default).
    pub timeout: Option<Duration>,
    /// Report each generated token's log-probability and this many alternatives
    /// ([`Event::Logprob`] before each [`Event::Token`]); `None`: do not.
    pub logprobs: Option<usize>,
}

/// Most alternatives a request may ask for with [`Request::logprobs`] (OpenAI's limit).
pub const MAX_LOGPROBS: usize = 20;

/// A generated token's log-probability under the model (log-softmax of its logits, after a
/// grammar's mask, before sampling settings), and the most likely tokens with theirs.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// Best first.
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// From a logits row: the chosen token's and the `n` best log-probabilities.
    pub fn from_logits(row: &[f32], token: u32, n: usize) -> Self {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row.iter().map(|&l| ((l - max) as f64).exp()).sum();
        let lse = max as f64 + sum.ln();
        let lp = |l: f32| (l as f64 - lse) as f32;
        let top = infr_core::top_k(row, n).into_iter().map(|(t, l)| (t, lp(l))).collect();
        Self { token, logprob: row.get(token as usize).map_or(f32::NEG_INFINITY, |&l| lp(l)), top }
    }
}

impl Request {
    /// A greedy request with no limit but the context, stopping on `stop_ids`.
    pub fn new(prompt: Vec<u32>, stop_ids: Vec<u32>) -> Self {
        Self { prompt, sampling: SamplingParams::greedy(), max_tokens: None, stop_ids, timeout: None, logprobs: None }
    }
}

/// Why a request's generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop token id was sampled (not emitted).
    Stop,
    /// `max_tokens` tokens were generated.
    Length,
    /// The slot's context is full.
    ContextFull,
    /// The server shut down before the request finished (its grace period ran out).
    ShutDown,
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose K/V were already in the slot's cache (not computed again).
    pub cached_tokens: usize,
    /// Tokens generated (emitted as [`Event::Token`]).
    pub completion_tokens: usize,
}

/// Where a request's time went.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    /// From submission until the request got a slot.
    pub queue_wait: Duration,
    /// From getting a slot until the first token was sampled (prompt processing).
    pub prompt_time: Duration,
    /// From the first token until the end.
    pub decode_time: Duration,
}

impl Timings {
    /// Generated tokens per second after the first one (which comes out of the prefill).
    pub fn decode_tps(&self, completion_tokens: usize) -> f64 {
        completion_tokens.saturating_sub(1) as f64 / self.decode_time.as_secs_f64().max(1e-9)
    }
}

/// Sent once when a request gets a slot.
#[derive(Debug, Clone, Copy)]
pub struct StartInfo {
    /// The slot serving it.
    pub slot: usize,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the slot's cache.
    pub cached_tokens: usize,
    /// Time spent waiting in the queue.
    pub queue_wait: Duration,
}

/// The end of a successful request.
#[derive(Debug, Clone, Copy)]
pub struct Done {
    /// Why generation ended.
    pub finish: Finish,
    /// Token counts.
    pub usage: Usage,
    /// Timings.
    pub timings: Timings,
}

/// What the scheduler sends back for a request.
#[derive(Debug, Clone)]
pub enum Event {
    /// The request got a slot.
    Started(StartInfo),
    /// The log-probabilities of the token that follows (when the request asked for them).
    Logprob(TokenLogprob),
    /// A generated token.
    Token(u32),
    /// Generation ended normally; no more events follow.
    Done(Done),
    /// The request failed; no more events follow.
    Error(RequestError),
}

/// Why a request was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The queue of waiting requests is full (HTTP 503).
    #[error("the server is busy: {capacity} requests are already waiting")]
    QueueFull {
        /// Queue capacity.
        capacity: usize,
    },
    /// The prompt does not fit one slot's context (HTTP 400).
    #[error("the prompt has {tokens} tokens but the context holds {n_ctx} (including at least one generated token)")]
    PromptTooLong {
        /// Prompt tokens.
        tokens: usize,
        /// Context of one slot.
        n_ctx: usize,
    },
    /// The prompt has no tokens (HTTP 400).
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A prompt token id is outside the vocabulary (HTTP 400).
    #[error("token id {id} is outside the vocabulary ({n_vocab} tokens)")]
    InvalidToken {
        /// The bad id.
        id: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// Sampling settings were rejected (HTTP 400).
    #[error("{0}")]
    InvalidSampling(String),
    /// The request ran past its timeout.
    #[error("the request timed out")]
    Timeout,
    /// The model failed while running the request.
    #[error("inference failed: {0}")]
    Engine(String),
    /// The output constraint (`response_format`, a forced tool call) reached a point where no
    /// token can follow.
    #[error("the output constraint cannot be satisfied: {0}")]
    Constraint(String),
    /// The scheduler has stopped or is shutting down (queued requests are refused).
    #[error("the server is shutting down")]
    ShutDown,
}

/// Where the scheduler delivers a request's events.
pub trait EventSink: Send + 'static {
    /// Deliver an event; `false` when the receiver is gone (the request is then cancelled).
    fn send(&self, event: Event) -> bool;
    /// Whether the receiver is gone (checked before every step, so a client that
    /// disconnects during a long prefill is noticed too).
    fn is_closed(&self) -> bool;
}

/// Limits which tokens a request may sample (constrained decoding, e.g. a grammar), given to
/// [`SchedulerHandle::submit_constrained`](crate::SchedulerHandle::submit_constrained).
pub trait TokenConstraint: Send + 'static {
    /// Set the logits of tokens that may not come next to negative infinity. Called before
    /// each token is sampled; leave `logits` alone when unsure (never forbid every token).
    fn mask(&mut self, logits: &mut [f32]);
    /// The token that was sampled.
    fn accept(&mut self, token: u32);
    /// Whether the constraint is complete: generation ends there (as at a stop token).
    fn is_finished(&self) -> bool;
    /// Why the constraint cannot go on, if it cannot (it forbids every token, or its engine
    /// failed): the request then ends with [`RequestError::Constraint`] instead of going on
    /// unconstrained or stopping as if it had finished normally.
    fn error(&self) -> Option<String> {
        None
    }
}

/// The sending half of [`event_channel`].
#[derive(Debug, Clone)]
pub struct ChannelSink {
    tx: mpsc::Sender<Event>,
    alive: Weak<()>,
}

impl EventSink for ChannelSink {
    fn send(&self, event: Event) -> bool {
        self.tx.send(event).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.alive.strong_count() == 0
    }
}

/// The receiving half of [`event_channel`]; dropping it cancels the request.
#[derive(Debug)]
pub struct EventReceiver {
    rx: mpsc::Receiver<Event>,
    _alive: Arc<()>,
}

impl EventReceiver {
    /// Wait for the next event; `None` once the scheduler dropped the request's sink.
    pub fn recv(&self) -> Option<Event> {
        self.rx.recv().ok()
    }

    /// Wait at most `timeout` for the next event.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Event, mpsc::RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
    }

    /// The next event if one is ready.
    pub fn try_recv(&self) -> Result<Event, mpsc::TryRecvError> {
        self.rx.try_recv()
    }
}

/// A blocking channel for a request's events (for threads and tests; an async server
/// implements [`EventSink`] over its own channel).
pub fn event_channel() -> (ChannelSink, EventReceiver) {
    let (tx, rx) = mpsc::channel();
    let alive = Arc::new(());
    (ChannelSink { tx, alive: Arc::downgrade(&alive) }, EventReceiver { rx, _alive: alive })
}
