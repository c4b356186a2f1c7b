//! Readiness for systemd (`Type=notify` units in contrib/systemd/): a daemon says READY=1
//! once it serves, STOPPING=1 when it begins to stop, and a STATUS= line `systemctl status`
//! shows. Outside systemd (no `$NOTIFY_SOCKET`) nothing is sent.

use sd_notify::NotifyState;

/// The daemon serves: `systemctl start` returns, units ordered after it start.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// The daemon begins an orderly stop.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

fn send(states: &[NotifyState]) {
    // A unit that is not Type=notify has no socket; a failure to reach one that is, is
    // logged: systemd then times the start out and says why in its journal.
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("could not notify systemd: {e}");
    }
}
