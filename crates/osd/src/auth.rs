//! The OSD's side of data-plane authentication: the handshake on every TCP connection,
//! capability checks, revocation of open sessions, and their counters (docs/design.md,
//! "Data-plane authentication").

use crate::daemon::Osd;
use crate::handler::serve_connection;
use basalt_auth::{Authority, Caps, Refusal, Session};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Notify};

/// How often open sessions of client entities are checked against the entity records.
pub const REVOCATION_CHECK: Duration = Duration::from_secs(1);

/// Refusal reasons, in the order of [`AuthCounters::refused`].
pub const REFUSAL_LABELS: [&str; 6] = [
    "malformed",
    "unknown_entity",
    "bad_proof",
    "lookup_failed",
    "timeout",
    "io",
];

/// Handshake and capability counters (`/metrics`).
#[derive(Default, Debug)]
pub struct AuthCounters {
    /// Handshakes accepted.
    pub accepted: AtomicU64,
    /// Handshakes refused, by [`REFUSAL_LABELS`].
    pub refused: [AtomicU64; 6],
    /// Requests answered Denied (outside the connection's capabilities).
    pub denied_requests: AtomicU64,
    /// Open sessions closed because their entity was revoked.
    pub revoked_sessions: AtomicU64,
}

impl AuthCounters {
    fn refusal(&self, r: &Refusal) {
        let i = REFUSAL_LABELS
            .iter()
            .position(|l| *l == r.label())
            .unwrap_or(REFUSAL_LABELS.len() - 1);
        self.refused[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// An OSD's authentication state: the authority that checks keys and the open sessions of
/// client entities (for revocation).
pub struct OsdAuth {
    pub authority: Arc<Authority>,
    sessions: Mutex<HashMap<u64, (Session, Arc<Notify>)>>,
    next_session: AtomicU64,
}

impl OsdAuth {
    /// Authentication backed by `authority`.
    pub fn new(authority: Arc<Authority>) -> Self {
        Self {
            authority,
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
        }
    }

    /// Track a client entity's session; its notify fires when the entity is revoked.
    fn register(&self, s: &Session) -> Option<(u64, Arc<Notify>)> {
        if s.entity.is_builtin() {
            return None; // Daemons and client.admin live as long as the cluster secret.
        }
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        let kill = Arc::new(Notify::new());
        self.sessions
            .lock()
            .expect("sessions lock")
            .insert(id, (s.clone(), kill.clone()));
        Some((id, kill))
    }

    fn unregister(&self, id: u64) {
        self.sessions.lock().expect("sessions lock").remove(&id);
    }

    /// End the sessions whose entity is gone or has a new generation; returns how many.
    async fn revoke_stale(&self) -> usize {
        if self.sessions.lock().expect("sessions lock").is_empty() {
            return 0;
        }
        let live = match self.authority.live_generations().await {
            Ok(live) => live,
            // Metadata unreachable: keep the sessions; the next check decides.
            Err(e) => {
                tracing::debug!("revocation check skipped: {e}");
                return 0;
            }
        };
        let sessions = self.sessions.lock().expect("sessions lock");
        let mut n = 0;
        for (s, kill) in sessions.values() {
            if live.get(s.entity.as_str()) != Some(&s.generation) {
                kill.notify_one();
                n += 1;
            }
        }
        n
    }
}

/// Serve a TCP connection: the handshake first when the OSD authenticates, then requests
/// within the session's capabilities until it closes or its entity is revoked.
pub async fn serve_tcp<R, W>(osd: Arc<Osd>, mut rd: R, mut wr: W, peer: String)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Some(auth) = osd.auth.clone() else {
        return serve_connection(osd, rd, wr, peer, None).await;
    };
    let session = match basalt_auth::accept(&mut rd, &mut wr, auth.authority.as_ref()).await {
        Ok(s) => s,
        Err(r) => {
            osd.auth_counters.refusal(&r);
            tracing::warn!(osd = osd.id, %peer, "refused a connection: {r}");
            return;
        }
    };
    osd.auth_counters.accepted.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(osd = osd.id, %peer, entity = %session.entity, caps = %session.caps, "authenticated");
    let caps = session.caps;
    match auth.register(&session) {
        None => serve_connection(osd, rd, wr, peer, Some(caps)).await,
        Some((id, kill)) => {
            tokio::select! {
                _ = serve_connection(osd.clone(), rd, wr, peer.clone(), Some(caps)) => {}
                _ = kill.notified() => {
                    osd.auth_counters.revoked_sessions.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(osd = osd.id, %peer, entity = %session.entity,
                        "closed the connection of a revoked entity");
                }
            }
            auth.unregister(id);
        }
    }
}

/// May a connection with `caps` (None: no authentication) send this request?
pub fn permitted(caps: Option<Caps>, header: &basalt_proto::Header) -> bool {
    caps.is_none_or(|c| c.permits(header))
}

/// Check open sessions against the entity records every [`REVOCATION_CHECK`] until `stop`.
pub async fn watch_revocations(auth: Arc<OsdAuth>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(REVOCATION_CHECK) => {}
        }
        let n = auth.revoke_stale().await;
        if n > 0 {
            tracing::info!("revoked {n} session(s)");
        }
    }
}
