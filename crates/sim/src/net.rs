//! The simulated network: every data-plane connection (client → OSD and OSD → OSD) is a
//! pair of in-process pipes joined by two pump tasks that delay each chunk by a seeded
//! latency. Faults: a node goes down (its links reset, it cannot listen or dial), a pair of
//! nodes is partitioned (their links reset, dials fail), a node is cut from the metadata
//! store (see [`crate::meta`]), a node's links are reset.
//!
//! Each start of a node is an *incarnation*: handles made for an older one (a killed
//! process's zombie tasks) are refused everything, as a dead process would be.

use crate::rng::SimRng;
use basalt_client::{ClientError, Connection, Dialer};
use basalt_osd::{Accepted, Listener};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

/// A node: an OSD id, or one of the fixed ids below.
pub type NodeId = u32;
/// The monitor's node.
pub const MON_NODE: NodeId = 1000;
/// The client's node (the workload).
pub const CLIENT_NODE: NodeId = 1001;

/// Bytes a pipe buffers before its writer waits.
const PIPE_BYTES: usize = 64 << 10;
/// Largest chunk a pump moves at once.
const CHUNK_BYTES: usize = 64 << 10;

#[derive(Default)]
struct NodeState {
    incarnation: u64,
    up: bool,
    meta_cut: bool,
}

struct Link {
    a: NodeId,
    b: NodeId,
    pumps: [AbortHandle; 2],
}

struct State {
    nodes: BTreeMap<NodeId, NodeState>,
    /// addr → (node, where its connections go).
    listeners: BTreeMap<String, (NodeId, mpsc::UnboundedSender<Accepted>)>,
    /// Partitioned pairs, (low, high).
    cut: BTreeSet<(NodeId, NodeId)>,
    links: BTreeMap<u64, Link>,
    next_link: u64,
    /// Per-chunk one-way latency range in microseconds.
    latency_us: (u64, u64),
    rng: SimRng,
}

/// The network all simulated nodes share.
pub struct SimNet {
    state: Mutex<State>,
    /// Bumped at every change of metadata reachability, so watches can end promptly.
    meta_changes: watch::Sender<u64>,
}

fn pair(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
    (a.min(b), a.max(b))
}

impl SimNet {
    /// An empty network whose latencies come from `rng`.
    pub fn new(rng: SimRng) -> Arc<SimNet> {
        Arc::new(SimNet {
            state: Mutex::new(State {
                nodes: BTreeMap::new(),
                listeners: BTreeMap::new(),
                cut: BTreeSet::new(),
                links: BTreeMap::new(),
                next_link: 1,
                latency_us: (20, 200),
                rng,
            }),
            meta_changes: watch::channel(0).0,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("net lock")
    }

    /// Start a new incarnation of `node` (up, reaching the metadata); returns it.
    pub fn start_node(&self, node: NodeId) -> u64 {
        let mut st = self.lock();
        let n = st.nodes.entry(node).or_default();
        n.incarnation += 1;
        n.up = true;
        n.meta_cut = false;
        let inc = n.incarnation;
        drop(st);
        self.meta_changed();
        inc
    }

    /// `node` died: its links reset, its listener closes, its handles stop working.
    pub fn kill_node(&self, node: NodeId) {
        let mut st = self.lock();
        if let Some(n) = st.nodes.get_mut(&node) {
            n.up = false;
            n.incarnation += 1;
        }
        st.listeners.retain(|_, (n, _)| *n != node);
        reset_links(&mut st, |l| l.a == node || l.b == node);
        drop(st);
        self.meta_changed();
    }

    /// Is `incarnation` of `node` the live one?
    pub fn alive(&self, node: NodeId, incarnation: u64) -> bool {
        let st = self.lock();
        st.nodes
            .get(&node)
            .is_some_and(|n| n.up && n.incarnation == incarnation)
    }

    /// Can `incarnation` of `node` reach the metadata store?
    pub fn reaches_meta(&self, node: NodeId, incarnation: u64) -> bool {
        let st = self.lock();
        st.nodes
            .get(&node)
            .is_some_and(|n| n.up && n.incarnation == incarnation && !n.meta_cut)
    }

    /// Cut `node` from the metadata store, or reconnect it.
    pub fn set_meta_cut(&self, node: NodeId, cut: bool) {
        if let Some(n) = self.lock().nodes.get_mut(&node) {
            n.meta_cut = cut;
        }
        self.meta_changed();
    }

    fn meta_changed(&self) {
        self.meta_changes.send_modify(|v| *v += 1);
    }

    /// A receiver told of every change of metadata reachability.
    pub fn meta_changes(&self) -> watch::Receiver<u64> {
        self.meta_changes.subscribe()
    }

    /// Partition `a` from `b` (both ways), or heal it.
    pub fn set_partition(&self, a: NodeId, b: NodeId, cut: bool) {
        let mut st = self.lock();
        if cut {
            st.cut.insert(pair(a, b));
            reset_links(&mut st, |l| pair(l.a, l.b) == pair(a, b));
        } else {
            st.cut.remove(&pair(a, b));
        }
    }

    /// Heal every partition and metadata cut.
    pub fn heal_all(&self) {
        let mut st = self.lock();
        st.cut.clear();
        for n in st.nodes.values_mut() {
            n.meta_cut = false;
        }
        drop(st);
        self.meta_changed();
    }

    /// Reset every link of `node` (connections fail; new dials work).
    pub fn reset_links_of(&self, node: NodeId) {
        reset_links(&mut self.lock(), |l| l.a == node || l.b == node);
    }

    /// Set the per-chunk latency range.
    pub fn set_latency_us(&self, lo: u64, hi: u64) {
        self.lock().latency_us = (lo, hi.max(lo));
    }

    /// A listener for the OSD of `node` at `addr` (replaces an older one).
    pub fn listen(&self, node: NodeId, addr: &str) -> Arc<dyn Listener> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().listeners.insert(addr.to_string(), (node, tx));
        Arc::new(SimListener {
            rx: tokio::sync::Mutex::new(rx),
        })
    }

    /// A dialer for `incarnation` of `node`.
    pub fn dialer(self: &Arc<Self>, node: NodeId, incarnation: u64) -> Arc<dyn Dialer> {
        Arc::new(SimDialer {
            net: self.clone(),
            node,
            incarnation,
        })
    }

    /// One chunk's latency.
    fn latency(&self) -> Duration {
        let mut st = self.lock();
        let (lo, hi) = st.latency_us;
        Duration::from_micros(st.rng.between(lo, hi))
    }

    /// Open a link from `from` to the listener at `addr`.
    fn connect(
        self: &Arc<Self>,
        from: NodeId,
        incarnation: u64,
        addr: &str,
    ) -> Result<Connection, Refused> {
        let mut st = self.lock();
        let from_live = st
            .nodes
            .get(&from)
            .is_some_and(|n| n.up && n.incarnation == incarnation);
        if !from_live {
            return Err(Refused::DeadCaller);
        }
        let Some((to, tx)) = st.listeners.get(addr).map(|(n, tx)| (*n, tx.clone())) else {
            return Err(Refused::NotListening);
        };
        if st.cut.contains(&pair(from, to)) {
            return Err(Refused::Partitioned);
        }
        let (near, far_a) = tokio::io::duplex(PIPE_BYTES);
        let (far_b, server) = tokio::io::duplex(PIPE_BYTES);
        let (ra, wa) = tokio::io::split(far_a);
        let (rb, wb) = tokio::io::split(far_b);
        let up = tokio::spawn(pump(self.clone(), ra, wb));
        let down = tokio::spawn(pump(self.clone(), rb, wa));
        let id = st.next_link;
        st.next_link += 1;
        st.links.insert(
            id,
            Link {
                a: from,
                b: to,
                pumps: [up.abort_handle(), down.abort_handle()],
            },
        );
        drop(st);
        if tx.send((Box::new(server), format!("node{from}"))).is_err() {
            return Err(Refused::NotListening);
        }
        Ok(Connection::over_stream(near, addr))
    }
}

/// Why a dial failed.
#[derive(Debug)]
enum Refused {
    NotListening,
    Partitioned,
    DeadCaller,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::NotListening => "connection refused (nothing listens there)",
            Refused::Partitioned => "connect timed out (partitioned)",
            Refused::DeadCaller => "the calling process is dead",
        })
    }
}

/// How long a connect across a partition takes to fail.
const PARTITIONED_CONNECT: Duration = Duration::from_secs(1);

fn reset_links(st: &mut State, matches: impl Fn(&Link) -> bool) {
    let ids: Vec<u64> = st
        .links
        .iter()
        .filter(|(_, l)| matches(l))
        .map(|(id, _)| *id)
        .collect();
    for id in ids {
        if let Some(link) = st.links.remove(&id) {
            for p in link.pumps {
                p.abort();
            }
        }
    }
}

/// Move bytes from `rd` to `wr`, each chunk after a latency; close `wr` at the end.
async fn pump<R, W>(net: Arc<SimNet>, mut rd: R, mut wr: W)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; CHUNK_BYTES];
    // Bound: ends at EOF or on the first error (a reset link is aborted instead).
    loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        tokio::time::sleep(net.latency()).await;
        if wr.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

struct SimListener {
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Accepted>>,
}

impl Listener for SimListener {
    fn accept(&self) -> Pin<Box<dyn Future<Output = Option<Accepted>> + Send + '_>> {
        Box::pin(async move { self.rx.lock().await.recv().await })
    }
}

struct SimDialer {
    net: Arc<SimNet>,
    node: NodeId,
    incarnation: u64,
}

impl Dialer for SimDialer {
    fn dial<'a>(
        &'a self,
        addr: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Connection, ClientError>> + Send + 'a>> {
        Box::pin(async move {
            // A connect takes a round trip.
            tokio::time::sleep(self.net.latency() * 2).await;
            let connected = self.net.connect(self.node, self.incarnation, addr);
            if let Err(Refused::Partitioned) = connected {
                // Nothing answers across a partition: the connect times out.
                tokio::time::sleep(PARTITIONED_CONNECT).await;
            }
            connected.map_err(|why| ClientError::Connect {
                addr: addr.to_string(),
                reason: why.to_string(),
            })
        })
    }
}
