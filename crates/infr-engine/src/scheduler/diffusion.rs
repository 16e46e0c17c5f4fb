//! Serving a block-diffusion model: requests run one at a time, each a whole
//! [`generate_diffusion`] on its slot, and every committed canvas reaches the client at once
//! (its tokens as consecutive [`Event::Token`]s). Sampling settings other than the seed do not
//! apply (the model's temperature schedule and entropy-bound sampler decide), nor do token
//! constraints or log-probabilities, which need one distribution per emitted token.

use std::time::Instant;

use super::Scheduler;
use crate::diffusion::{generate_diffusion, DiffusionEvent, DiffusionOptions, SeededNoise};
use crate::request::{Event, Finish, RequestError};

impl Scheduler {
    /// Run the earliest admitted request of a diffusion model to its end.
    pub(super) fn step_diffusion(&mut self) {
        let Some(i) = (0..self.slots.len())
            .filter(|&i| self.slots[i].active.is_some())
            .min_by_key(|&i| self.slots[i].active.as_ref().map_or(u64::MAX, |a| a.order))
        else {
            return;
        };
        let Some(params) = self.runner.model().diffusion() else { return };
        let n_ctx = self.runner.options().n_ctx;
        let seq = self.slots[i].seq;
        let Some(a) = self.slots[i].active.as_mut() else { return };
        if a.constraint.is_some() || a.logprobs.is_some() {
            let what = if a.constraint.is_some() {
                "constrained output (grammars, forced tool calls)"
            } else {
                "log-probabilities"
            };
            if let Some(a) = self.free(i) {
                a.sink
                    .send(Event::Error(RequestError::InvalidSampling(format!("a diffusion model cannot give {what}"))));
            }
            return;
        }
        let prompt = a.history.clone();
        // Whole canvases in what is left of the context.
        let room = crate::diffusion::canvas_room(n_ctx, prompt.len(), params.canvas_length);
        if room == 0 {
            if let Some(a) = self.free(i) {
                a.sink.send(Event::Error(RequestError::PromptTooLong { tokens: prompt.len(), n_ctx }));
            }
            return;
        }
        let budget = a.max_tokens.unwrap_or(room).min(room);
        let opts = DiffusionOptions { params, max_new_tokens: budget.max(1), eos: a.stop_ids.clone() };
        let mut noise = SeededNoise::from_seed_or_clock(a.sampler.params().seed);
        // The slot's cache cannot be reused: canvases leave uncommitted K/V behind.
        if let Err(e) = self.runner.truncate(seq, 0) {
            if let Some(a) = self.free(i) {
                a.sink.send(Event::Error(RequestError::Engine(e.to_string())));
            }
            return;
        }
        let Some(a) = self.slots[i].active.as_mut() else { return };
        let (sink, deadline) = (&a.sink, a.deadline);
        let (mut sent, mut finish, mut closed) = (0usize, None, false);
        let mut first = None;
        let result = generate_diffusion(&mut self.runner, seq, &prompt, &opts, &mut noise, |ev| {
            if let DiffusionEvent::Block { tokens, .. } = ev {
                first.get_or_insert_with(Instant::now);
                for &t in tokens.iter() {
                    if opts.eos.contains(&t) {
                        finish = Some(Finish::Stop);
                        break;
                    }
                    if sent == budget {
                        finish = Some(Finish::Length);
                        break;
                    }
                    if !sink.send(Event::Token(t)) {
                        closed = true;
                        return false;
                    }
                    sent += 1;
                }
            }
            !(sink.is_closed() || deadline.is_some_and(|d| Instant::now() >= d))
        });
        let a = self.slots[i].active.as_mut().expect("the slot is still active");
        a.generated = sent;
        a.prefilled = a.prompt_len;
        // Timings split at the end of the prompt pass: the rest is the canvases' time.
        a.first_token = match &result {
            Ok(out) => Some(a.admitted + std::time::Duration::from_secs_f64(out.prompt_secs)),
            Err(_) => first,
        };
        if closed || a.sink.is_closed() {
            self.free(i);
            return;
        }
        match result {
            Err(e) => {
                if let Some(a) = self.free(i) {
                    a.sink.send(Event::Error(RequestError::Engine(e.to_string())));
                }
            }
            Ok(out) => {
                if a.deadline.is_some_and(|d| Instant::now() >= d) {
                    if let Some(a) = self.free(i) {
                        a.sink.send(Event::Error(RequestError::Timeout));
                    }
                    return;
                }
                let steps: usize = out.steps.iter().sum();
                tracing::info!(
                    tokens = sent,
                    canvases = out.steps.len(),
                    steps,
                    tps = sent as f64 / out.gen_secs.max(1e-9),
                    "diffusion reply"
                );
                let finish = finish.unwrap_or(if out.hit_eos {
                    Finish::Stop
                } else if sent >= budget && budget == room {
                    Finish::ContextFull
                } else {
                    Finish::Length
                });
                self.finish(i, finish);
            }
        }
    }
}
