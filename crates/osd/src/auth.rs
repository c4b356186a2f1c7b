//! The OSD's side of data-plane authentication: the handshake on every TCP connection,
//! capability checks, revocation of open sessions, and their counters (docs/design.md,
//! "Data-plane authentication").

use crate::daemon::Osd;
use crate::handler::serve_connection;
use basalt_auth::{Authority, Caps, Refusal, Session, HANDSHAKE_TIMEOUT};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Notify};

/// How often open sessions of client entities are checked against the entity records
/// when the records cannot be watched.
pub const REVOCATION_CHECK: Duration = Duration::from_secs(1);
/// How often they are checked with the watch in place (a safety net: a change to the
/// records triggers a check at once).
pub const REVOCATION_RECHECK: Duration = Duration::from_secs(30);

/// Refusal reasons, in the order of [`AuthCounters::refused`]; the last two are data-plane
/// TLS's (a plaintext peer of a TLS OSD, a failed TLS handshake).
pub const REFUSAL_LABELS: [&str; 8] = [
    "malformed",
    "unknown_entity",
    "bad_proof",
    "lookup_failed",
    "timeout",
    "io",
    "plaintext",
    "tls",
];

/// Handshake and capability counters (`/metrics`).
#[derive(Default, Debug)]
pub struct AuthCounters {
    /// Handshakes accepted.
    pub accepted: AtomicU64,
    /// Handshakes refused, by [`REFUSAL_LABELS`].
    pub refused: [AtomicU64; 8],
    /// Requests answered Denied (outside the connection's capabilities).
    pub denied_requests: AtomicU64,
    /// Open sessions closed because their entity was revoked.
    pub revoked_sessions: AtomicU64,
}

impl AuthCounters {
    fn refusal(&self, r: &Refusal) {
        self.refused_as(r.label());
    }

    fn refused_as(&self, label: &str) {
        let i = REFUSAL_LABELS.iter().position(|l| *l == label).unwrap_or(5);
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

/// Serve a TCP connection of a TLS-only OSD: the TLS handshake (bounded like the
/// authentication handshake), then [`serve_tcp`] inside the session. A plaintext peer is
/// told that TLS is required (a Challenge-sized notice its handshake reports) and closed.
pub async fn serve_tls(
    osd: Arc<Osd>,
    stream: tokio::net::TcpStream,
    tls: Arc<basalt_auth::DataTls>,
    peer: String,
) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == basalt_auth::tls::TLS_HANDSHAKE_RECORD => {}
        Ok(Ok(1)) => {
            osd.auth_counters.refused_as("plaintext");
            tracing::warn!(osd = osd.id, %peer,
                "refused a plaintext connection: this OSD requires data-plane TLS");
            refuse_plaintext(stream).await;
            return;
        }
        Ok(_) => return, // Closed before a byte.
        Err(_) => {
            osd.auth_counters.refused_as("timeout");
            return;
        }
    }
    let session = match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            osd.auth_counters.refused_as("tls");
            tracing::warn!(osd = osd.id, %peer, "refused a connection: TLS handshake failed: {e}");
            return;
        }
        Err(_) => {
            osd.auth_counters.refused_as("timeout");
            return;
        }
    };
    let (rd, wr) = tokio::io::split(session);
    serve_tcp(osd, rd, wr, peer).await
}

/// Answer a plaintext Hello with the TLS-required notice. The Hello is read first, so the
/// close that follows is not a reset that could overtake the notice.
async fn refuse_plaintext(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut hello = [0u8; basalt_auth::handshake::HELLO_HEAD_BYTES + 64];
    let _ = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut hello)).await;
    let notice = basalt_auth::handshake::encode_tls_required();
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        stream.write_all(&notice).await?;
        stream.shutdown().await
    })
    .await;
}

/// May a connection with `caps` (None: no authentication) send this request?
pub fn permitted(caps: Option<Caps>, header: &basalt_proto::Header) -> bool {
    caps.is_none_or(|c| c.permits(header))
}

/// Check open sessions against the entity records whenever one changes (watched), every
/// [`REVOCATION_RECHECK`] in any case, and every [`REVOCATION_CHECK`] while the watch is
/// missing; until `stop`. An idle cluster then makes no metadata request for this.
pub async fn watch_revocations(auth: Arc<OsdAuth>, mut stop: watch::Receiver<bool>) {
    // Bound: one round per watch set up, until stopped.
    loop {
        // Watch first, then check: a change between the two is seen by one or the other.
        let mut changes = auth.authority.watch_entities().await.ok();
        let every = match changes {
            Some(_) => REVOCATION_RECHECK,
            None => REVOCATION_CHECK,
        };
        // Bound: one check per change or timer, until the watch ends or stop.
        loop {
            let n = auth.revoke_stale().await;
            if n > 0 {
                tracing::info!("revoked {n} session(s)");
            }
            let changed = async {
                match changes.as_mut() {
                    Some(rx) => matches!(rx.recv().await, Some(Ok(_))),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.changed() => return,
                alive = changed => if !alive {
                    break;
                },
                _ = tokio::time::sleep(every) => {}
            }
        }
        // The watch ended: set it up again after a pause.
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(REVOCATION_CHECK) => {}
        }
    }
}
