//! Chat templates render in a memory-capped child process of this binary
//! (`infr_tokenizer::chat::sandbox`): a template is part of the model file, and the template
//! engine bounds its instructions but not its memory.

use std::process::Command;
use std::sync::Arc;

use infr_tokenizer::chat::sandbox::{install_sandbox, run_worker, ProcessSandbox};

/// The hidden argument that makes this binary a template worker.
pub const WORKER_ARG: &str = "__template-worker";

/// Address space a worker may use: far above any real template's needs (a few MiB) plus the
/// render thread's reserved 1 GiB stack.
const WORKER_ADDRESS_SPACE: u64 = 4 << 30;

/// Send this process's chat-template renders to a worker.
pub fn install() {
    fn worker() -> Command {
        // /proc/self/exe still runs this binary after it was replaced on disk (an upgrade while
        // serving), where current_exe() names a deleted path.
        let proc_exe = std::path::Path::new("/proc/self/exe");
        let exe = if proc_exe.exists() {
            proc_exe.to_path_buf()
        } else {
            std::env::current_exe().unwrap_or_else(|_| "infr".into())
        };
        let mut c = Command::new(exe);
        c.arg(WORKER_ARG);
        c
    }
    let limit = format!("{} GiB of address space", WORKER_ADDRESS_SPACE >> 30);
    install_sandbox(Arc::new(ProcessSandbox::new(worker, limit)));
}

/// Run as a worker: cap the address space, then render the jobs of standard input until it
/// closes (the parent went away).
pub fn run_as_worker() -> std::process::ExitCode {
    #[cfg(unix)]
    {
        let lim = libc::rlimit { rlim_cur: WORKER_ADDRESS_SPACE as _, rlim_max: WORKER_ADDRESS_SPACE as _ };
        // SAFETY: setrlimit reads a valid struct; lowering our own limit needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
            eprintln!("template worker: cannot limit the address space: {}", std::io::Error::last_os_error());
            return std::process::ExitCode::FAILURE;
        }
    }
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    match run_worker(stdin.lock(), stdout.lock()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}
