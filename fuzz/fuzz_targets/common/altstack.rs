//! Make stack overflows reportable.
//!
//! libFuzzer's SIGSEGV handler runs on the faulting stack unless the handler already had
//! `SA_ONSTACK` (only sanitizers set that up). A stack overflow therefore kills the process with a
//! second SIGSEGV before libFuzzer can print "deadly signal" and save the input. Built with
//! `-s none` there is no sanitizer, so give the handler its own stack: call [`install`] at the
//! start of every run (it does the work once, after libFuzzer installed its handlers).

use std::sync::Once;

pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| unsafe {
        const SIZE: usize = 1 << 20;
        let mem: &'static mut [u8] = Box::leak(vec![0u8; SIZE].into_boxed_slice());
        let ss = libc::stack_t { ss_sp: mem.as_mut_ptr().cast(), ss_flags: 0, ss_size: SIZE };
        if libc::sigaltstack(&ss, std::ptr::null_mut()) != 0 {
            return;
        }
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            let mut act: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut act) == 0 && act.sa_sigaction != libc::SIG_DFL {
                act.sa_flags |= libc::SA_ONSTACK;
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    });
}
