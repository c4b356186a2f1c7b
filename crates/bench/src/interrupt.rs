//! Ctrl-C during a run: the first SIGINT or SIGTERM only raises a flag, so the run stops
//! starting steps, kills the fio it waits for, releases what it made (stops `basalt up`,
//! removes the bench volumes of an existing cluster) and writes the report of what it
//! measured. The handler is one-shot: a second Ctrl-C ends the process at once.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the signal handler; read between and during steps.
static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Catch the next SIGINT and SIGTERM (once each; the default action returns after that).
pub fn install() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic; the sigaction struct is zeroed and
        // then filled as sigaction(2) documents.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Whether Ctrl-C (or SIGTERM) arrived since [`install`].
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// What a step that did not run because of Ctrl-C reports.
pub const MESSAGE: &str = "interrupted (Ctrl-C)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_starts_clear() {
        // Goal: nothing reads as interrupted before a signal arrives (raising one here would
        // stop the other tests of this binary mid-run).
        install();
        assert!(!requested());
    }
}
