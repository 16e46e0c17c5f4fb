//! From a prepared request to a stream of text pieces: submits to the scheduler, decodes tokens
//! to UTF-8 text incrementally, applies stop strings, and logs one line per request.
//!
//! The pieces go through a bounded channel; when its receiver is dropped (the HTTP client went
//! away) the driver drops the scheduler's event receiver, which cancels the sequence at the
//! next step and frees its slot.

use std::time::{Duration, Instant};

use infr_engine::{Event, EventSink, Finish, StartInfo, TokenConstraint};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::errors::ApiError;
use crate::params::Prepared;
use crate::state::SharedState;
use crate::stop::StopMatcher;

/// Why a generation ended, in API terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishKind {
    /// End-of-generation token.
    Stop,
    /// Token limit or full context.
    Length,
    /// A stop string matched (the string).
    StopSequence(String),
}

impl FinishKind {
    /// OpenAI's `finish_reason`.
    pub fn openai(&self) -> &'static str {
        match self {
            FinishKind::Stop | FinishKind::StopSequence(_) => "stop",
            FinishKind::Length => "length",
        }
    }

    /// Anthropic's `stop_reason`.
    pub fn anthropic(&self) -> &'static str {
        match self {
            FinishKind::Stop => "end_turn",
            FinishKind::Length => "max_tokens",
            FinishKind::StopSequence(_) => "stop_sequence",
        }
    }
}

/// Token counts and timings of a finished generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Why it ended.
    pub finish: FinishKind,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the cache.
    pub cached_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Time waiting for a slot.
    pub queue_wait: Duration,
    /// Prompt processing time.
    pub prompt_time: Duration,
    /// Time from the first to the last token.
    pub decode_time: Duration,
}

impl Outcome {
    /// Generated tokens per second after the first.
    pub fn decode_tps(&self) -> f64 {
        self.completion_tokens.saturating_sub(1) as f64 / self.decode_time.as_secs_f64().max(1e-9)
    }
}

/// What the driver hands the route.
#[derive(Debug, Clone)]
pub enum Piece {
    /// The request got a slot.
    Started(StartInfo),
    /// Text to send (never empty).
    Text(String),
    /// The log-probabilities of a generated token (when the request asked for them); its
    /// text follows in a later `Text`.
    Logprob(LogprobEntry),
    /// Normal end; nothing follows.
    End(Outcome),
    /// Failure; nothing follows.
    Failed(ApiError),
}

/// A generated token's log-probability and its best alternatives, with token texts.
#[derive(Debug, Clone, PartialEq)]
pub struct LogprobEntry {
    pub token: TokenText,
    pub logprob: f32,
    pub top: Vec<(TokenText, f32)>,
}

/// A token's text: its bytes and their lossy UTF-8 form.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenText {
    pub text: String,
    pub bytes: Vec<u8>,
}

impl LogprobEntry {
    fn new(tok: &infr_tokenizer::Tokenizer, lp: infr_engine::TokenLogprob) -> Self {
        let text = |id: u32| {
            let bytes = tok.token_to_piece(id);
            TokenText { text: String::from_utf8_lossy(&bytes).into_owned(), bytes }
        };
        Self {
            token: text(lp.token),
            logprob: lp.logprob,
            top: lp.top.into_iter().map(|(t, l)| (text(t), l)).collect(),
        }
    }

    /// OpenAI chat's `logprobs.content[i]`.
    pub fn openai_chat(&self) -> Value {
        let one = |t: &TokenText, l: f32| json!({ "token": t.text, "logprob": l, "bytes": t.bytes });
        let mut v = one(&self.token, self.logprob);
        v["top_logprobs"] = self.top.iter().map(|(t, l)| one(t, *l)).collect();
        v
    }
}

/// OpenAI completions' `logprobs` object for `entries`, whose text starts at `offset` bytes.
pub fn completions_logprobs(entries: &[LogprobEntry], mut offset: usize) -> Value {
    let mut text_offset = Vec::with_capacity(entries.len());
    for e in entries {
        text_offset.push(offset);
        offset += e.token.text.len();
    }
    json!({
        "tokens": entries.iter().map(|e| e.token.text.clone()).collect::<Vec<_>>(),
        "token_logprobs": entries.iter().map(|e| e.logprob).collect::<Vec<_>>(),
        "top_logprobs": entries.iter().map(|e| {
            e.top.iter().map(|(t, l)| (t.text.clone(), json!(l))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": text_offset,
    })
}

/// The scheduler's events into a tokio channel.
struct TokioSink(mpsc::UnboundedSender<Event>);

impl EventSink for TokioSink {
    fn send(&self, event: Event) -> bool {
        self.0.send(event).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// Submit `prep` and start the driver task. Refusals (queue full, prompt too long, bad
/// sampling) come back at once, before any response is started.
pub fn start(state: &SharedState, route: &'static str, prep: Prepared) -> Result<mpsc::Receiver<Piece>, ApiError> {
    start_constrained(state, route, prep, None)
}

/// [`start`] with an optional constraint on the tokens sampled (a tool-call grammar).
pub fn start_constrained(
    state: &SharedState,
    route: &'static str,
    prep: Prepared,
    constraint: Option<Box<dyn TokenConstraint>>,
) -> Result<mpsc::Receiver<Piece>, ApiError> {
    let (etx, erx) = mpsc::unbounded_channel();
    let prompt_tokens = prep.request.prompt.len();
    match constraint {
        Some(c) => state.sched.submit_constrained(prep.request, c, TokioSink(etx))?,
        None => state.sched.submit(prep.request, TokioSink(etx))?,
    }
    let (tx, rx) = mpsc::channel(64);
    let st = state.clone();
    tokio::spawn(drive(st, route, erx, tx, prep.stops, prompt_tokens));
    Ok(rx)
}

/// Run a generation to its end and return the whole text (non-streaming responses).
pub async fn collect(rx: mpsc::Receiver<Piece>) -> Result<(String, Outcome), ApiError> {
    collect_logprobs(rx).await.map(|(t, o, _)| (t, o))
}

/// [`collect`], also returning the tokens' log-probabilities (when asked for).
pub async fn collect_logprobs(mut rx: mpsc::Receiver<Piece>) -> Result<(String, Outcome, Vec<LogprobEntry>), ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(p) = rx.recv().await {
        match p {
            Piece::Started(_) => {}
            Piece::Text(t) => text.push_str(&t),
            Piece::Logprob(e) => logprobs.push(e),
            Piece::End(o) => return Ok((text, o, logprobs)),
            Piece::Failed(e) => return Err(e),
        }
    }
    Err(ApiError::Internal("the generation ended without a result".into()))
}

struct Clock {
    submitted: Instant,
    started: Option<Instant>,
    first: Option<Instant>,
}

async fn drive(
    st: SharedState,
    route: &'static str,
    mut events: mpsc::UnboundedReceiver<Event>,
    out: mpsc::Sender<Piece>,
    stops: Vec<String>,
    prompt_tokens: usize,
) {
    let mut dec = st.text.decoder();
    let mut stop = StopMatcher::new(stops);
    let mut clock = Clock { submitted: Instant::now(), started: None, first: None };
    let mut cached = 0;
    let mut completion = 0;
    let outcome = |finish: FinishKind, completion: usize, cached: usize, clock: &Clock| {
        let now = Instant::now();
        let started = clock.started.unwrap_or(now);
        let first = clock.first.unwrap_or(now);
        Outcome {
            finish,
            prompt_tokens,
            cached_tokens: cached,
            completion_tokens: completion,
            queue_wait: started - clock.submitted,
            prompt_time: first.saturating_duration_since(started),
            decode_time: now.saturating_duration_since(first),
        }
    };
    loop {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = out.closed() => {
                tracing::info!(route, prompt_tokens, completion_tokens = completion, "request cancelled: client disconnected");
                st.metrics.count_tokens(prompt_tokens, cached, completion);
                return;
            }
        };
        let pieces: Vec<Piece> = match ev {
            None => vec![Piece::Failed(ApiError::Internal("the scheduler dropped the request".into()))],
            Some(Event::Started(s)) => {
                clock.started = Some(Instant::now());
                cached = s.cached_tokens;
                vec![Piece::Started(s)]
            }
            Some(Event::Logprob(lp)) => vec![Piece::Logprob(LogprobEntry::new(st.text.tokenizer(), lp))],
            Some(Event::Token(t)) => {
                completion += 1;
                clock.first.get_or_insert_with(Instant::now);
                let pushed = stop.push(&dec.push(t));
                let mut v = Vec::new();
                if !pushed.text.is_empty() {
                    v.push(Piece::Text(pushed.text));
                }
                if let Some(s) = pushed.stopped {
                    v.push(Piece::End(outcome(FinishKind::StopSequence(s), completion, cached, &clock)));
                }
                v
            }
            Some(Event::Done(d)) => {
                let pushed = stop.push(&dec.flush());
                let mut v = Vec::new();
                let mut text = pushed.text;
                let finish = match pushed.stopped {
                    Some(s) => FinishKind::StopSequence(s),
                    None => {
                        text.push_str(&stop.finish());
                        match d.finish {
                            Finish::Stop => FinishKind::Stop,
                            // A stream cut at shutdown ends as a truncated one would: its client
                            // gets a final event instead of a dropped connection.
                            Finish::Length | Finish::ContextFull | Finish::ShutDown => FinishKind::Length,
                        }
                    }
                };
                if !text.is_empty() {
                    v.push(Piece::Text(text));
                }
                // The scheduler's split of the time (its prompt pass and its generation) is
                // exact where arrival times are not: a diffusion model sends a canvas of tokens
                // at once, so the first token's arrival is not where the prompt pass ended.
                let mut o = outcome(finish, d.usage.completion_tokens, d.usage.cached_tokens, &clock);
                (o.prompt_time, o.decode_time) = (d.timings.prompt_time, d.timings.decode_time);
                v.push(Piece::End(o));
                v
            }
            Some(Event::Error(e)) => vec![Piece::Failed(e.into())],
        };
        for p in pieces {
            let last = matches!(p, Piece::End(_) | Piece::Failed(_));
            if let Piece::End(o) = &p {
                log(route, o);
                st.metrics.finished(o);
            } else if let Piece::Failed(e) = &p {
                tracing::info!(route, prompt_tokens, completion_tokens = completion, "request failed: {e}");
                st.metrics.count_tokens(prompt_tokens, cached, completion);
            }
            let sent = out.send(p).await.is_ok();
            if !sent && !last {
                // The client went away: what was generated still counts.
                st.metrics.count_tokens(prompt_tokens, cached, completion);
            }
            if !sent || last {
                // Dropping `events` cancels the sequence if it is still running.
                return;
            }
        }
    }
}

fn log(route: &str, o: &Outcome) {
    tracing::info!(
        "{route}: prompt {} tokens ({} cached, {:.0} ms) | completion {} tokens, {:.1} t/s | queue wait {:.0} ms | {:?}",
        o.prompt_tokens,
        o.cached_tokens,
        o.prompt_time.as_secs_f64() * 1e3,
        o.completion_tokens,
        o.decode_tps(),
        o.queue_wait.as_secs_f64() * 1e3,
        o.finish,
    );
}
