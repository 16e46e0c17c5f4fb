//! The `Backend` trait: what a compute device must offer to run model graphs.

use crate::graph::{Graph, WeightId};
use crate::weights::WeightData;

/// Errors a backend reports.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The device lacks memory for an allocation.
    #[error("out of memory on {device}: {what} needs {bytes} bytes")]
    OutOfMemory { device: String, what: String, bytes: u64 },
    /// An op or weight type this backend cannot run.
    #[error("{backend}: unsupported: {what}")]
    Unsupported { backend: String, what: String },
    /// Inputs that do not fit the plan or the cache (programming or request error).
    #[error("invalid step input: {0}")]
    InvalidInput(String),
    /// A device-level failure (driver error, lost device).
    #[error("device error: {0}")]
    Device(String),
}

/// What a device is and can do; printed by `infr devices`.
#[derive(Debug, Clone, Default)]
pub struct DeviceInfo {
    /// `CPU` or `Vulkan0`, `Vulkan1`…
    pub id: String,
    /// Human-readable device name.
    pub name: String,
    /// Device memory in bytes (host RAM for the CPU).
    pub memory_bytes: u64,
    /// Capability lines (`avx2`, `coopmat f16 16x16x16`, `subgroup 32`…).
    pub features: Vec<String>,
}

/// Element type of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDType {
    F32,
    F16,
    Q8_0,
}

/// Shape of one layer's K and V cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayerSpec {
    pub n_kv_head: u32,
    pub head_dim_k: u32,
    pub head_dim_v: u32,
    /// A sliding-window (or chunked) layer sees only the last `window` positions: its cache
    /// lives in the window pages (see [`KvSpec::n_window_pages`], [`SeqPages::window_pages`]),
    /// which the engine reuses as a ring, so it does not grow with the context.
    pub window: Option<u32>,
}

/// One layer of per-sequence recurrent state (a DeltaNet layer's conv window or its state
/// matrices): a fixed block of f32 per state slot, whatever the sequence length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLayerSpec {
    /// f32 values per slot.
    pub floats: u32,
}

/// The model's memory: attention layers × pages of `page_size` token slots, and recurrent
/// state layers × `n_state_slots` fixed-size slots (one per live sequence plus snapshots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvSpec {
    pub layers: Vec<KvLayerSpec>,
    pub n_pages: u32,
    pub page_size: u32,
    pub dtype: KvDType,
    /// Pages of the windowed layers' caches (same page size).
    pub n_window_pages: u32,
    /// Recurrent state layers, in the order ops name them (`state` index).
    pub states: Vec<StateLayerSpec>,
    pub n_state_slots: u32,
}

impl KvSpec {
    /// Bytes the cache takes.
    pub fn bytes(&self) -> u64 {
        let kv: f64 = self.layers.iter().map(|l| self.layer_bytes(l) as f64).sum();
        let states: u64 = self.states.iter().map(|l| l.floats as u64 * 4).sum::<u64>() * self.n_state_slots as u64;
        kv as u64 + states
    }

    /// Bytes of one layer's K and V.
    pub fn layer_bytes(&self, l: &KvLayerSpec) -> u64 {
        let per_elem = match self.dtype {
            KvDType::F32 => 4.0,
            KvDType::F16 => 2.0,
            // ggml's blocks take 34 bytes per 32; the Vulkan layout keeps f32 scales (36):
            // budgets use the larger.
            KvDType::Q8_0 => 36.0 / 32.0,
        };
        let pages = if l.window.is_some() { self.n_window_pages } else { self.n_pages };
        let slots = pages as f64 * self.page_size as f64;
        (slots * (l.n_kv_head * (l.head_dim_k + l.head_dim_v)) as f64 * per_elem) as u64
    }
}

/// The memory of one sequence in a step: its physical KV pages (`pages[i]` holds positions
/// `i*page_size .. (i+1)*page_size`) and its recurrent state slot (read unless the step
/// starts the sequence at position 0, then overwritten).
#[derive(Debug, Clone, Copy)]
pub struct SeqPages<'a> {
    pub pages: &'a [u32],
    /// The windowed layers' pages for the same positions (as long as `pages`; a ring repeats).
    pub window_pages: &'a [u32],
    pub state_slot: u32,
}

/// Per-step inputs; the plan is reused across steps of the same shape.
#[derive(Debug, Clone, Copy)]
pub struct StepInputs<'a> {
    /// Token ids, one per row.
    pub tokens: &'a [u32],
    /// Position of each token in its sequence.
    pub positions: &'a [u32],
    /// Index into `seqs` for each token.
    pub token_seq: &'a [u32],
    /// The sequences in this step.
    pub seqs: &'a [SeqPages<'a>],
    /// Which token rows `OutputRows` keeps, in output order.
    pub output_rows: &'a [u32],
    /// For `Op::MixEmbed`: one distribution over the vocabulary per token row
    /// (`n_tokens * n_vocab`), or empty for none (the op then yields zeros).
    pub embed_mix: &'a [f32],
    /// For `Op::Input`: the activations a previous pipeline stage computed (row-major, the
    /// input node's shape), or empty for a graph without one.
    pub hidden: &'a [f32],
}

impl StepInputs<'_> {
    /// Check the arrays against each other and the KV geometry.
    pub fn validate(&self, n_tokens: usize, n_outputs: usize, kv: &KvSpec) -> Result<(), BackendError> {
        let (page_size, n_pages) = (kv.page_size, kv.n_pages);
        let bad = |m: String| Err(BackendError::InvalidInput(m));
        if self.tokens.len() != n_tokens || self.positions.len() != n_tokens || self.token_seq.len() != n_tokens {
            return bad(format!("expected {n_tokens} tokens/positions/seq ids"));
        }
        if self.output_rows.len() != n_outputs || self.output_rows.iter().any(|&r| r as usize >= n_tokens) {
            return bad(format!("expected {n_outputs} output rows below {n_tokens}"));
        }
        if self.embed_mix.len() % n_tokens != 0 {
            return bad(format!("embedding mixture of {} values is not {n_tokens} rows", self.embed_mix.len()));
        }
        for (t, (&s, &p)) in self.token_seq.iter().zip(self.positions).enumerate() {
            let Some(seq) = self.seqs.get(s as usize) else { return bad(format!("token {t}: sequence {s} missing")) };
            let page = (p / page_size) as usize;
            if page >= seq.pages.len() {
                return bad(format!("token {t}: position {p} beyond the sequence's {} pages", seq.pages.len()));
            }
        }
        if self.seqs.iter().any(|s| s.pages.iter().any(|&p| p >= n_pages)) {
            return bad(format!("page index beyond the cache's {n_pages} pages"));
        }
        if kv.layers.iter().any(|l| l.window.is_some()) {
            let nw = kv.n_window_pages;
            if self.seqs.iter().any(|s| s.window_pages.len() < s.pages.len() || s.window_pages.iter().any(|&p| p >= nw))
            {
                return bad(format!("window pages missing or beyond the cache's {nw}"));
            }
        }
        if !kv.states.is_empty() {
            self.validate_runs()?;
        }
        Ok(())
    }

    /// Check what recurrent ops need: each sequence's rows contiguous and consecutive in
    /// position (they walk them in order). Part of [`StepInputs::validate`] when the cache
    /// has state layers.
    fn validate_runs(&self) -> Result<(), BackendError> {
        let bad = |m: String| Err(BackendError::InvalidInput(m));
        for t in 1..self.tokens.len() {
            let (s, p) = (self.token_seq[t], self.positions[t]);
            if s == self.token_seq[t - 1] {
                if p != self.positions[t - 1] + 1 {
                    return bad(format!("token {t}: positions of a sequence must be consecutive"));
                }
            } else if self.token_seq[..t].contains(&s) {
                return bad(format!("token {t}: the rows of sequence {s} are not contiguous"));
            }
        }
        Ok(())
    }
}

/// A compiled plan, owned by the backend that compiled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlanId(pub u32);

/// What a diffusion denoising step's device sampler needs besides the step inputs (see
/// [`Backend::execute_canvas_sample`]).
#[derive(Debug, Clone, Copy)]
pub struct CanvasSampleInputs<'a> {
    /// The step's temperature (logits are divided by it).
    pub temperature: f32,
    /// One uniform in `[0, 1)` per output row: the row's draw by inverse CDF.
    pub uniforms: &'a [f32],
    /// Condition this step on the probabilities the previous canvas sample of the same plan
    /// left on the device, instead of `StepInputs::embed_mix` (which must then be empty).
    pub reuse_mix: bool,
}

/// One canvas row as a device sampler reads it back: all the diffusion sampler and its
/// stopping rule need, instead of the row's logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CanvasDraw {
    /// Entropy of the row's softmax at the step's temperature (nats).
    pub entropy: f32,
    /// First index of the row's largest logit.
    pub argmax: u32,
    /// The token drawn with the row's uniform.
    pub sample: u32,
}

/// What [`Backend::submit`] reads back when its step finishes.
#[derive(Debug, Clone, Copy)]
pub enum Readback<'a> {
    /// Whole output rows, as [`Backend::execute`] returns them.
    Rows,
    /// Each output row's `k` best after its `adjust`ments, as [`Backend::execute_top_k`]
    /// returns them.
    TopK { k: usize, adjust: &'a [Vec<crate::LogitAdjust>] },
}

/// A finished step's results ([`Backend::wait`]).
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutput {
    /// Output rows, row-major f32 (`n_outputs × cols`).
    Rows(Vec<f32>),
    /// Per output row, its best `(column, value)` pairs, best first.
    TopK(Vec<Vec<(u32, f32)>>),
}

/// A step [`Backend::submit`] started; [`Backend::wait`] takes it back for the results.
#[derive(Debug)]
#[must_use = "a submitted step must be waited for"]
pub struct Submitted {
    /// The plan that runs.
    pub plan: PlanId,
    /// The results, for a backend that finished the step before `submit` returned.
    pub done: Option<StepOutput>,
    /// Adjustments and `k` of a top-k readback the backend selects on the host at `wait`.
    pub host_top_k: Option<(usize, Vec<Vec<crate::LogitAdjust>>)>,
    /// The step's output rows.
    pub rows: usize,
}

/// Where a weight's bytes live on a backend with memory of its own (see
/// [`Backend::load_weight_placed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightPlace {
    /// The device's own memory (the default).
    Device,
    /// Host memory the device reads across the bus: MoE experts beyond the expert cache.
    Host,
    /// A 3-D tensor of `experts` MoE experts in host memory, with a device cache of `slots`
    /// of them that the backend fills with the experts each step routes to, evicting the
    /// least recently used (the expert cache, `device.expert_cache`). A backend without one
    /// treats it as [`WeightPlace::Host`].
    Paged { experts: u32, slots: u32 },
}

/// A compute device that runs model graphs.
///
/// The lifecycle is: `load_weight` for every weight the model uses, `init_kv` once, then
/// `compile` a graph per step shape and `execute` it many times.
pub trait Backend: Send {
    /// The device this backend runs on.
    fn device(&self) -> &DeviceInfo;

    /// Whether this backend can run `node` (its op, output type and shape) as the graph
    /// gives it: `Err` says why not. The engine asks before loading a model and refuses it
    /// up front, naming the op, instead of failing at the first step. The default runs every
    /// op whose output is f32 ([`f32_outputs_only`]).
    fn supports(&self, node: &crate::Node) -> Result<(), String> {
        f32_outputs_only(node)
    }

    /// Bytes of memory this backend could still allocate for weights and the KV cache, if it
    /// knows (host RAM available for the CPU; the device-local heap less what the backend
    /// holds, within its memory limit, for a GPU). The engine refuses a context that cannot
    /// fit before allocating anything.
    fn memory_available(&self) -> Option<u64> {
        None
    }

    /// Device memory a plan of `graph` needs besides the weights and the KV cache, at least
    /// (the engine counts the largest step's in its up-front check): by default the graph's
    /// activations ([`Graph::activation_bytes`]).
    fn plan_bytes(&self, graph: &Graph) -> u64 {
        graph.activation_bytes()
    }

    /// Most bytes one node's output may take, where the backend has such a limit (a GPU's
    /// largest storage binding: 128 MiB on lavapipe and on drivers at Vulkan's minimum). The
    /// engine splits a prompt whose every row's logits are wanted into steps whose logits fit:
    /// 512 rows of a 262,144-token vocabulary are 512 MiB.
    fn max_output_bytes(&self) -> Option<u64> {
        None
    }

    /// Bytes of host memory the KV cache may overflow into when [`Backend::memory_available`]
    /// is too little for it (a GPU that reads KV layers across the bus); `None` where the
    /// cache cannot spill.
    fn kv_spill_available(&self) -> Option<u64> {
        None
    }

    /// Upload (and repack) one weight under `id`.
    fn load_weight(&mut self, id: WeightId, weight: &WeightData) -> Result<(), BackendError>;

    /// [`Backend::load_weight`] into `place`; a backend whose memory is host memory (the CPU)
    /// has one place.
    fn load_weight_placed(
        &mut self,
        id: WeightId,
        weight: &WeightData,
        place: WeightPlace,
    ) -> Result<(), BackendError> {
        let _ = place;
        self.load_weight(id, weight)
    }

    /// How often the expert cache's slots held a routed expert and how often one was copied
    /// in since the weights were loaded ([`WeightPlace::Paged`]; hits, misses), if it has
    /// any paged experts.
    fn expert_cache_stats(&mut self) -> Result<Option<(u64, u64)>, BackendError> {
        Ok(None)
    }

    /// Bytes of host memory this backend could place weights in ([`WeightPlace::Host`]);
    /// `None` where host memory is the only memory.
    fn weight_host_available(&self) -> Option<u64> {
        None
    }

    /// Allocate the KV cache (replacing any previous one).
    fn init_kv(&mut self, spec: &KvSpec) -> Result<(), BackendError>;

    /// Compile a step graph into a reusable plan.
    fn compile(&mut self, graph: &Graph) -> Result<PlanId, BackendError>;

    /// Run a plan; returns the output tensor (`n_outputs × cols`, row-major f32).
    fn execute(&mut self, plan: PlanId, inputs: &StepInputs<'_>) -> Result<Vec<f32>, BackendError>;

    /// Start a step and return before it finishes, so that the host can prepare the next
    /// one (admit requests, plan prompt chunks) while the device runs it; [`Backend::wait`]
    /// returns its results. One step at a time: anything else that runs plans waits for it
    /// first or refuses. The default runs the step to completion here.
    fn submit(&mut self, plan: PlanId, inputs: &StepInputs<'_>, read: Readback<'_>) -> Result<Submitted, BackendError> {
        let done = match read {
            Readback::Rows => StepOutput::Rows(self.execute(plan, inputs)?),
            Readback::TopK { k, adjust } => StepOutput::TopK(self.execute_top_k(plan, inputs, k, adjust)?),
        };
        Ok(Submitted { plan, done: Some(done), host_top_k: None, rows: inputs.output_rows.len() })
    }

    /// Wait for a step [`Backend::submit`] started and return its results.
    fn wait(&mut self, step: Submitted) -> Result<StepOutput, BackendError> {
        step.done.ok_or_else(|| BackendError::InvalidInput("waiting for a step this backend did not start".into()))
    }

    /// Run a plan and return, per output row, the `k` largest values with their column
    /// indices as [`crate::top_k`] orders them, after the row's `adjust`ments (a sampler's
    /// logit bias and penalties; rows past `adjust` have none): all that greedy or top-k
    /// sampling reads. A backend that selects them on its device reads back only these; the
    /// default selects from [`Backend::execute`]'s rows.
    fn execute_top_k(
        &mut self,
        plan: PlanId,
        inputs: &StepInputs<'_>,
        k: usize,
        adjust: &[Vec<crate::LogitAdjust>],
    ) -> Result<Vec<Vec<(u32, f32)>>, BackendError> {
        let out = self.execute(plan, inputs)?;
        Ok(crate::top_k_rows_adjusted(out, inputs.output_rows.len(), k, adjust))
    }

    /// Build now whatever [`Backend::execute_top_k`] with this `k` would build on first use
    /// (a GPU's selection passes and buffers), so that serving allocates nothing new.
    fn prepare_top_k(&mut self, plan: PlanId, k: usize) -> Result<(), BackendError> {
        let _ = (plan, k);
        Ok(())
    }

    /// Whether [`Backend::execute_canvas_sample`] runs (a device-side diffusion sampler).
    fn canvas_sampler(&self) -> bool {
        false
    }

    /// Run a denoising plan (every token row an output row, logits over the vocabulary of
    /// its `Op::MixEmbed` table) and sample each row on the device: the softmax at the
    /// temperature is kept on the device as the next step's mixture, and only each row's
    /// entropy, argmax and draw are read back. Backends without it answer `Unsupported`.
    fn execute_canvas_sample(
        &mut self,
        plan: PlanId,
        inputs: &StepInputs<'_>,
        sample: &CanvasSampleInputs<'_>,
    ) -> Result<Vec<CanvasDraw>, BackendError> {
        let _ = (plan, inputs, sample);
        Err(BackendError::Unsupported { backend: self.device().id.clone(), what: "device canvas sampling".into() })
    }

    /// Build now whatever [`Backend::execute_canvas_sample`] would build on its first use of
    /// `plan` (a GPU's sampler passes and buffers), so that serving allocates nothing new.
    fn prepare_canvas_sample(&mut self, plan: PlanId) -> Result<(), BackendError> {
        let _ = plan;
        Ok(())
    }

    /// Copy whole KV pages `src → dst` in every layer (copy-on-write of shared prefixes).
    fn copy_kv_pages(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError>;

    /// Copy recurrent state slots `src → dst` in every state layer (snapshots for prefix
    /// reuse, forks). A backend without state layers has nothing to copy.
    fn copy_state(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        if pairs.is_empty() {
            Ok(())
        } else {
            Err(BackendError::Unsupported { backend: self.device().id.clone(), what: "recurrent state".into() })
        }
    }
}

/// The type rule of a backend whose activations are all f32 (both backends today): a node of
/// another output type is refused, naming it.
pub fn f32_outputs_only(node: &crate::Node) -> Result<(), String> {
    match node.dtype {
        crate::DType::F32 => Ok(()),
        other => {
            Err(format!("{} output of type {} (this backend holds f32 activations only)", node.op.name(), other.name()))
        }
    }
}

/// A field of `/proc/meminfo` (`MemTotal`, `MemAvailable`) in bytes, where the system has one.
pub fn host_meminfo_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}
