//! Continuous batching: a thread that owns the [`Runner`] and serves many requests at once.
//!
//! **Slots and KV.** The runner is built with `n_seq = parallel` sequences of `n_ctx` tokens
//! each, one per slot (see [`slot_runner_options`]: the total context is divided across the
//! slots, like llama.cpp's `-np`). Every slot owns its pages, so raising `parallel` never needs
//! more KV memory than one slot of the full context did, and a slot can never run out of pages.
//!
//! **A step.** Each forward step carries one token for every decoding slot plus prompt chunks
//! of the slots still processing their prompts, earliest admitted first, up to a budget of
//! prompt tokens. While anything is decoding, the budget is at most
//! [`SchedulerOptions::prefill_chunk`] tokens (so prompts add a bounded delay to the other
//! streams); with nothing decoding it is the runner's full `ubatch`.
//!
//! **Prefix reuse.** A slot keeps its cached tokens after its request ends. A new request goes
//! to the idle slot whose cache shares the longest prefix with its prompt (ties: the least
//! recently used), which is truncated to that prefix; only the rest of the prompt is computed.
//! When a busy slot holds a longer prefix, the idle slot shares that slot's KV pages instead.
//! A multi-turn chat thus computes only its new turn.
//!
//! **Queue, cancellation, timeouts.** Requests wait in a bounded channel (full: [`RequestError::QueueFull`])
//! and are taken only when a slot is idle. A request whose [`EventSink`] is closed is dropped
//! before the next step and its slot freed; one past its deadline gets [`RequestError::Timeout`].

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::request::{
    ChannelSink, Done, Event, EventReceiver, EventSink, Finish, RequestError, StartInfo, Timings, TokenConstraint,
    Usage,
};
use crate::sampling::Scores;
use crate::{event_channel, EngineError, Request, Runner, RunnerOptions, Sampler, SeqId, StepItem, TokenLogprob};

/// Scheduler settings (the slot count and context come from the runner's options).
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// Requests that may wait for a slot before [`RequestError::QueueFull`].
    pub queue_capacity: usize,
    /// Largest prefill chunk in a step that also decodes other sequences.
    pub prefill_chunk: usize,
    /// Timeout of requests that set none.
    pub default_timeout: Option<Duration>,
    /// Build every step shape's plan at start (serving: no request waits for one and device
    /// memory does not grow); off, plans are built as shapes first come (`infr run`).
    pub prepare_plans: bool,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        Self {
            queue_capacity: 64,
            prefill_chunk: 256,
            default_timeout: Some(Duration::from_secs(600)),
            prepare_plans: true,
        }
    }
}

/// Runner options for `parallel` slots sharing `n_ctx_total` tokens of KV: each slot gets
/// `n_ctx_total / parallel` tokens of context.
pub fn slot_runner_options(n_ctx_total: usize, parallel: usize, base: RunnerOptions) -> RunnerOptions {
    let parallel = parallel.max(1);
    RunnerOptions { n_ctx: (n_ctx_total / parallel).max(1), n_seq: parallel, ..base }
}

/// Counters shared between the scheduler thread and its handles.
#[derive(Debug, Default)]
struct Shared {
    active: AtomicUsize,
    queued: AtomicUsize,
    computed: AtomicU64,
    steps: AtomicU64,
    /// Step plans built since start, and the backend's free memory (refreshed when a plan
    /// is built, when a request ends and every [`MEMORY_REFRESH_STEPS`] steps; `u64::MAX` if
    /// unknown).
    plans_built: AtomicUsize,
    memory_available: AtomicU64,
    /// Shutting down: new and queued requests are refused, running ones go on.
    draining: AtomicBool,
    /// The grace period is over: running requests end now.
    abort: AtomicBool,
}

/// A snapshot of the scheduler's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Slots in total.
    pub slots: usize,
    /// Slots serving a request.
    pub active: usize,
    /// Requests waiting for a slot.
    pub queued: usize,
    /// Tokens run through the model so far (prompt chunks and decoded tokens).
    pub tokens_computed: u64,
    /// Forward steps run so far.
    pub steps: u64,
    /// Step plans built so far (all at start, see [`crate::ShapeLadder`]).
    pub plans_built: usize,
    /// Memory the backend could still allocate (device memory for a GPU), if it knows.
    pub memory_available: Option<u64>,
}

/// Prompts of at least this many tokens log their prefill progress.
const LONG_PROMPT: usize = 4096;

/// Steps between refreshes of [`SchedulerStats::memory_available`].
const MEMORY_REFRESH_STEPS: u64 = 64;

struct Queued {
    req: Request,
    sink: Box<dyn EventSink>,
    constraint: Option<Box<dyn TokenConstraint>>,
    submitted: Instant,
}

/// A cheap, cloneable handle to submit requests to a [`Scheduler`] thread.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: mpsc::SyncSender<Queued>,
    shared: Arc<Shared>,
    thread: SchedulerThread,
    slots: usize,
    n_ctx: usize,
    n_vocab: usize,
    queue_capacity: usize,
}

/// The scheduler thread, to wait for at shutdown: it owns the backend, and a process that
/// exits while it still tears a GPU device down can crash in the driver.
#[derive(Clone, Debug, Default)]
pub struct SchedulerThread(Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>);

impl SchedulerThread {
    /// Wait up to `timeout` for the thread to end (it ends once every [`SchedulerHandle`] is
    /// dropped and its requests are done); true if it has ended.
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let Ok(mut slot) = self.0.lock() else { return false };
        let Some(h) = slot.take() else { return true };
        while !h.is_finished() {
            if Instant::now() >= deadline {
                *slot = Some(h);
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        h.join().is_ok()
    }
}

impl std::fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerHandle").field("slots", &self.slots).field("n_ctx", &self.n_ctx).finish()
    }
}

impl SchedulerHandle {
    /// The scheduler thread, to wait for at shutdown.
    pub fn thread(&self) -> SchedulerThread {
        self.thread.clone()
    }

    /// Context of one slot, in tokens (the longest prompt + generation of a request).
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Number of slots (requests served at once).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Vocabulary size of the model.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Current load.
    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            slots: self.slots,
            active: self.shared.active.load(Ordering::Relaxed),
            queued: self.shared.queued.load(Ordering::Relaxed),
            tokens_computed: self.shared.computed.load(Ordering::Relaxed),
            steps: self.shared.steps.load(Ordering::Relaxed),
            plans_built: self.shared.plans_built.load(Ordering::Relaxed),
            memory_available: Some(self.shared.memory_available.load(Ordering::Relaxed)).filter(|&m| m != u64::MAX),
        }
    }

    /// Whether the scheduler is shutting down (refusing new requests).
    pub fn is_draining(&self) -> bool {
        self.shared.draining.load(Ordering::SeqCst)
    }

    /// Start shutting down: requests submitted from now on and those still queued are
    /// refused with [`RequestError::ShutDown`]; running ones go on until they finish or
    /// [`Self::end_running`].
    pub fn drain(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
    }

    /// End every running request now with [`Finish::ShutDown`] (after a drain's grace
    /// period), so each client gets a final event.
    pub fn end_running(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
        self.shared.abort.store(true, Ordering::SeqCst);
    }

    /// Check a request without queueing it.
    pub fn validate(&self, req: &Request) -> Result<(), RequestError> {
        if req.prompt.is_empty() {
            return Err(RequestError::EmptyPrompt);
        }
        if req.prompt.len() >= self.n_ctx {
            return Err(RequestError::PromptTooLong { tokens: req.prompt.len(), n_ctx: self.n_ctx });
        }
        if let Some(&id) = req.prompt.iter().find(|&&t| t as usize >= self.n_vocab) {
            return Err(RequestError::InvalidToken { id, n_vocab: self.n_vocab });
        }
        if let Some(&(id, _)) = req.sampling.logit_bias.iter().find(|(t, _)| *t as usize >= self.n_vocab) {
            return Err(RequestError::InvalidToken { id, n_vocab: self.n_vocab });
        }
        if req.logprobs.is_some_and(|n| n > crate::MAX_LOGPROBS) {
            return Err(RequestError::InvalidSampling(format!(
                "at most {} log-probability alternatives per token",
                crate::MAX_LOGPROBS
            )));
        }
        req.sampling.validate().map_err(|e| RequestError::InvalidSampling(e.to_string()))
    }

    /// Queue a request; its events go to `sink`. Fails at once when the request is invalid,
    /// the queue is full or the scheduler has stopped.
    pub fn submit(&self, req: Request, sink: impl EventSink) -> Result<(), RequestError> {
        self.enqueue(req, sink, None)
    }

    /// [`submit`](Self::submit) with a [`TokenConstraint`] that masks every sampled token's
    /// logits; generation also ends when the constraint is finished.
    pub fn submit_constrained(
        &self,
        req: Request,
        constraint: Box<dyn TokenConstraint>,
        sink: impl EventSink,
    ) -> Result<(), RequestError> {
        self.enqueue(req, sink, Some(constraint))
    }

    fn enqueue(
        &self,
        req: Request,
        sink: impl EventSink,
        constraint: Option<Box<dyn TokenConstraint>>,
    ) -> Result<(), RequestError> {
        self.validate(&req)?;
        if self.shared.draining.load(Ordering::SeqCst) {
            return Err(RequestError::ShutDown);
        }
        // Count first so the scheduler's decrement can never run before the increment.
        self.shared.queued.fetch_add(1, Ordering::Relaxed);
        let q = Queued { req, sink: Box::new(sink), constraint, submitted: Instant::now() };
        match self.tx.try_send(q) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                Err(match e {
                    TrySendError::Full(_) => RequestError::QueueFull { capacity: self.queue_capacity },
                    TrySendError::Disconnected(_) => RequestError::ShutDown,
                })
            }
        }
    }

    /// [`submit`](Self::submit) with a blocking [`event_channel`]; dropping the receiver cancels.
    pub fn submit_channel(&self, req: Request) -> Result<EventReceiver, RequestError> {
        let (sink, rx): (ChannelSink, EventReceiver) = event_channel();
        self.submit(req, sink)?;
        Ok(rx)
    }
}

struct Active {
    sink: Box<dyn EventSink>,
    sampler: Sampler,
    constraint: Option<Box<dyn TokenConstraint>>,
    prompt_len: usize,
    /// Prompt followed by the generated tokens (penalties look at it).
    history: Vec<u32>,
    /// Prompt tokens in the KV cache (prefill progress).
    prefilled: usize,
    cached: usize,
    /// Sampled token not yet run through the model.
    pending: Option<u32>,
    generated: usize,
    max_tokens: Option<usize>,
    stop_ids: Vec<u32>,
    /// Alternatives per token to report with its log-probability, if asked.
    logprobs: Option<usize>,
    deadline: Option<Instant>,
    submitted: Instant,
    admitted: Instant,
    first_token: Option<Instant>,
    order: u64,
}

struct Slot {
    seq: SeqId,
    last_used: u64,
    active: Option<Active>,
}

/// What a slot contributes to a step.
enum Part {
    Decode(u32),
    Prefill(std::ops::Range<usize>),
}

mod diffusion;

/// The scheduler thread's state.
pub struct Scheduler {
    runner: Runner,
    slots: Vec<Slot>,
    rx: mpsc::Receiver<Queued>,
    shared: Arc<Shared>,
    opts: SchedulerOptions,
    clock: u64,
    /// Every handle is gone: no request can arrive any more.
    handles_gone: bool,
}

impl Scheduler {
    /// Start the scheduler thread over `runner` (one slot per runner sequence) and return
    /// its handle. The thread ends once every handle is dropped and its requests are done.
    pub fn spawn(mut runner: Runner, opts: SchedulerOptions) -> Result<SchedulerHandle, EngineError> {
        if opts.queue_capacity == 0 || opts.prefill_chunk == 0 {
            return Err(EngineError::Invalid("queue capacity and prefill chunk must be positive".into()));
        }
        let ro = runner.options().clone();
        if ro.n_seq > ro.ubatch {
            return Err(EngineError::Invalid(format!("{} slots need a ubatch of at least as many tokens", ro.n_seq)));
        }
        // Every step shape serving takes is built up front: no request waits for a plan
        // build, and the plans' memory does not grow with the prompt lengths seen.
        if opts.prepare_plans {
            let t0 = Instant::now();
            runner.prepare_serving_plans()?;
            tracing::info!("built {} step plans in {:.0} ms", runner.plans_built(), t0.elapsed().as_secs_f64() * 1e3);
        }
        let (tx, rx) = mpsc::sync_channel(opts.queue_capacity);
        let shared = Arc::new(Shared::default());
        shared.plans_built.store(runner.plans_built(), Ordering::Relaxed);
        shared.memory_available.store(runner.memory_available().unwrap_or(u64::MAX), Ordering::Relaxed);
        let slots = (0..ro.n_seq).map(|_| Slot { seq: runner.add_sequence(), last_used: 0, active: None }).collect();
        let thread = SchedulerThread::default();
        let handle = SchedulerHandle {
            tx,
            shared: shared.clone(),
            thread: thread.clone(),
            slots: ro.n_seq,
            n_ctx: ro.n_ctx,
            n_vocab: runner.n_vocab(),
            queue_capacity: opts.queue_capacity,
        };
        let mut s = Scheduler { runner, slots, rx, shared, opts, clock: 0, handles_gone: false };
        let h = std::thread::Builder::new()
            .name("infr-scheduler".into())
            .spawn(move || {
                s.run();
                s.runner.log_expert_cache();
                drop(s);
                tracing::debug!("scheduler: stopped, its backend released");
            })
            .map_err(|e| EngineError::Invalid(format!("cannot start the scheduler thread: {e}")))?;
        if let Ok(mut slot) = thread.0.lock() {
            *slot = Some(h);
        }
        Ok(handle)
    }

    fn n_active(&self) -> usize {
        self.slots.iter().filter(|s| s.active.is_some()).count()
    }

    fn run(&mut self) {
        loop {
            if self.shared.draining.load(Ordering::SeqCst) {
                self.refuse_queued();
            }
            if self.shared.abort.load(Ordering::SeqCst) {
                for i in 0..self.slots.len() {
                    self.finish(i, Finish::ShutDown);
                }
            }
            if !self.handles_gone {
                self.handles_gone = self.admit();
            }
            self.reap();
            if self.n_active() == 0 {
                if self.handles_gone {
                    tracing::debug!("scheduler: every handle dropped, stopping");
                    return;
                }
                continue;
            }
            self.step();
        }
    }

    /// Answer every queued request with [`RequestError::ShutDown`].
    fn refuse_queued(&mut self) {
        while let Ok(q) = self.rx.try_recv() {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            q.sink.send(Event::Error(RequestError::ShutDown));
        }
    }

    /// Take queued requests while a slot is idle; blocks when nothing is running. Returns
    /// true once every handle is gone.
    fn admit(&mut self) -> bool {
        while self.slots.iter().any(|s| s.active.is_none()) {
            let q = if self.n_active() > 0 {
                match self.rx.try_recv() {
                    Ok(q) => q,
                    Err(TryRecvError::Empty) => return false,
                    Err(TryRecvError::Disconnected) => return true,
                }
            } else {
                match self.rx.recv() {
                    Ok(q) => q,
                    Err(_) => return true,
                }
            };
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            if self.shared.draining.load(Ordering::SeqCst) {
                q.sink.send(Event::Error(RequestError::ShutDown));
                continue;
            }
            self.start(q);
        }
        false
    }

    /// Put a request in the idle slot with the longest cached prefix of its prompt.
    fn start(&mut self, q: Queued) {
        let now = Instant::now();
        let deadline = q.req.timeout.or(self.opts.default_timeout).map(|t| q.submitted + t);
        if q.sink.is_closed() {
            return;
        }
        if deadline.is_some_and(|d| now >= d) {
            q.sink.send(Event::Error(RequestError::Timeout));
            return;
        }
        let prompt = &q.req.prompt;
        let mut best: Option<(usize, usize, u64)> = None;
        for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| s.active.is_none()) {
            let lcp = self.runner.seq_tokens(s.seq).map_or(0, |t| common_prefix(t, prompt));
            if best.is_none_or(|(_, bl, bu)| lcp > bl || (lcp == bl && s.last_used < bu)) {
                best = Some((i, lcp, s.last_used));
            }
        }
        let Some((i, lcp, _)) = best else { return };
        // A busy slot may hold a longer prefix (an agent's next turn while its sub-agent runs):
        // share its full pages instead of computing them again.
        let page = self.runner.options().page_size as usize;
        let donor = self
            .slots
            .iter()
            .filter(|s| s.active.is_some())
            .map(|s| (s.seq, self.runner.seq_tokens(s.seq).map_or(0, |t| common_prefix(t, prompt))))
            .max_by_key(|&(_, l)| l)
            .filter(|&(_, l)| l >= lcp + page && self.runner.can_share_prefixes());
        // Always compute at least the last prompt token: its logits give the first token. A
        // diffusion model keeps nothing: its canvases leave uncommitted K/V behind.
        let want = match donor {
            _ if self.runner.model().diffusion().is_some() => 0,
            Some((_, l)) => l,
            None => lcp,
        }
        .min(prompt.len() - 1);
        let kept = match donor {
            Some((from, _)) => self.runner.share_prefix(from, self.slots[i].seq, want),
            None => self.runner.truncate(self.slots[i].seq, want),
        };
        let cached = match kept {
            Ok(kept) => kept,
            Err(e) => {
                q.sink.send(Event::Error(RequestError::Engine(e.to_string())));
                return;
            }
        };
        let info =
            StartInfo { slot: i, prompt_tokens: prompt.len(), cached_tokens: cached, queue_wait: now - q.submitted };
        if !q.sink.send(Event::Started(info)) {
            return;
        }
        tracing::debug!(slot = i, prompt = prompt.len(), cached, "request started");
        self.clock += 1;
        self.slots[i].active = Some(Active {
            sink: q.sink,
            sampler: Sampler::new(q.req.sampling),
            constraint: q.constraint,
            prompt_len: prompt.len(),
            history: q.req.prompt,
            prefilled: cached,
            cached,
            pending: None,
            generated: 0,
            max_tokens: q.req.max_tokens,
            stop_ids: q.req.stop_ids,
            logprobs: q.req.logprobs,
            deadline,
            submitted: q.submitted,
            admitted: now,
            first_token: None,
            order: self.clock,
        });
        self.shared.active.fetch_add(1, Ordering::Relaxed);
    }

    /// Free the slot of `i` (its cache stays for prefix reuse).
    fn free(&mut self, i: usize) -> Option<Active> {
        let a = self.slots[i].active.take()?;
        self.clock += 1;
        self.slots[i].last_used = self.clock;
        self.shared.active.fetch_sub(1, Ordering::Relaxed);
        let free = self.runner.memory_available().unwrap_or(u64::MAX);
        self.shared.memory_available.store(free, Ordering::Relaxed);
        Some(a)
    }

    /// Drop cancelled requests and fail those past their deadline.
    fn reap(&mut self) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let Some(a) = &self.slots[i].active else { continue };
            if a.sink.is_closed() {
                tracing::debug!(slot = i, "request cancelled by its client");
                self.free(i);
            } else if a.deadline.is_some_and(|d| now >= d) {
                if let Some(a) = self.free(i) {
                    a.sink.send(Event::Error(RequestError::Timeout));
                }
            }
        }
    }

    fn finish(&mut self, i: usize, finish: Finish) {
        let Some(a) = self.free(i) else { return };
        let now = Instant::now();
        let first = a.first_token.unwrap_or(now);
        let done = Done {
            finish,
            usage: Usage { prompt_tokens: a.prompt_len, cached_tokens: a.cached, completion_tokens: a.generated },
            timings: Timings {
                queue_wait: a.admitted - a.submitted,
                prompt_time: first - a.admitted,
                decode_time: now - first,
            },
        };
        a.sink.send(Event::Done(done));
    }

    /// Compose and run one forward step, then sample and deliver tokens.
    fn step(&mut self) {
        if self.runner.model().diffusion().is_some() {
            self.step_diffusion();
            return;
        }
        let ubatch = self.runner.options().ubatch;
        let mut parts: Vec<(usize, Part)> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(t) = s.active.as_ref().and_then(|a| a.pending) {
                parts.push((i, Part::Decode(t)));
            }
        }
        let n_decode = parts.len();
        let mut prefilling: Vec<(usize, &Active)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.active.as_ref().map(|a| (i, a)))
            .filter(|(_, a)| a.prefilled < a.prompt_len)
            .collect();
        prefilling.sort_by_key(|(_, a)| a.order);
        // Prompt chunks fill the step's budget, earliest admitted first: many requests arriving
        // together start in a few steps instead of one step each.
        let mut budget =
            if n_decode == 0 { ubatch } else { self.opts.prefill_chunk.min(ubatch.saturating_sub(n_decode)) }.max(1);
        for (i, a) in prefilling {
            if budget == 0 {
                break;
            }
            let end = (a.prefilled + budget).min(a.prompt_len);
            budget -= end - a.prefilled;
            parts.push((i, Part::Prefill(a.prefilled..end)));
        }
        if parts.is_empty() {
            return;
        }
        let tokens: Vec<Vec<u32>> = parts
            .iter()
            .map(|(i, p)| match p {
                Part::Decode(t) => vec![*t],
                Part::Prefill(r) => {
                    self.slots[*i].active.as_ref().map_or(Vec::new(), |a| a.history[r.clone()].to_vec())
                }
            })
            .collect();
        let items: Vec<StepItem<'_>> = parts
            .iter()
            .zip(&tokens)
            .map(|((i, _), t)| StepItem { seq: self.slots[*i].seq, tokens: t, all_logits: false })
            .collect();
        let n_tokens: usize = tokens.iter().map(Vec::len).sum();
        // Every sampler that draws this step can do it from a few best logits after its logit
        // bias and penalties (no grammar, no log-probabilities): select them on the device
        // instead of reading whole rows back.
        let mut top_k = Some(1usize);
        let mut adjust: Vec<Vec<infr_core::LogitAdjust>> = Vec::with_capacity(parts.len());
        for (i, part) in &parts {
            let mut rows_adjust = Vec::new();
            if let Some(a) = self.slots[*i].active.as_ref() {
                let draws = match part {
                    Part::Decode(_) => true,
                    Part::Prefill(r) => r.end >= a.prompt_len,
                };
                if draws {
                    // Log-probabilities need the whole row (its log-sum-exp).
                    let need = if a.constraint.is_some() || a.logprobs.is_some() {
                        None
                    } else {
                        a.sampler.selection(&a.history)
                    };
                    top_k = top_k.zip(need.as_ref()).map(|(k, n)| k.max(n.0));
                    rows_adjust = need.map(|n| n.1).unwrap_or_default();
                }
            }
            adjust.push(rows_adjust);
        }
        let t0 = std::time::Instant::now();
        let result = match top_k {
            Some(k) => self.runner.submit_step_top_k(&items, crate::runner::top_k_request(k), &adjust).and_then(|p| {
                // While the device runs the step, requests that arrived take idle slots (not
                // in this step): their prefix matching and page copies overlap it.
                if !self.handles_gone && !self.shared.draining.load(Ordering::SeqCst) {
                    self.handles_gone = self.admit();
                }
                let rows = self.runner.wait_step(p)?;
                rows.into_iter().map(|r| Scores::top(r.into_iter().next())).collect::<Result<Vec<_>, _>>()
            }),
            None => self.runner.step(&items).map(|rows| rows.into_iter().map(Scores::Full).collect()),
        };
        tracing::trace!(
            sequences = items.len(),
            decode = n_decode,
            tokens = n_tokens,
            ms = t0.elapsed().as_secs_f64() * 1e3,
            "step"
        );
        let steps = self.shared.steps.fetch_add(1, Ordering::Relaxed) + 1;
        let built = self.runner.plans_built();
        if built != self.shared.plans_built.swap(built, Ordering::Relaxed) || steps % MEMORY_REFRESH_STEPS == 0 {
            let free = self.runner.memory_available().unwrap_or(u64::MAX);
            self.shared.memory_available.store(free, Ordering::Relaxed);
        }
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("forward step failed: {e}");
                for (i, _) in &parts {
                    if let Some(a) = self.free(*i) {
                        a.sink.send(Event::Error(RequestError::Engine(e.to_string())));
                    }
                }
                return;
            }
        };
        self.shared.computed.fetch_add(n_tokens as u64, Ordering::Relaxed);
        for ((i, part), row) in parts.into_iter().zip(logits) {
            let seq = self.slots[i].seq;
            let Some(a) = self.slots[i].active.as_mut() else { continue };
            match part {
                Part::Decode(_) => a.pending = None,
                Part::Prefill(r) => {
                    a.prefilled = r.end;
                    if a.prefilled < a.prompt_len {
                        // Long prompts (agent system prompts run to tens of thousands of
                        // tokens) say where they are.
                        if a.prompt_len >= LONG_PROMPT {
                            let s = a.admitted.elapsed().as_secs_f64();
                            tracing::info!(
                                slot = i,
                                "prefill {}/{} tokens ({:.0} t/s)",
                                a.prefilled,
                                a.prompt_len,
                                (a.prefilled - a.cached) as f64 / s.max(1e-3)
                            );
                        }
                        continue;
                    }
                    // A recurrent model saves its state at the end of the prompt: the next
                    // turn of the conversation extends it even if it re-renders the reply.
                    if let Err(e) = self.runner.snapshot(seq) {
                        tracing::warn!("state snapshot failed: {e}");
                    }
                    a.first_token = Some(Instant::now());
                    if a.max_tokens == Some(0) {
                        self.finish(i, Finish::Length);
                        continue;
                    }
                }
            }
            let tok = match row {
                Scores::Top(top) => a.sampler.sample_top(&top),
                Scores::Full(mut row) => {
                    if let Some(c) = a.constraint.as_mut() {
                        c.mask(&mut row);
                    }
                    let tok = a.sampler.sample(&row, &a.history);
                    if let Some(n) = a.logprobs.filter(|_| !a.stop_ids.contains(&tok)) {
                        a.sink.send(Event::Logprob(TokenLogprob::from_logits(&row, tok, n)));
                    }
                    tok
                }
            };
            if let Some(c) = a.constraint.as_mut() {
                c.accept(tok);
            }
            if let Some(why) = a.constraint.as_ref().and_then(|c| c.error()) {
                tracing::warn!(slot = i, "output constraint failed: {why}");
                if let Some(a) = self.free(i) {
                    a.sink.send(Event::Error(RequestError::Constraint(why)));
                }
                continue;
            }
            self.on_token(i, tok);
            let done =
                self.slots[i].active.as_ref().and_then(|a| a.constraint.as_ref()).is_some_and(|c| c.is_finished());
            if done {
                self.finish(i, Finish::Stop);
            }
        }
    }

    /// Deliver a sampled token and decide whether the slot goes on.
    fn on_token(&mut self, i: usize, tok: u32) {
        let n_ctx = self.runner.options().n_ctx;
        let Some(a) = self.slots[i].active.as_mut() else { return };
        if a.stop_ids.contains(&tok) {
            self.finish(i, Finish::Stop);
            return;
        }
        a.generated += 1;
        a.history.push(tok);
        if !a.sink.send(Event::Token(tok)) {
            self.free(i);
            return;
        }
        // A finished constraint (a forced call that just closed) is a complete reply even
        // when it used the last allowed token.
        if a.constraint.as_ref().is_some_and(|c| c.is_finished()) {
            self.finish(i, Finish::Stop);
        } else if a.max_tokens.is_some_and(|m| a.generated >= m) {
            self.finish(i, Finish::Length);
        } else if a.history.len() > n_ctx {
            self.finish(i, Finish::ContextFull);
        } else {
            a.pending = Some(tok);
        }
    }
}

/// Length of the common prefix of two token lists (how much of a slot's cache a prompt reuses).
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
