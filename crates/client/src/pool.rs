//! A cache of live connections, one per OSD.

use crate::conn::{Connection, Dialer, TcpDialer};
use crate::error::ClientError;
use basalt_auth::Credentials;
use basalt_proto::OsdId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Connections to OSDs, opened on first use and replaced when they die.
pub struct ConnPool {
    conns: Mutex<HashMap<OsdId, Arc<Connection>>>,
    /// Serialises connection set-up so a burst of requests opens one socket per OSD.
    connecting: tokio::sync::Mutex<()>,
    dialer: Arc<dyn Dialer>,
}

impl Default for ConnPool {
    fn default() -> Self {
        Self::with_dialer(Arc::new(TcpDialer::default()))
    }
}

impl ConnPool {
    /// A pool that connects over TCP.
    pub fn new() -> Self {
        Self::default()
    }

    /// A pool that connects over TCP and proves `credentials` to every OSD (None: no
    /// handshake, for clusters without authentication).
    pub fn authenticated(credentials: Option<Credentials>) -> Self {
        Self::with_dialer(Arc::new(TcpDialer { credentials }))
    }

    /// A pool that opens its connections with `dialer`.
    pub fn with_dialer(dialer: Arc<dyn Dialer>) -> Self {
        Self {
            conns: Mutex::new(HashMap::new()),
            connecting: tokio::sync::Mutex::new(()),
            dialer,
        }
    }

    /// The live connection to `osd` at `addr`, opening one if needed.
    pub async fn get(&self, osd: OsdId, addr: &str) -> Result<Arc<Connection>, ClientError> {
        if let Some(c) = self.cached(osd, addr) {
            return Ok(c);
        }
        let _guard = self.connecting.lock().await;
        if let Some(c) = self.cached(osd, addr) {
            return Ok(c);
        }
        let conn = Arc::new(self.dialer.dial(addr).await?);
        self.conns
            .lock()
            .expect("conns lock")
            .insert(osd, conn.clone());
        Ok(conn)
    }

    /// A cached live connection whose address still matches the map.
    fn cached(&self, osd: OsdId, addr: &str) -> Option<Arc<Connection>> {
        let conns = self.conns.lock().expect("conns lock");
        conns
            .get(&osd)
            .filter(|c| !c.is_dead() && c.addr() == addr)
            .cloned()
    }

    /// Route requests for `osd` at `addr` to an in-process handler instead of TCP.
    pub fn add_local(&self, osd: OsdId, addr: &str, handler: Arc<dyn crate::conn::LocalHandler>) {
        let conn = Arc::new(Connection::local(handler, addr));
        self.conns.lock().expect("conns lock").insert(osd, conn);
    }

    /// Route requests for `osd` at `addr` to an in-process handler run by a task of its own,
    /// in the order they are started ([`Connection::queued`]).
    pub fn add_queued(&self, osd: OsdId, addr: &str, handler: Arc<dyn crate::conn::LocalHandler>) {
        let conn = Arc::new(Connection::queued(handler, addr));
        self.conns.lock().expect("conns lock").insert(osd, conn);
    }

    /// Drop every connection.
    pub fn clear(&self) {
        self.conns.lock().expect("conns lock").clear();
    }
}
