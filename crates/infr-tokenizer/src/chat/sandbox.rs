//! Rendering chat templates in a separate, memory-capped process.
//!
//! A template comes from a model file, i.e. from whoever made the file, and minijinja bounds
//! its work (fuel) but not its memory: `{% set ns.l = ns.l + ns.l %}` forty times over asks for
//! hundreds of gigabytes in a few instructions, and the allocator's refusal aborts the process.
//! The template engine's maintainers' answer is an operating-system limit, so a program that
//! serves untrusted templates installs a [`RenderSandbox`] ([`install_sandbox`]): every render
//! (the construction probe included) is then sent to a worker process ([`ProcessSandbox`], which
//! runs [`run_worker`] under an address-space limit). A worker that dies — the allocator
//! refused it, or anything else — turns into a [`ChatTemplateError::Render`] for that request and
//! is started again for the next one.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value as Json};

use super::{ChatTemplateError, ChatTemplateOptions};

/// One render: the template, its special-token texts and limits, and the prepared context
/// (messages, tools, flags) exactly as the template sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RenderJob {
    pub source: String,
    pub bos_token: String,
    pub eos_token: String,
    pub fuel: Option<u64>,
    pub recursion_limit: usize,
    pub max_output_bytes: usize,
    /// `strftime_now`'s time in nanoseconds since the epoch (`None`: the worker's clock).
    pub now_ns: Option<u64>,
    pub ctx: Json,
}

impl RenderJob {
    pub(super) fn new(source: &str, bos: &str, eos: &str, options: &ChatTemplateOptions, ctx: &Json) -> Self {
        RenderJob {
            source: source.to_owned(),
            bos_token: bos.to_owned(),
            eos_token: eos.to_owned(),
            fuel: options.fuel,
            recursion_limit: options.recursion_limit,
            max_output_bytes: options.max_output_bytes,
            now_ns: options.now.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_nanos() as u64),
            ctx: ctx.clone(),
        }
    }

    fn options(&self) -> ChatTemplateOptions {
        ChatTemplateOptions {
            fuel: self.fuel,
            recursion_limit: self.recursion_limit,
            max_output_bytes: self.max_output_bytes,
            now: self.now_ns.map(|ns| UNIX_EPOCH + Duration::from_nanos(ns)),
        }
    }
}

/// Where renders run when one is installed (see the module documentation).
pub trait RenderSandbox: Send + Sync + std::fmt::Debug {
    /// Render `job`, or say why not.
    fn render(&self, job: &RenderJob) -> Result<String, ChatTemplateError>;
}

static SANDBOX: OnceLock<Arc<dyn RenderSandbox>> = OnceLock::new();

/// Send every render of this process to `sandbox` from now on. Returns false when one was
/// installed already (it stays).
pub fn install_sandbox(sandbox: Arc<dyn RenderSandbox>) -> bool {
    SANDBOX.set(sandbox).is_ok()
}

/// The installed sandbox, if any.
pub(super) fn sandbox() -> Option<&'static Arc<dyn RenderSandbox>> {
    SANDBOX.get()
}

/// Render `job` in this process (what a worker does).
pub fn render_in_process(job: &RenderJob) -> Result<String, ChatTemplateError> {
    let t = super::ChatTemplate::unprobed(&job.source, &job.bos_token, &job.eos_token, job.options())?;
    t.render_context_here(&job.ctx, job.fuel)
}

/// A worker's parsed templates, reused while jobs name them (a server renders every request
/// with its model's template; `infr multi` has one per model).
type CacheKey = (String, String, String, ChatTemplateOptions);

/// Templates a worker keeps parsed at most.
const CACHED_TEMPLATES: usize = 8;

fn render_cached(
    cache: &mut Vec<(CacheKey, super::ChatTemplate)>,
    job: &RenderJob,
) -> Result<String, ChatTemplateError> {
    let key = (job.source.clone(), job.bos_token.clone(), job.eos_token.clone(), job.options());
    let at = match cache.iter().position(|(k, _)| *k == key) {
        Some(i) => i,
        None => {
            let template = super::ChatTemplate::unprobed(&key.0, &key.1, &key.2, key.3.clone())?;
            if cache.len() == CACHED_TEMPLATES {
                cache.remove(0);
            }
            cache.push((key, template));
            cache.len() - 1
        }
    };
    cache[at].1.render_context_here(&job.ctx, job.fuel)
}

/// A render error as the worker sends it.
fn error_to_json(e: &ChatTemplateError) -> Json {
    match e {
        ChatTemplateError::Syntax { line, message } => json!({"kind": "syntax", "line": line, "message": message}),
        ChatTemplateError::Raised { message } => json!({"kind": "raised", "message": message}),
        ChatTemplateError::OutOfFuel { fuel } => json!({"kind": "fuel", "limit": fuel}),
        ChatTemplateError::OutputTooLarge { limit } => json!({"kind": "output", "limit": limit}),
        ChatTemplateError::RecursionLimit { limit } => json!({"kind": "recursion", "limit": limit}),
        ChatTemplateError::Render { line, message } => json!({"kind": "render", "line": line, "message": message}),
        ChatTemplateError::Request(m) => json!({"kind": "request", "message": m}),
        ChatTemplateError::Metadata(e) => json!({"kind": "render", "message": e.to_string()}),
    }
}

fn error_from_json(v: &Json) -> ChatTemplateError {
    let message = v["message"].as_str().unwrap_or_default().to_owned();
    let limit = v["limit"].as_u64().unwrap_or(0);
    let line = v["line"].as_u64().map(|l| l as usize);
    match v["kind"].as_str() {
        Some("syntax") => ChatTemplateError::Syntax { line: line.unwrap_or(1), message },
        Some("raised") => ChatTemplateError::Raised { message },
        Some("fuel") => ChatTemplateError::OutOfFuel { fuel: limit },
        Some("output") => ChatTemplateError::OutputTooLarge { limit: limit as usize },
        Some("recursion") => ChatTemplateError::RecursionLimit { limit: limit as usize },
        Some("request") => ChatTemplateError::Request(message),
        _ => ChatTemplateError::Render { line, message },
    }
}

/// The worker's loop: one JSON job per line on `input`, one JSON answer per line on `output`
/// (`{"ok": text}` or `{"err": {...}}`), until `input` ends.
pub fn run_worker(input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    let mut cache = Vec::new();
    for line in input.lines() {
        let line = line?;
        let answer = match serde_json::from_str::<RenderJob>(&line) {
            Ok(job) => match render_cached(&mut cache, &job) {
                Ok(text) => json!({ "ok": text }),
                Err(e) => json!({ "err": error_to_json(&e) }),
            },
            Err(e) => json!({"err": {"kind": "request", "message": format!("bad render job: {e}")}}),
        };
        serde_json::to_writer(&mut output, &answer)?;
        output.write_all(b"\n")?;
        output.flush()?;
    }
    Ok(())
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    /// Answer lines, read by a thread so that a render can be given a deadline.
    answers: std::sync::mpsc::Receiver<std::io::Result<String>>,
}

/// Longest a render may take before its worker is killed (fuel bounds the instructions, not
/// the cost of each, e.g. copying a huge string).
pub const RENDER_DEADLINE: Duration = Duration::from_secs(10);

fn read_answers(stdout: ChildStdout, tx: std::sync::mpsc::Sender<std::io::Result<String>>) {
    let mut r = BufReader::new(stdout);
    loop {
        let mut line = String::new();
        let got = match r.read_line(&mut line) {
            Ok(0) => Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "worker ended")),
            Ok(_) => Ok(line),
            Err(e) => Err(e),
        };
        let end = got.is_err();
        if tx.send(got).is_err() || end {
            return;
        }
    }
}

/// A [`RenderSandbox`] that runs [`run_worker`] in a child process started with `command`
/// (e.g. this program with a worker flag; the child sets its own memory limit), one render at
/// a time, restarting it after a failure.
#[derive(Debug)]
pub struct ProcessSandbox {
    make: fn() -> Command,
    /// What the child's limit is, for the error message.
    limit_desc: String,
    worker: Mutex<Option<WorkerSlot>>,
}

struct WorkerSlot(Worker);

impl std::fmt::Debug for WorkerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "worker pid {}", self.0.child.id())
    }
}

impl ProcessSandbox {
    /// A sandbox whose worker is started by `make()`; `limit_desc` names its limit in errors
    /// ("4 GiB of address space").
    pub fn new(make: fn() -> Command, limit_desc: impl Into<String>) -> Self {
        ProcessSandbox { make, limit_desc: limit_desc.into(), worker: Mutex::new(None) }
    }

    fn spawn(&self) -> std::io::Result<Worker> {
        let mut child = (self.make)().stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("worker has no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("worker has no stdout"))?;
        let (tx, answers) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("template-worker-reader".into()).spawn(move || read_answers(stdout, tx))?;
        Ok(Worker { child, stdin, answers })
    }

    fn exchange(w: &mut Worker, job: &RenderJob) -> std::io::Result<Json> {
        serde_json::to_writer(&mut w.stdin, job)?;
        w.stdin.write_all(b"\n")?;
        w.stdin.flush()?;
        let line = match w.answers.recv_timeout(RENDER_DEADLINE) {
            Ok(line) => line?,
            Err(_) => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "render deadline passed")),
        };
        serde_json::from_str(&line).map_err(std::io::Error::other)
    }
}

impl RenderSandbox for ProcessSandbox {
    fn render(&self, job: &RenderJob) -> Result<String, ChatTemplateError> {
        let mut slot = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            let w = self.spawn().map_err(|e| ChatTemplateError::Render {
                line: None,
                message: format!("cannot start the chat template renderer: {e}"),
            })?;
            *slot = Some(WorkerSlot(w));
        }
        let Some(WorkerSlot(w)) = slot.as_mut() else { unreachable!("started above") };
        match Self::exchange(w, job) {
            Ok(answer) => match (answer.get("ok").and_then(Json::as_str), answer.get("err")) {
                (Some(text), _) => Ok(text.to_owned()),
                (None, Some(err)) => Err(error_from_json(err)),
                _ => Err(ChatTemplateError::Render { line: None, message: "malformed renderer answer".into() }),
            },
            Err(_) => {
                // The worker died on this template (most likely its allocator refused a huge
                // value): reap it and start afresh next time.
                if let Some(WorkerSlot(mut dead)) = slot.take() {
                    let _ = dead.child.kill();
                    let _ = dead.child.wait();
                }
                Err(ChatTemplateError::Render {
                    line: None,
                    message: format!(
                        "the chat template's renderer died (the template needed more than {}, ran past {} s, \
                         or crashed)",
                        self.limit_desc,
                        RENDER_DEADLINE.as_secs()
                    ),
                })
            }
        }
    }
}

impl Drop for ProcessSandbox {
    fn drop(&mut self) {
        if let Some(WorkerSlot(mut w)) = self.worker.get_mut().ok().and_then(Option::take) {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(source: &str, ctx: Json) -> RenderJob {
        RenderJob::new(source, "<s>", "</s>", &ChatTemplateOptions::default(), &ctx)
    }

    #[test]
    fn the_worker_loop_answers_renders_and_errors() {
        let ok = job(
            "{{ bos_token }}{{ messages[0].content }}",
            json!({"bos_token": "<s>", "messages": [{"content": "hi"}]}),
        );
        let raised = job("{{ raise_exception('no system role') }}", json!({}));
        let syntax = job("{% if %}", json!({}));
        let lines: String = [&ok, &raised, &syntax, &ok]
            .iter()
            .map(|j| serde_json::to_string(j).unwrap() + "\n")
            .chain(["not json\n".to_owned()])
            .collect();
        let mut out = Vec::new();
        run_worker(lines.as_bytes(), &mut out).unwrap();
        let answers: Vec<Json> =
            String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(answers.len(), 5);
        assert_eq!(answers[0]["ok"], "<s>hi");
        assert!(
            matches!(error_from_json(&answers[1]["err"]), ChatTemplateError::Raised { message } if message == "no system role")
        );
        assert!(matches!(error_from_json(&answers[2]["err"]), ChatTemplateError::Syntax { line: 1, .. }));
        assert_eq!(answers[3]["ok"], "<s>hi");
        assert!(matches!(error_from_json(&answers[4]["err"]), ChatTemplateError::Request(_)));
    }

    #[test]
    fn errors_survive_the_wire() {
        for e in [
            ChatTemplateError::OutOfFuel { fuel: 7 },
            ChatTemplateError::OutputTooLarge { limit: 9 },
            ChatTemplateError::RecursionLimit { limit: 3 },
            ChatTemplateError::Render { line: Some(4), message: "x".into() },
        ] {
            assert_eq!(error_from_json(&error_to_json(&e)).to_string(), e.to_string());
        }
    }
}
