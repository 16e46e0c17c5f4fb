//! Forward steps over one or more sequences on a backend.

use std::collections::HashMap;

use infr_core::{
    Backend, KvDType, KvSpec, LogitAdjust, PlanId, Readback, SeqPages, StepInputs, StepOutput, WeightPlace,
    WeightSource,
};
use infr_models::Model;

use crate::{EngineError, PagePool, ShapeLadder};

mod denoise;
pub use denoise::CanvasDraws;

/// Handle of a sequence in a [`Runner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u32);

/// Sizes of the runner's KV cache and steps.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    /// Longest sequence (prompt + generation) in tokens.
    pub n_ctx: usize,
    /// Sequences that can be live at once; the KV budget is `n_seq * n_ctx` tokens.
    pub n_seq: usize,
    /// Most tokens in one forward step (prefill chunk size).
    pub ubatch: usize,
    /// Tokens per KV page.
    pub page_size: u32,
    pub kv_dtype: KvDType,
    /// Bytes of MoE expert weights kept in device memory; the rest is read from host memory
    /// across the bus. `None`: all of them where they fit beside the other weights and the
    /// KV cache, else as many as fit (see [`crate::placement`]).
    pub expert_cache: Option<u64>,
    /// Whether experts past the expert cache use device slots filled per step (least recently
    /// used out) rather than whole layers' experts on the device (`device.expert_paging`).
    pub expert_paging: bool,
    /// Layers whose weights stay in device memory; the later layers' weights are read from
    /// host memory across the bus. `None`: every layer where the model fits, else as many as
    /// fit once the experts went to host memory.
    pub gpu_layers: Option<usize>,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        Self {
            n_ctx: 4096,
            n_seq: 1,
            ubatch: 512,
            page_size: 256,
            kv_dtype: KvDType::F16,
            expert_cache: None,
            expert_paging: true,
            gpu_layers: None,
        }
    }
}

#[derive(Debug, Default)]
struct SeqState {
    pages: Vec<u32>,
    /// Tokens whose K/V are in the cache.
    tokens: Vec<u32>,
    /// For a model with recurrent layers: the sequence's live state slot (its snapshot
    /// slot is `n_seq` above it), if one was free.
    state_slot: Option<u32>,
    /// Tokens covered by the state saved in the snapshot slot.
    snapshot: Option<usize>,
    /// The windowed layers' ring of pages (at most `ring_pages`), and the page of each of
    /// `pages`' positions in it (`ring[i % ring_pages]`).
    ring: Vec<u32>,
    window_pages: Vec<u32>,
}

/// The memory layout of a runner with `opts` over `model`: the KV spec, the pages of each
/// sequence's window ring and the widest window.
fn kv_spec(model: &Model, opts: &RunnerOptions) -> Result<(KvSpec, usize, usize), EngineError> {
    let pages_per_seq = opts.n_ctx.div_ceil(opts.page_size as usize);
    let n_pages = u32::try_from(pages_per_seq.saturating_mul(opts.n_seq)).map_err(|_| {
        EngineError::Invalid(format!("a context of {} x {} tokens is too large", opts.n_seq, opts.n_ctx))
    })?;
    // A recurrent model keeps, per sequence, a live state slot and one snapshot slot.
    let states = model.state_layers();
    let n_live = if states.is_empty() { 0 } else { opts.n_seq as u32 };
    let layers = model.kv_layers();
    // Windowed layers keep a ring of pages per sequence: the widest window plus a step,
    // with a page of slack for the page boundaries (never more than the context).
    let max_window = layers.iter().filter_map(|l| l.window).max().map_or(0, |w| w as usize);
    let ring_pages = if max_window == 0 {
        0
    } else {
        ((max_window + opts.ubatch - 1).div_ceil(opts.page_size as usize) + 1).min(pages_per_seq)
    };
    let spec = KvSpec {
        layers,
        n_pages,
        page_size: opts.page_size,
        dtype: opts.kv_dtype,
        n_window_pages: (ring_pages * opts.n_seq) as u32,
        states,
        n_state_slots: 2 * n_live,
    };
    Ok((spec, ring_pages, max_window))
}

/// The longest context per sequence (a whole number of pages, at least one page) for `opts`
/// (its `n_ctx` ignored) whose KV cache and recurrent state take at most `budget` bytes, or
/// `None` when not even one page fits.
pub fn max_context(model: &Model, opts: &RunnerOptions, budget: u64) -> Option<usize> {
    let ps = opts.page_size.max(1) as usize;
    let bytes = |pages: usize| {
        let o = RunnerOptions { n_ctx: pages * ps, ..opts.clone() };
        kv_spec(model, &o).map_or(u64::MAX, |(s, _, _)| s.bytes())
    };
    if bytes(1) > budget {
        return None;
    }
    // KV bytes grow with the pages (windowed rings stop growing): bisect.
    let (mut lo, mut hi) = (1usize, 2usize);
    while bytes(hi) <= budget {
        lo = hi;
        hi = hi.saturating_mul(2);
        if hi > (u32::MAX as usize) / ps {
            return Some(lo * ps);
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if bytes(mid) <= budget {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo * ps)
}

/// How many best logits to select for samplers that need `k`: the next power of two, so
/// that the set of selections a backend builds stays small (samplers keep their own `k`).
pub fn top_k_request(k: usize) -> usize {
    k.max(1).next_power_of_two()
}

/// The best logits of one output row as `(token, logit)`, best first ([`infr_core::top_k`]).
pub type Candidates = Vec<(u32, f32)>;

/// A step whose last piece the device is running ([`Runner::submit_step_top_k`]);
/// [`Runner::wait_step`] finishes it.
#[must_use = "a submitted step must be waited for"]
pub struct PendingStep<R> {
    /// Per item, the results of the pieces already finished.
    results: Vec<Vec<R>>,
    /// The last piece: its submission and the item of each output row.
    last: Option<(infr_core::Submitted, Vec<Option<usize>>)>,
    split: SplitRows<R>,
}

/// What a step piece reads back (the owned form of [`Readback`]).
enum StepRead {
    Rows,
    TopK(usize, Vec<Vec<LogitAdjust>>),
}

/// One result per output row from a piece's readback (`n_vocab` wide rows).
type SplitRows<R> = fn(StepOutput, usize) -> Result<Vec<R>, EngineError>;

fn split_rows(out: StepOutput, n_vocab: usize) -> Result<Vec<Vec<f32>>, EngineError> {
    match out {
        StepOutput::Rows(rows) => Ok(rows.chunks(n_vocab.max(1)).map(<[f32]>::to_vec).collect()),
        StepOutput::TopK(_) => Err(EngineError::Invalid("the backend read back candidates, not rows".into())),
    }
}

fn split_top_k(out: StepOutput, _: usize) -> Result<Vec<Candidates>, EngineError> {
    match out {
        StepOutput::TopK(rows) => Ok(rows),
        StepOutput::Rows(_) => Err(EngineError::Invalid("the backend read back rows, not candidates".into())),
    }
}

/// Keep the results of the real output rows (`row_items`, `None` for padding), in row order.
fn place_rows<R>(results: &mut [Vec<R>], rows: Vec<R>, row_items: &[Option<usize>]) {
    for (res, item) in rows.into_iter().zip(row_items) {
        if let Some(i) = item {
            results[*i].push(res);
        }
    }
}

/// Work for one sequence in a step.
#[derive(Debug, Clone, Copy)]
pub struct StepItem<'a> {
    pub seq: SeqId,
    /// Tokens to append to the sequence.
    pub tokens: &'a [u32],
    /// Logits for every token (true) or only the last (false).
    pub all_logits: bool,
}

/// A model loaded on a backend, with its KV page pool and compiled plans.
pub struct Runner {
    model: Model,
    backend: Box<dyn Backend>,
    plans: HashMap<(usize, usize), PlanId>,
    /// Denoiser plans of a diffusion model, by canvas length.
    denoise_plans: HashMap<usize, PlanId>,
    /// The step shapes plans are built for, and how many have been built.
    ladder: ShapeLadder,
    plans_built: usize,
    pool: PagePool,
    seqs: HashMap<SeqId, SeqState>,
    next_seq: u32,
    opts: RunnerOptions,
    /// Free live state slots (empty for a model without recurrent layers).
    free_state_slots: Vec<u32>,
    recurrent: bool,
    /// Pages of the windowed layers (sliding-window attention), reused per sequence as a ring
    /// of `ring_pages` pages, enough for the widest window plus one step.
    window_pool: PagePool,
    ring_pages: usize,
    max_window: usize,
    spec: KvSpec,
    /// The last host-sampled canvas's probabilities (see `denoise_sampled`).
    canvas_mix: Vec<f32>,
}

impl Runner {
    /// Upload the model's weights from `src` to `backend` and allocate the KV cache.
    pub fn new(
        model: Model,
        src: &dyn WeightSource,
        mut backend: Box<dyn Backend>,
        opts: RunnerOptions,
    ) -> Result<Self, EngineError> {
        if opts.n_ctx == 0 || opts.n_seq == 0 || opts.ubatch == 0 || opts.page_size == 0 {
            return Err(EngineError::Invalid("context, sequences, ubatch and page size must be positive".into()));
        }
        // Refuse a model whose graph needs an op the device lacks before uploading anything.
        // A step of any shape holds the same ops with the same parameters, so a one-token
        // graph answers for all of them.
        let denoiser = model.denoiser_graph(1);
        for node in model.graph(1, 1).nodes.iter().chain(denoiser.iter().flat_map(|g| &g.nodes)) {
            if let Err(why) = backend.supports(node) {
                return Err(EngineError::UnsupportedOp {
                    device: backend.device().id.clone(),
                    op: node.op.name(),
                    layer: node.label.clone().unwrap_or_default(),
                    why,
                });
            }
        }
        let (spec, ring_pages, max_window) = kv_spec(&model, &opts)?;
        let n_pages = spec.n_pages;
        let recurrent = !spec.states.is_empty();
        let n_live = if recurrent { opts.n_seq as u32 } else { 0 };
        // The activations of the largest step any serving shape (or a denoising canvas) takes.
        let canvas = model.diffusion().and_then(|d| model.denoiser_graph(d.canvas_length));
        let act = ShapeLadder::new(opts.ubatch, opts.n_seq)
            .serving_shapes()
            .into_iter()
            .map(|(t, o)| model.graph(t, o))
            .chain(canvas)
            .map(|g| backend.plan_bytes(&g))
            .max()
            .unwrap_or(0);
        let host_weights = crate::placement::place_weights(&model, backend.as_ref(), &opts, spec.bytes(), act)?;
        for (id, name) in model.weights.iter() {
            let data = src.data(name).ok_or_else(|| infr_models::ModelError::MissingTensor(name.to_owned()))?;
            let place = host_weights.get(&id).copied().unwrap_or(WeightPlace::Device);
            backend.load_weight_placed(id, &data, place)?;
        }
        backend.init_kv(&spec)?;
        tracing::debug!(
            kv_bytes = spec.bytes(),
            window_ring_pages = ring_pages,
            "memory: {} attention layers ({} windowed), {} state layers",
            spec.layers.len(),
            spec.layers.iter().filter(|l| l.window.is_some()).count(),
            spec.states.len()
        );
        tracing::debug!(n_pages, page_size = opts.page_size, kv_bytes = spec.bytes(), "KV cache allocated");
        Ok(Self {
            model,
            backend,
            plans: HashMap::new(),
            denoise_plans: HashMap::new(),
            ladder: ShapeLadder::new(opts.ubatch, opts.n_seq),
            plans_built: 0,
            pool: PagePool::new(n_pages, opts.page_size),
            seqs: HashMap::new(),
            next_seq: 0,
            opts,
            free_state_slots: (0..n_live).rev().collect(),
            recurrent,
            window_pool: PagePool::new(spec.n_window_pages, spec.page_size),
            ring_pages,
            max_window,
            spec,
            canvas_mix: Vec::new(),
        })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Log how the expert cache did since load (routed experts found in their device slots,
    /// and copied in), where the model has paged experts.
    pub fn log_expert_cache(&mut self) {
        match self.backend.expert_cache_stats() {
            Ok(Some((hits, misses))) => tracing::info!(
                "expert cache: {hits} hits, {misses} misses ({:.1}% of the routed experts were in their slots)",
                100.0 * hits as f64 / (hits + misses).max(1) as f64
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!("expert cache statistics: {e}"),
        }
    }

    /// The backend's device.
    pub fn device(&self) -> &infr_core::DeviceInfo {
        self.backend.device()
    }

    /// Options the runner was built with.
    pub fn options(&self) -> &RunnerOptions {
        &self.opts
    }

    /// Vocabulary size (logit row width).
    pub fn n_vocab(&self) -> usize {
        self.model.info.n_vocab
    }

    /// The memory layout the backend holds (attention layers, window ring, state slots).
    pub fn kv_spec(&self) -> &KvSpec {
        &self.spec
    }

    /// Whether sequences can share KV pages ([`Runner::share_prefix`]): not with recurrent
    /// state or windowed rings, which are per sequence.
    pub fn can_share_prefixes(&self) -> bool {
        !self.recurrent && self.ring_pages == 0
    }

    /// Make `to` hold the first `n` cached tokens of `from` (at most what `from` has): its full
    /// pages are shared (reference-counted; a page is copied before either sequence writes
    /// into a shared one), the partial last page is copied. Returns the tokens `to` now holds.
    pub fn share_prefix(&mut self, from: SeqId, to: SeqId, n: usize) -> Result<usize, EngineError> {
        if !self.can_share_prefixes() || from == to {
            return self.truncate(to, n);
        }
        let ps = self.opts.page_size as usize;
        let src = self.seqs.get(&from).ok_or(EngineError::UnknownSequence(from.0))?;
        let n = n.min(src.tokens.len());
        let (full, tokens) = (src.pages[..n / ps].to_vec(), src.tokens[..n].to_vec());
        let tail = (n % ps != 0).then(|| src.pages[n / ps]);
        self.truncate(to, 0)?;
        let mut pages = full;
        for &p in &pages {
            self.pool.retain(p);
        }
        if let Some(src_page) = tail {
            let Some(p) = self.pool.alloc() else {
                for &p in &pages {
                    self.pool.release(p);
                }
                return Err(EngineError::KvFull { tokens: n });
            };
            self.backend.copy_kv_pages(&[(src_page, p)])?;
            pages.push(p);
        }
        let dst = self.seqs.get_mut(&to).ok_or(EngineError::UnknownSequence(to.0))?;
        dst.pages = pages;
        dst.tokens = tokens;
        dst.snapshot = None;
        Ok(n)
    }

    /// Whether the model keeps per-sequence recurrent state (then a cached prefix can only
    /// be cut back to a snapshot, see [`Runner::truncate`]).
    pub fn is_recurrent(&self) -> bool {
        self.recurrent
    }

    /// Start an empty sequence. A recurrent model has state for `n_seq` live sequences; a
    /// step over a sequence beyond them fails.
    pub fn add_sequence(&mut self) -> SeqId {
        let id = SeqId(self.next_seq);
        self.next_seq += 1;
        let state_slot = self.free_state_slots.pop();
        self.seqs.insert(id, SeqState { state_slot, ..SeqState::default() });
        id
    }

    /// End a sequence and free its pages and state.
    pub fn remove_sequence(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.remove(&id) {
            for p in s.pages {
                self.pool.release(p);
            }
            for p in s.ring {
                self.window_pool.release(p);
            }
            self.free_state_slots.extend(s.state_slot);
        }
    }

    /// Save the sequence's recurrent state as its snapshot (replacing the previous one), so
    /// that a later request sharing this prefix can resume here. A no-op without recurrent
    /// layers.
    pub fn snapshot(&mut self, id: SeqId) -> Result<(), EngineError> {
        let n_live = self.opts.n_seq as u32;
        let s = self.seqs.get_mut(&id).ok_or(EngineError::UnknownSequence(id.0))?;
        if let Some(slot) = s.state_slot {
            self.backend.copy_state(&[(slot, slot + n_live)])?;
            s.snapshot = Some(s.tokens.len());
        }
        Ok(())
    }

    /// The tokens cached for a sequence.
    pub fn seq_tokens(&self, id: SeqId) -> Result<&[u32], EngineError> {
        self.seqs.get(&id).map(|s| s.tokens.as_slice()).ok_or(EngineError::UnknownSequence(id.0))
    }

    /// Forget cached tokens after the first `n` (keeps a reusable prefix); returns how many
    /// are kept. A recurrent state cannot be cut back, so a recurrent model keeps `n` only if
    /// that is all it has, else falls back to its snapshot (if at or below `n`) or to nothing.
    /// Windowed layers keep only their ring: a prefix whose window has been overwritten since
    /// is not kept either.
    pub fn truncate(&mut self, id: SeqId, n: usize) -> Result<usize, EngineError> {
        let ps = self.opts.page_size as usize;
        let n_live = self.opts.n_seq as u32;
        let s = self.seqs.get_mut(&id).ok_or(EngineError::UnknownSequence(id.0))?;
        let len = s.tokens.len();
        let mut n = n.min(len);
        let mut restore = None;
        if self.recurrent && n < len {
            n = match (s.snapshot, s.state_slot) {
                (Some(m), Some(slot)) if m <= n => {
                    restore = Some((slot + n_live, slot));
                    m
                }
                _ => 0,
            };
        }
        // The ring still holds page i if no later page overwrote it: i > last - ring_pages.
        if self.ring_pages > 0 && n > 0 && n < len {
            let oldest = n.saturating_sub(self.max_window) / ps;
            if oldest + self.ring_pages <= (len - 1) / ps {
                n = 0;
            }
        }
        if let Some(pair) = restore.filter(|_| n > 0) {
            self.backend.copy_state(&[pair])?;
        }
        if s.snapshot.is_some_and(|m| m > n) {
            s.snapshot = None;
        }
        if n < len {
            s.tokens.truncate(n);
            let keep = n.div_ceil(ps);
            for p in s.pages.drain(keep..) {
                self.pool.release(p);
            }
            s.window_pages.truncate(keep);
            // The next token goes into a partly kept page: copy it first if another sequence
            // shares it.
            if n % ps != 0 {
                if let Some(&last) = s.pages.last() {
                    if self.pool.ref_count(last) > 1 {
                        let p = self.pool.alloc().ok_or(EngineError::KvFull { tokens: ps })?;
                        self.backend.copy_kv_pages(&[(last, p)])?;
                        self.pool.release(last);
                        *s.pages.last_mut().expect("a last page") = p;
                    }
                }
            }
        }
        Ok(n)
    }

    /// Compile the plans of these `(tokens, outputs)` step shapes now rather than at their
    /// first step (a GPU plan of a new shape can take a tenth of a second to build).
    pub fn prepare_plans(&mut self, shapes: &[(usize, usize)]) -> Result<(), EngineError> {
        for &(n_tokens, n_outputs) in shapes {
            self.plan(n_tokens, n_outputs)?;
        }
        Ok(())
    }

    /// Build the plan of every step shape serving can take (see [`ShapeLadder`]), so that no
    /// request waits for one and the plans' memory is all allocated at start.
    pub fn prepare_serving_plans(&mut self) -> Result<(), EngineError> {
        let shapes = self.ladder.serving_shapes();
        self.prepare_plans(&shapes)?;
        if let Some(d) = self.model.diffusion() {
            let plan = self.denoise_plan(d.canvas_length)?;
            if self.backend.canvas_sampler() {
                self.backend.prepare_canvas_sample(plan)?;
            }
        }
        // The selection passes of greedy and of the default top-k, rounded as the scheduler
        // asks for them (see [`top_k_request`]).
        for s in shapes {
            let plan = self.plan(s.0, s.1)?;
            for k in [1, top_k_request(crate::SamplingParams::default().top_k.max(1) as usize)] {
                self.backend.prepare_top_k(plan, k)?;
            }
        }
        Ok(())
    }

    /// How many step plans have been built so far.
    pub fn plans_built(&self) -> usize {
        self.plans_built
    }

    /// Memory the backend could still allocate, if it knows (see `Backend::memory_available`).
    pub fn memory_available(&self) -> Option<u64> {
        self.backend.memory_available()
    }

    fn plan(&mut self, n_tokens: usize, n_outputs: usize) -> Result<PlanId, EngineError> {
        if let Some(&p) = self.plans.get(&(n_tokens, n_outputs)) {
            return Ok(p);
        }
        let t0 = std::time::Instant::now();
        let graph = self.model.graph(n_tokens, n_outputs);
        let p = self.backend.compile(&graph)?;
        self.plans.insert((n_tokens, n_outputs), p);
        self.plans_built += 1;
        tracing::debug!(n_tokens, n_outputs, ms = t0.elapsed().as_secs_f64() * 1e3, "compiled a step plan");
        Ok(p)
    }

    /// Make sure `seq` has pages for `extra` more tokens.
    fn reserve(&mut self, id: SeqId, extra: usize) -> Result<(), EngineError> {
        let ps = self.opts.page_size as usize;
        let s = self.seqs.get_mut(&id).ok_or(EngineError::UnknownSequence(id.0))?;
        let needed = s.tokens.len() + extra;
        if needed > self.opts.n_ctx {
            return Err(EngineError::ContextFull { needed, n_ctx: self.opts.n_ctx });
        }
        while s.pages.len() * ps < needed {
            if self.ring_pages > 0 {
                let i = s.pages.len() % self.ring_pages;
                if i == s.ring.len() {
                    match self.window_pool.alloc() {
                        Some(p) => s.ring.push(p),
                        None => return Err(EngineError::KvFull { tokens: extra }),
                    }
                }
                s.window_pages.push(s.ring[i]);
            }
            match self.pool.alloc() {
                Some(p) => s.pages.push(p),
                None => return Err(EngineError::KvFull { tokens: extra }),
            }
        }
        Ok(())
    }

    /// One forward step over several sequences. Returns, per item, its logits rows
    /// (`tokens.len()` rows if `all_logits`, else one), each `n_vocab` wide.
    pub fn step(&mut self, items: &[StepItem<'_>]) -> Result<Vec<Vec<f32>>, EngineError> {
        let pending = self.start_step(items, |_| StepRead::Rows, split_rows)?;
        let rows = self.wait_step(pending)?;
        // One row (the usual case) moves as it is; several are joined.
        Ok(rows.into_iter().map(|mut r| if r.len() == 1 { r.pop().unwrap_or_default() } else { r.concat() }).collect())
    }

    /// [`Runner::step`] returning, per item, the `k` largest logits of each of its output
    /// rows (best first, as [`infr_core::top_k`]) after the item's `adjust`ments (its
    /// sampler's logit bias and penalties; items past `adjust` have none) instead of whole
    /// rows: a backend that selects them on its device reads back only these.
    pub fn step_top_k(
        &mut self,
        items: &[StepItem<'_>],
        k: usize,
        adjust: &[Vec<LogitAdjust>],
    ) -> Result<Vec<Vec<Candidates>>, EngineError> {
        let pending = self.submit_step_top_k(items, k, adjust)?;
        self.wait_step(pending)
    }

    /// [`Runner::step_top_k`] up to the device's work: the step's last piece is submitted and
    /// [`Runner::wait_step`] waits for it, so the caller can do host work (admit requests)
    /// while the device runs. The items' tokens count as appended from here on.
    pub fn submit_step_top_k(
        &mut self,
        items: &[StepItem<'_>],
        k: usize,
        adjust: &[Vec<LogitAdjust>],
    ) -> Result<PendingStep<Candidates>, EngineError> {
        self.start_step(
            items,
            |row_items| {
                let rows = row_items.iter().map(|it| it.and_then(|i| adjust.get(i)).cloned().unwrap_or_default());
                StepRead::TopK(k, rows.collect())
            },
            split_top_k,
        )
    }

    /// Wait for a step's last piece and return, per item, the results of its output rows.
    pub fn wait_step<R>(&mut self, pending: PendingStep<R>) -> Result<Vec<Vec<R>>, EngineError> {
        let mut results = pending.results;
        if let Some((submitted, row_items)) = pending.last {
            let out = self.backend.wait(submitted)?;
            let rows = (pending.split)(out, self.n_vocab())?;
            place_rows(&mut results, rows, &row_items);
        }
        Ok(results)
    }

    /// Run the items' rows as steps of the ladder's shapes (see [`ShapeLadder`]): build each
    /// piece's inputs, submit it with the readback `read` asks for (given the item of each
    /// output row of the plan, `None` for padding), record the tokens; every piece but the
    /// last is waited for here, its rows `split` into one result per output row. Returns the
    /// step with the last piece in flight.
    fn start_step<R>(
        &mut self,
        items: &[StepItem<'_>],
        read: impl Fn(&[Option<usize>]) -> StepRead,
        split: SplitRows<R>,
    ) -> Result<PendingStep<R>, EngineError> {
        if items.is_empty() || items.iter().any(|i| i.tokens.is_empty()) {
            return Err(EngineError::Invalid("a step item has no tokens".into()));
        }
        for it in items {
            // A ring holds one step beyond the window: no longer steps.
            if self.ring_pages > 0 && it.tokens.len() > self.opts.ubatch {
                return Err(EngineError::Invalid(format!(
                    "a step of {} tokens for one sequence exceeds the ubatch of {}",
                    it.tokens.len(),
                    self.opts.ubatch
                )));
            }
            self.reserve(it.seq, it.tokens.len())?;
            if self.recurrent && self.seqs[&it.seq].state_slot.is_none() {
                return Err(EngineError::Invalid(format!(
                    "more live sequences than the {} this recurrent model has state for",
                    self.opts.n_seq
                )));
            }
        }
        // Every row of the step: (item, token, position, whether its logits are wanted).
        let mut rows: Vec<(usize, u32, u32, bool)> = Vec::new();
        for (i, it) in items.iter().enumerate() {
            let start = self.seqs[&it.seq].tokens.len();
            for (j, &t) in it.tokens.iter().enumerate() {
                rows.push((i, t, (start + j) as u32, it.all_logits || j + 1 == it.tokens.len()));
            }
        }
        let mut results: Vec<Vec<R>> = items.iter().map(|_| Vec::new()).collect();
        let mut last = None;
        let mut at = 0;
        while at < rows.len() {
            let n = self.ladder.piece(rows.len() - at);
            let piece = &rows[at..at + n];
            at += n;
            // The piece's sequences in order of appearance.
            let mut piece_items: Vec<usize> = Vec::new();
            let mut token_seq = Vec::with_capacity(n);
            for r in piece {
                if piece_items.last() != Some(&r.0) {
                    piece_items.push(r.0);
                }
                token_seq.push(piece_items.len() as u32 - 1);
            }
            let real: Vec<u32> = (0..n as u32).filter(|&r| piece[r as usize].3).collect();
            let n_out = self.ladder.outputs(n, real.len());
            let output_rows: Vec<u32> = if n_out == n {
                (0..n as u32).collect()
            } else {
                let pad = real.last().copied().unwrap_or(n as u32 - 1);
                real.iter().copied().chain(std::iter::repeat(pad)).take(n_out).collect()
            };
            let tokens: Vec<u32> = piece.iter().map(|r| r.1).collect();
            let positions: Vec<u32> = piece.iter().map(|r| r.2).collect();
            let plan = self.plan(n, n_out)?;
            let page_lists: Vec<(Vec<u32>, Vec<u32>, u32)> = piece_items
                .iter()
                .map(|&i| {
                    let s = &self.seqs[&items[i].seq];
                    (s.pages.clone(), s.window_pages.clone(), s.state_slot.unwrap_or(0))
                })
                .collect();
            let seqs: Vec<SeqPages<'_>> = page_lists
                .iter()
                .map(|(p, w, slot)| SeqPages { pages: p, window_pages: w, state_slot: *slot })
                .collect();
            let inputs = StepInputs {
                tokens: &tokens,
                positions: &positions,
                token_seq: &token_seq,
                seqs: &seqs,
                output_rows: &output_rows,
                embed_mix: &[],
                hidden: &[],
            };
            let row_items: Vec<Option<usize>> = (0..n_out)
                .map(|k| {
                    let wanted = if n_out == n { piece[output_rows[k] as usize].3 } else { k < real.len() };
                    wanted.then(|| piece[output_rows[k] as usize].0)
                })
                .collect();
            let wanted = read(&row_items);
            let readback = match &wanted {
                StepRead::Rows => Readback::Rows,
                StepRead::TopK(k, adjust) => Readback::TopK { k: *k, adjust },
            };
            let submitted = self.backend.submit(plan, &inputs, readback)?;
            for r in piece {
                self.seqs.get_mut(&items[r.0].seq).expect("reserved above").tokens.push(r.1);
            }
            if at < rows.len() {
                let out = self.backend.wait(submitted)?;
                place_rows(&mut results, split(out, self.n_vocab())?, &row_items);
            } else {
                last = Some((submitted, row_items));
            }
        }
        Ok(PendingStep { results, last, split })
    }

    /// Tokens per step of a prompt whose every row's logits are wanted: the ubatch, or fewer
    /// where that many rows of logits would pass the backend's largest output
    /// ([`Backend::max_output_bytes`]).
    fn logit_rows_per_step(&self) -> usize {
        let row = (self.n_vocab() * 4).max(1) as u64;
        let fit = self.backend.max_output_bytes().map_or(usize::MAX, |b| (b / row).max(1) as usize);
        self.opts.ubatch.min(fit)
    }

    /// Append `tokens` to one sequence in `ubatch`-sized chunks (smaller where every row's
    /// logits would not fit one output, [`Self::logit_rows_per_step`]); returns the logits of
    /// every token if `all_logits`, else of the last one.
    pub fn prefill(&mut self, seq: SeqId, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>, EngineError> {
        if tokens.is_empty() {
            return Err(EngineError::Invalid("empty prompt".into()));
        }
        let have = self.seq_tokens(seq)?.len();
        if have + tokens.len() > self.opts.n_ctx {
            return Err(EngineError::ContextFull { needed: have + tokens.len(), n_ctx: self.opts.n_ctx });
        }
        let mut out = Vec::new();
        let rows = if all_logits { self.logit_rows_per_step() } else { self.opts.ubatch };
        let chunks: Vec<&[u32]> = tokens.chunks(rows).collect();
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let r = self.step(&[StepItem { seq, tokens: chunk, all_logits }])?;
            if all_logits || i == last {
                out.extend_from_slice(&r[0]);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod max_context_tests {
    use super::*;

    /// The longest context whose KV fits: the next page would not, on a model with windowed
    /// layers (whose rings stop growing) and one without.
    #[test]
    fn max_context_is_the_last_fitting_page() {
        let synth = |name: &str| {
            let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth");
            let w = infr_core::GgufWeights::open(dir.join(format!("{name}.gguf"))).unwrap();
            infr_models::load_model(&w).unwrap()
        };
        for name in ["qwen3", "gemma4"] {
            let model = synth(name);
            let opts = RunnerOptions { n_seq: 2, page_size: 64, ..Default::default() };
            let bytes = |n_ctx: usize| kv_spec(&model, &RunnerOptions { n_ctx, ..opts.clone() }).unwrap().0.bytes();
            for budget in [bytes(64), bytes(640) + 1, bytes(64 * 1000) - 1, 1 << 30] {
                let n = max_context(&model, &opts, budget).unwrap();
                assert_eq!(n % 64, 0);
                assert!(bytes(n) <= budget && bytes(n + 64) > budget, "{name}: {n} tokens for {budget} bytes");
            }
            assert_eq!(max_context(&model, &opts, bytes(64) - 1), None);
        }
    }
}
