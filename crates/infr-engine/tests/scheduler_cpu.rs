//! The continuous-batching scheduler on the CPU backend with smollm2: batching must not change
//! greedy results, a dropped receiver frees its slot, and a follow-up prompt that extends a
//! finished one computes only its new tokens.

mod common;

use std::time::{Duration, Instant};

use infr_core::GgufWeights;
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::oracle::Oracle;
use infr_engine::{
    slot_runner_options, Done, Event, EventReceiver, Finish, Request, RequestError, Runner, RunnerOptions, Scheduler,
    SchedulerHandle, SchedulerOptions, StartInfo,
};

const MODEL: &str = "smollm2-135m-instruct-q4_1";

fn weights() -> Option<GgufWeights> {
    let path = common::models_dir().join(format!("{MODEL}.gguf"));
    if !path.exists() {
        assert!(std::env::var("INFR_REQUIRE_MODELS").is_err(), "missing model {}", path.display());
        eprintln!("skipping: {} not found", path.display());
        return None;
    }
    Some(GgufWeights::open(&path).expect("model opens"))
}

fn scheduler(w: &GgufWeights, parallel: usize, n_ctx_total: usize, opts: SchedulerOptions) -> SchedulerHandle {
    let model = infr_models::load_model(w).expect("model loads");
    let backend = Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Fast }).expect("cpu backend"));
    let ro =
        slot_runner_options(n_ctx_total, parallel, RunnerOptions { ubatch: 512, page_size: 64, ..Default::default() });
    let runner = Runner::new(model, w, backend, ro).expect("runner");
    Scheduler::spawn(runner, opts).expect("scheduler")
}

/// The oracle prompts of the model (short, code, chat and a 312-token one).
fn prompts() -> Vec<(String, Vec<u32>)> {
    let dir = common::repo().join("testdata/oracle/logits");
    ["short", "code", "chat", "long"]
        .iter()
        .map(|case| {
            let f = dir.join(format!("{MODEL}__{case}.json"));
            let o = Oracle::from_json(&std::fs::read_to_string(&f).expect("oracle file")).expect("oracle json");
            (case.to_string(), o.prompt_ids)
        })
        .collect()
}

fn request(prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request { max_tokens: Some(max_tokens), ..Request::new(prompt, vec![2]) }
}

struct Outcome {
    start: Option<StartInfo>,
    tokens: Vec<u32>,
    logprobs: Vec<infr_engine::TokenLogprob>,
    end: Result<Done, RequestError>,
}

fn collect(rx: &EventReceiver) -> Outcome {
    let mut out = Outcome { start: None, tokens: Vec::new(), logprobs: Vec::new(), end: Err(RequestError::ShutDown) };
    while let Ok(ev) = rx.recv_timeout(Duration::from_secs(120)) {
        match ev {
            Event::Started(s) => out.start = Some(s),
            Event::Token(t) => out.tokens.push(t),
            Event::Logprob(l) => out.logprobs.push(l),
            Event::Done(d) => {
                out.end = Ok(d);
                break;
            }
            Event::Error(e) => {
                out.end = Err(e);
                break;
            }
        }
    }
    out
}

fn wait_idle(h: &SchedulerHandle) {
    let t = Instant::now();
    while h.stats().active > 0 || h.stats().queued > 0 {
        assert!(t.elapsed() < Duration::from_secs(60), "scheduler never went idle: {:?}", h.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn batched_greedy_matches_alone() {
    let Some(w) = weights() else { return };
    let prompts = prompts();
    let n = 12;
    // Alone: one slot, one request at a time.
    let alone = scheduler(&w, 1, 512, SchedulerOptions::default());
    let mut expected = Vec::new();
    for (_, p) in &prompts {
        let o = collect(&alone.submit_channel(request(p.clone(), n)).unwrap());
        let d = o.end.expect("alone request done");
        assert_eq!(d.usage.completion_tokens, o.tokens.len());
        expected.push(o.tokens);
    }
    drop(alone);
    // Together: four slots, small prefill chunks so the long prompt is split and mixed with
    // the other three decoding.
    let opts = SchedulerOptions { prefill_chunk: 32, ..Default::default() };
    let together = scheduler(&w, 4, 4 * 512, opts);
    let rxs: Vec<EventReceiver> =
        prompts.iter().map(|(_, p)| together.submit_channel(request(p.clone(), n)).unwrap()).collect();
    let steps_before = together.stats().steps;
    for (((case, _), rx), exp) in prompts.iter().zip(&rxs).zip(&expected) {
        let o = collect(rx);
        o.end.expect("batched request done");
        // Batched rows may differ from single rows by float rounding; a near-tie could then
        // flip a late greedy token, so the first tokens must match exactly and a full match
        // is reported.
        let same = o.tokens.iter().zip(exp).take_while(|(a, b)| a == b).count();
        eprintln!("{case}: {same}/{} greedy tokens identical alone vs batched", exp.len());
        assert!(same >= 6.min(exp.len()), "{case}: batched {:?} vs alone {exp:?}", o.tokens);
    }
    let steps = together.stats().steps - steps_before;
    // Alone, the four requests take 4 * n decode steps plus prefill; batched, far fewer.
    assert!(steps < (4 * n) as u64, "batched run took {steps} steps");
    wait_idle(&together);
}

#[test]
fn cancellation_frees_the_slot() {
    let Some(w) = weights() else { return };
    let p = prompts();
    let h = scheduler(&w, 1, 512, SchedulerOptions::default());
    let rx = h.submit_channel(request(p[0].1.clone(), 400)).unwrap();
    // Wait for the first tokens, then hang up.
    let mut got = 0;
    while got < 2 {
        if let Event::Token(_) = rx.recv_timeout(Duration::from_secs(60)).expect("event") {
            got += 1;
        }
    }
    drop(rx);
    // The single slot must be freed for the next request (which would otherwise wait for
    // ~400 tokens).
    let o = collect(&h.submit_channel(request(p[1].1.clone(), 3)).unwrap());
    let d = o.end.expect("second request served");
    assert_eq!(o.tokens.len(), 3);
    assert_eq!(d.finish, Finish::Length);
    wait_idle(&h);
    // The cancelled request stopped early: far fewer tokens were computed than 400.
    assert!(h.stats().tokens_computed < 200, "{:?}", h.stats());
}

#[test]
fn prefix_reuse_computes_only_new_tokens() {
    let Some(w) = weights() else { return };
    let p = prompts();
    let h = scheduler(&w, 2, 2 * 512, SchedulerOptions::default());
    let first = p[2].1.clone();
    let o1 = collect(&h.submit_channel(request(first.clone(), 6)).unwrap());
    let s1 = o1.start.expect("started");
    assert_eq!(s1.cached_tokens, 0);
    o1.end.expect("first done");
    wait_idle(&h);
    let computed_before = h.stats().tokens_computed;
    // The next turn: the previous prompt, the reply, then new text.
    let mut second = first.clone();
    second.extend_from_slice(&o1.tokens);
    second.extend_from_slice(&p[0].1);
    let o2 = collect(&h.submit_channel(request(second.clone(), 2)).unwrap());
    let s2 = o2.start.expect("started");
    let d2 = o2.end.expect("second done");
    // The last reply token was sampled but never run through the model, so it is recomputed.
    let cached = first.len() + o1.tokens.len() - 1;
    assert_eq!(s2.slot, s1.slot, "the slot holding the prefix is chosen");
    assert_eq!(s2.cached_tokens, cached);
    assert_eq!(d2.usage.cached_tokens, cached);
    assert_eq!(d2.usage.prompt_tokens, second.len());
    wait_idle(&h);
    let computed = h.stats().tokens_computed - computed_before;
    // New prompt tokens, plus the generated tokens fed back (all but the last).
    assert_eq!(computed as usize, second.len() - cached + o2.tokens.len() - 1);
}

/// Agent-clients issue, defect 6: a request whose prefix a busy slot holds lands on an idle
/// slot that shares the busy slot's KV pages, and answers as a cold run does.
#[test]
fn a_busy_slots_prefix_is_shared() {
    let Some(w) = weights() else { return };
    let p = prompts();
    let long = p[3].1.clone(); // 312 tokens
    let mut follow = long.clone();
    follow.extend_from_slice(&p[0].1);
    let cold = {
        let h = scheduler(&w, 2, 2 * 1024, SchedulerOptions::default());
        collect(&h.submit_channel(request(follow.clone(), 8)).unwrap())
    };
    let h = scheduler(&w, 2, 2 * 1024, SchedulerOptions::default());
    let busy = h.submit_channel(request(long.clone(), 300)).unwrap();
    // Wait until the long prompt is computed and the slot generates.
    loop {
        match busy.recv_timeout(Duration::from_secs(60)).expect("event") {
            Event::Token(_) => break,
            Event::Done(_) | Event::Error(_) => panic!("the busy request ended early"),
            _ => {}
        }
    }
    let o = collect(&h.submit_channel(request(follow.clone(), 8)).unwrap());
    let s = o.start.expect("started");
    assert_eq!(s.cached_tokens, long.len(), "the busy slot's prefix is shared");
    assert_eq!(o.tokens, cold.tokens, "sharing pages changed the answer");
    // The busy request is unaffected and still completes.
    drop(busy);
    wait_idle(&h);
}

/// Hardening issue, defect 7: a request that asks for log-probabilities gets one entry per
/// generated token (the greedy token is the most likely one), and batching does not change it.
#[test]
fn logprobs_come_with_every_token() {
    let Some(w) = weights() else { return };
    let p = prompts();
    let h = scheduler(&w, 2, 2 * 512, SchedulerOptions::default());
    let req = |prompt: Vec<u32>| Request { logprobs: Some(3), ..request(prompt, 6) };
    let o = collect(&h.submit_channel(req(p[1].1.clone())).unwrap());
    o.end.as_ref().expect("done");
    assert_eq!(o.logprobs.len(), o.tokens.len());
    for (lp, &t) in o.logprobs.iter().zip(&o.tokens) {
        assert_eq!(lp.token, t);
        assert_eq!(lp.top.len(), 3);
        assert_eq!(lp.top[0].0, t, "greedy picks the most likely token");
        assert!(lp.logprob <= 0.0 && (lp.logprob - lp.top[0].1).abs() < 1e-6);
        let p: f32 = lp.top.iter().map(|&(_, l)| l.exp()).sum();
        assert!(p <= 1.0 + 1e-4, "probabilities above one: {p}");
    }
    assert!(matches!(
        h.submit_channel(Request { logprobs: Some(21), ..request(p[0].1.clone(), 1) }),
        Err(RequestError::InvalidSampling(_))
    ));
}

/// A sampler's logit bias and penalties go with its own row when requests share a step that
/// selects candidates instead of reading whole rows: a penalized request (its unadjusted first
/// token banned) batched with a plain one gives what it gives alone over whole rows
/// (log-probabilities force those), and the plain one what it gives alone.
#[test]
fn penalties_and_bias_stay_with_their_request_in_a_batch() {
    let Some(w) = weights() else { return };
    let p = prompts();
    let n = 10;
    let h = scheduler(&w, 2, 2 * 512, SchedulerOptions::default());
    let tokens = |r: Request| collect(&h.submit_channel(r).unwrap()).tokens;
    let plain_alone = tokens(request(p[0].1.clone(), n));
    let banned = tokens(request(p[1].1.clone(), n))[0];
    let penalized = |logprobs: Option<usize>| Request {
        sampling: infr_engine::SamplingParams {
            repeat_penalty: 1.5,
            frequency_penalty: 0.3,
            logit_bias: vec![(banned, f32::NEG_INFINITY)],
            ..infr_engine::SamplingParams::greedy()
        },
        logprobs,
        ..request(p[1].1.clone(), n)
    };
    let whole_rows = tokens(penalized(Some(1)));
    assert!(!whole_rows.contains(&banned), "{whole_rows:?} has the banned {banned}");
    let (ra, rb) = (h.submit_channel(penalized(None)).unwrap(), h.submit_channel(request(p[0].1.clone(), n)).unwrap());
    let (a, b) = (collect(&ra).tokens, collect(&rb).tokens);
    let same = |x: &[u32], y: &[u32]| x.iter().zip(y).take_while(|(a, b)| a == b).count();
    eprintln!("penalized: {}/{n}, plain: {}/{n} tokens as alone", same(&a, &whole_rows), same(&b, &plain_alone));
    assert!(same(&a, &whole_rows) >= 6, "penalized batched {a:?} vs alone {whole_rows:?}");
    assert!(same(&b, &plain_alone) >= 6, "plain batched {b:?} vs alone {plain_alone:?}");
}

#[test]
fn refusals_are_typed() {
    let Some(w) = weights() else { return };
    let p = prompts();
    let h = scheduler(&w, 1, 256, SchedulerOptions { queue_capacity: 1, ..Default::default() });
    assert_eq!(h.n_ctx(), 256);
    let long: Vec<u32> = p[3].1.clone(); // 312 tokens > 256
    assert!(matches!(h.submit_channel(request(long, 1)), Err(RequestError::PromptTooLong { tokens: 312, n_ctx: 256 })));
    assert!(matches!(h.submit_channel(request(Vec::new(), 1)), Err(RequestError::EmptyPrompt)));
    assert!(matches!(
        h.submit_channel(request(vec![u32::MAX], 1)),
        Err(RequestError::InvalidToken { id: u32::MAX, .. })
    ));
    // Timed out before it could start.
    let o =
        collect(&h.submit_channel(Request { timeout: Some(Duration::ZERO), ..request(p[0].1.clone(), 1) }).unwrap());
    assert_eq!(o.end.unwrap_err(), RequestError::Timeout);
    // One running, one waiting, the next refused.
    let running = h.submit_channel(request(p[0].1.clone(), 200)).unwrap();
    assert!(matches!(running.recv_timeout(Duration::from_secs(60)), Ok(Event::Started(_))));
    let waiting = h.submit_channel(request(p[1].1.clone(), 1)).unwrap();
    assert!(matches!(h.submit_channel(request(p[1].1.clone(), 1)), Err(RequestError::QueueFull { capacity: 1 })));
    drop(running);
    let o = collect(&waiting);
    o.end.expect("the queued request runs once the slot is free");
    wait_idle(&h);
}

/// The scheduler thread (which owns the backend) ends once the last handle is dropped, so a
/// server can wait for it before exiting; while a handle lives, waiting times out.
#[test]
fn thread_ends_when_the_last_handle_drops() {
    let Some(w) = weights() else { return };
    let h = scheduler(&w, 1, 256, SchedulerOptions::default());
    let thread = h.thread();
    assert!(!thread.wait(Duration::from_millis(50)), "the thread runs while a handle lives");
    let o = collect(&h.submit_channel(request(prompts()[0].1.clone(), 2)).unwrap());
    o.end.expect("request completes");
    drop(h);
    assert!(thread.wait(Duration::from_secs(30)), "the thread ends after the last handle");
}

/// Hardening issue, defect 5: a draining scheduler refuses new and queued requests with
/// `ShutDown` but lets running ones go on; `end_running` then ends them with a final `Done`
/// (`Finish::ShutDown`) instead of cutting them off.
#[test]
fn drain_refuses_queued_and_ends_running_with_a_final_event() {
    let Some(w) = weights() else { return };
    let h = scheduler(&w, 1, 1024, SchedulerOptions::default());
    let prompt = prompts().remove(0).1;
    // No stop ids: it runs until its 400 tokens or the end of the grace period.
    let running = h.submit_channel(Request { max_tokens: Some(400), ..Request::new(prompt.clone(), vec![]) }).unwrap();
    // The one slot is busy: this one waits in the queue.
    let queued = h.submit_channel(request(prompt.clone(), 4)).unwrap();
    let wait = Duration::from_secs(60);
    let Ok(Event::Started(_)) = running.recv_timeout(wait) else { panic!("the first request did not start") };
    h.drain();
    assert!(matches!(h.submit_channel(request(prompt.clone(), 4)), Err(RequestError::ShutDown)));
    let q = queued.recv_timeout(wait);
    assert!(matches!(q, Ok(Event::Error(RequestError::ShutDown))), "the queued request was not refused: {q:?}");
    // Still generating after the drain began.
    let t = running.recv_timeout(wait);
    assert!(matches!(t, Ok(Event::Token(_))), "the running request stopped at the drain: {t:?}");
    h.end_running();
    let r = collect(&running);
    let done = r.end.expect("a final Done event");
    assert_eq!(done.finish, Finish::ShutDown);
    assert!(done.usage.completion_tokens < 400);
}

/// A constraint that gives up after `after` tokens.
struct GivesUp {
    seen: usize,
    after: usize,
}

impl infr_engine::TokenConstraint for GivesUp {
    fn mask(&mut self, _logits: &mut [f32]) {}
    fn accept(&mut self, _token: u32) {
        self.seen += 1;
    }
    fn is_finished(&self) -> bool {
        false
    }
    fn error(&self) -> Option<String> {
        (self.seen >= self.after).then(|| "nothing fits".to_owned())
    }
}

/// Hardening issue, defect 6: a constraint that can no longer be satisfied ends the request
/// with an error, not with unconstrained text or a normal stop.
#[test]
fn a_failed_constraint_ends_with_an_error() {
    let Some(w) = weights() else { return };
    let h = scheduler(&w, 1, 1024, SchedulerOptions::default());
    let prompt = prompts().remove(0).1;
    let (sink, rx) = infr_engine::event_channel();
    let req = Request { max_tokens: Some(50), ..Request::new(prompt, vec![]) };
    h.submit_constrained(req, Box::new(GivesUp { seen: 0, after: 3 }), sink).unwrap();
    let out = collect(&rx);
    assert_eq!(out.tokens.len(), 2, "tokens before the constraint failed");
    assert!(matches!(out.end, Err(RequestError::Constraint(ref m)) if m == "nothing fits"), "{:?}", out.end.err());
    wait_idle(&h);
}
