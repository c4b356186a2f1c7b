//! Serving one data-plane connection: decode requests, run them, send replies.
//!
//! Client requests (no REPLICA flag) are served only by the active primary of their PG in
//! the current interval. Replica requests are applied only when they come from the current
//! interval (not sealed) and, for mutations, only when this copy is at the version the
//! primary expects; otherwise the primary pushes the whole object.

use crate::daemon::Osd;
use crate::decide::LocalReadRefusal;
use crate::layers::{first_holder, LayerError};
use crate::metrics::OsdCounters;
use crate::pg::PgPhase;
use crate::recovery::{apply_image, push_object, read_image, ListScope, PushKind};
use crate::slow::OpGuard;
use basalt_client::frame_io::{read_frame, write_frames};
use basalt_client::{LocalHandler, ReplySink};
use basalt_metrics::LatencyHistogram;
use basalt_placement::ClusterMap;
use basalt_proto::image::put_list_entry;
use basalt_proto::slowop::SlowStage;
use basalt_proto::{
    inode_pool, Flags, Header, InodeId, ObjectId, ObjectImage, Opcode, OsdId, PgId, Status,
    Version, LIST_ENTRY_BYTES, LIST_MAX_ENTRIES, MAX_PAYLOAD_BYTES,
};
use basalt_store::{EdgeBlocks, StoreError};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Bytes of the STAT reply's counters (eleven u64) before its slow-op list.
pub const STAT_WORDS_BYTES: usize = 88;

/// Requests one connection may have in progress; the reader stops reading past this.
const MAX_IN_FLIGHT_PER_CONN: usize = 1024;

/// Zeros for trims of shadowed objects, which write zeros instead (largest object size).
static ZEROS: [u8; 4 << 20] = [0; 4 << 20];

/// Longest wait for a replica's acknowledgement before the write is failed.
pub(crate) const REPLICA_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Serve requests on a connection (its two halves) until it closes or sends a malformed
/// frame.
///
/// `caps` are the connection's capabilities when the OSD authenticates (None: it does
/// not); a request outside them is answered Denied and not run.
pub async fn serve_connection<R, W>(
    osd: Arc<Osd>,
    rd: R,
    wr: W,
    peer: String,
    caps: Option<basalt_auth::Caps>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut rd = tokio::io::BufReader::with_capacity(basalt_client::conn::READ_BUFFER_BYTES, rd);
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_frames(wr, rx));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONN));
    loop {
        let (mut header, payload) = match read_frame(&mut rd).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(osd = osd.id, %peer, "closing connection: {e}");
                break;
            }
        };
        // `read_frame` checked the payload against its crc: say so for whoever forwards it.
        header.flags = Flags(header.flags.0 | Flags::CRC_CHECKED);
        if header.flags.has(Flags::REPLY) {
            tracing::warn!(osd = osd.id, %peer, "closing connection: reply frame sent to a server");
            break;
        }
        if !crate::auth::permitted(caps, &header) {
            osd.auth_counters
                .denied_requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(osd = osd.id, %peer, opcode = ?header.opcode, "denied: outside the connection's capabilities");
            ReplySink::Stream(tx.clone()).send(header.reply(Status::Denied), Bytes::new());
            continue;
        }
        let permit = match in_flight.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => break,
        };
        if is_replica_mutation(&header) && osd.store.write_would_flush() {
            // Past the bound: flush here, awaited, off the runtime's threads, before the
            // mutation is applied inline below (the store would flush inside the write itself,
            // holding this runtime thread, past twice the bound). The connection's later frames wait, keeping the primary's order.
            // (A failure stops the store; the mutation then says so.)
            flush(&osd).await;
        }
        dispatch(
            &osd,
            header,
            payload,
            ReplySink::Stream(tx.clone()),
            Some(permit),
        );
    }
    drop(tx);
    let _ = writer.await;
}

/// May this OSD apply a mutation a primary sends it as a member of a PG, in the interval
/// that began at `interval`? Not while the map does not know this run (a restarted OSD may
/// have lost unflushed writes: it takes none until a new interval re-peers its PGs), nor
/// from an interval its map shows it down after (it flushed its store on seeing that and
/// tells the cluster it holds nothing unflushed, which FLUSHes rely on). An interval newer
/// than its map is the sender's, whose map has it up again: taken, as before. Checked under
/// the PG's shard lock, so a flush that begins after [`crate::pg::PgTable::barrier`] covers
/// every member write let through under the earlier map.
pub(crate) fn member_may_write(osd: &Osd, interval: u32) -> bool {
    let map = osd.map();
    map.osds
        .get(&osd.id)
        .is_some_and(|o| o.incarnation == osd.incarnation && (o.up || interval > map.epoch))
}

/// A mutation or push from a PG's primary: applied inline by [`dispatch`].
fn is_replica_mutation(h: &Header) -> bool {
    h.flags.has(Flags::REPLICA)
        && matches!(
            h.opcode,
            Opcode::Write | Opcode::Trim | Opcode::Delete | Opcode::Push
        )
}

/// A request about to be queued for its own task: its queue-wait histogram and its slot in
/// the in-flight table (stage `queued`).
pub(crate) struct Queued {
    queue_wait: LatencyHistogram,
    op: OpGuard,
}

impl Queued {
    pub(crate) fn new(osd: &Osd, h: &Header) -> Self {
        Self {
            queue_wait: osd.counters.latency.queue_wait.clone(),
            op: osd.slow.start(h, SlowStage::Queued),
        }
    }
}

/// Run `fut` in its own task and send its reply; the permit is held until then. The delay
/// before the task starts goes to `queue_wait`; the operation is watched for slowness until
/// it is answered.
fn spawn_reply<F>(
    queued: Queued,
    sink: ReplySink,
    h: Header,
    permit: Option<OwnedSemaphorePermit>,
    fut: F,
) where
    F: std::future::Future<Output = (Status, Bytes)> + Send + 'static,
{
    let since = basalt_metrics::now();
    let Queued { queue_wait, op } = queued;
    tokio::spawn(crate::slow::scope(op, async move {
        queue_wait.observe_since(since);
        drop(queue_wait);
        crate::slow::stage(SlowStage::Running, None);
        let (status, data) = fut.await;
        sink.send(h.reply(status), data);
        drop(permit);
    }));
}

/// Run one request. Replica mutations are applied here, in arrival order, so replicas apply a
/// PG's mutations in the order their primary assigned versions; everything that may wait runs
/// in its own task. `permit` (TCP connections) bounds the requests in progress per connection.
pub(crate) fn dispatch(
    osd: &Arc<Osd>,
    h: Header,
    payload: Bytes,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let replica = h.flags.has(Flags::REPLICA);
    if h.flags.has(Flags::LOCAL_READ) && (replica || h.opcode != Opcode::Read) {
        // Only a gateway's READ may ask a member for its own copy: refused, not ignored.
        sink.send(h.reply(Status::Invalid), Bytes::new());
        return;
    }
    match h.opcode {
        Opcode::Ping if replica => sink.send(crate::heartbeat::answer(osd, &h), Bytes::new()),
        Opcode::Ping => sink.send(h.reply(Status::Ok), Bytes::new()),
        Opcode::Stat => sink.send(h.reply(Status::Ok), stat(osd)),
        Opcode::Usage => usage_request(osd, h, payload, sink, permit),
        Opcode::Flush => {
            let osd = osd.clone();
            spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
                (flush(&osd).await, Bytes::new())
            });
        }
        Opcode::Purge => {
            let osd = osd.clone();
            spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
                (purge(&osd, h).await, Bytes::new())
            });
        }
        // Recovery messages come only from peer OSDs: a LIST also seals the PG, which a
        // stray client request must not be able to do.
        Opcode::List | Opcode::Pull if !replica => {
            sink.send(h.reply(Status::Invalid), Bytes::new());
        }
        Opcode::List | Opcode::Pull if !expected_incarnation(osd, &h) => {
            sink.send(h.reply(Status::Unavailable), Bytes::new());
        }
        Opcode::List if seal_must_wait(osd, &h) || predecessors_unsealed(osd, &h) => {
            // A seal for a newer interval: judged against the request's map, after every
            // promise this OSD gave a run that map shows down has run out.
            let osd = osd.clone();
            tokio::spawn(async move {
                let reply = if crate::heartbeat::wait_for_map(&osd, h.map_epoch, MAP_WAIT).await {
                    let dropped = crate::heartbeat::dropped_by_seal(&osd, h.pg, h.map_epoch, None);
                    crate::heartbeat::wait_to_seal(&osd, &dropped, h.map_epoch).await;
                    if let Ok(Some(scope)) = ListScope::decode(h.prev_version, h.pg) {
                        crate::peering::seal_predecessors(&osd, h.pg, scope).await;
                    }
                    list(&osd, &h)
                } else {
                    (Status::Unavailable, Bytes::new())
                };
                sink.send(h.reply(reply.0), reply.1);
                drop(permit);
            });
        }
        Opcode::List => {
            let (status, data) = list(osd, &h);
            sink.send(h.reply(status), data);
        }
        Opcode::Pull if osd.store.awaits_io() => {
            // The store's reads are awaited (direct I/O): in a task of their own.
            let osd = osd.clone();
            tokio::spawn(async move {
                let read = crate::recovery::read_image_async(&osd, h.object).await;
                let (status, version, data) = pull_reply(&osd, &h, read);
                let mut reply = h.reply(status);
                reply.version = version;
                sink.send(reply, data);
                drop(permit);
            });
        }
        Opcode::Pull => {
            let read = read_image(osd, h.object);
            let (status, version, data) = pull_reply(osd, &h, read);
            let mut reply = h.reply(status);
            reply.version = version;
            sink.send(reply, data);
        }
        Opcode::Complete if !replica => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::Complete if !expected_incarnation(osd, &h) => {
            sink.send(h.reply(Status::Unavailable), Bytes::new());
        }
        Opcode::Complete => {
            let osd = osd.clone();
            tokio::spawn(async move {
                let status = note_complete(&osd, &h).await;
                sink.send(h.reply(status), Bytes::new());
                drop(permit);
            });
        }
        Opcode::Read if !replica && h.flags.has(Flags::LOCAL_READ) => {
            local_read_request(osd, h, sink, permit);
        }
        Opcode::Read if replica => {
            // Another OSD's damaged-read fallback, or an erasure-coded primary reading a
            // chunk: our own verified copy, with its version (zero: absent).
            if osd.store.awaits_io() {
                let osd = osd.clone();
                tokio::spawn(async move {
                    let version = osd.store.version(h.object).unwrap_or(Version::ZERO);
                    let (status, data) = read_awaited(&osd, &h).await;
                    let mut reply = h.reply(status);
                    reply.version = version;
                    sink.send(reply, data);
                    drop(permit);
                });
                return;
            }
            let (status, data) = read(osd, &h);
            let mut reply = h.reply(status);
            reply.version = osd.store.version(h.object).unwrap_or(Version::ZERO);
            sink.send(reply, data);
        }
        Opcode::Promote if replica && h.object.is_partial_stash() => {
            crate::ec::member_merge(osd, h, sink, permit)
        }
        Opcode::Promote if replica => {
            let status = crate::ec::member_promote(osd, &h);
            sink.send(h.reply(status), Bytes::new());
        }
        Opcode::Promote => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::Stash if replica => crate::ec::member_stash(osd, h, payload, sink, permit),
        Opcode::Stash => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::MarkUnfoundLost if replica => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::MarkUnfoundLost => {
            let osd = osd.clone();
            spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
                crate::ec::mark_unfound_lost(&osd, h).await
            });
        }
        Opcode::Scrub if replica => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::Scrub => {
            let osd = osd.clone();
            spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
                crate::scrub::scrub(&osd, h).await
            });
        }
        // Erasure-coded PGs have their own client paths; object classes are not served
        // there (yet): refused, never half done.
        Opcode::Call if crate::ec::is_ec(osd, h.pg) => {
            sink.send(h.reply(Status::Invalid), Bytes::new());
        }
        Opcode::CopyUp if !replica && crate::ec::is_ec(osd, h.pg) => {
            let osd = osd.clone();
            spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
                (crate::ec::client_copy_up(&osd, h).await, Bytes::new())
            });
        }
        Opcode::Read | Opcode::Allocation | Opcode::Write | Opcode::Trim | Opcode::Delete
            if !replica && crate::ec::is_ec(osd, h.pg) =>
        {
            ec_client_request(osd, h, payload, sink, permit);
        }
        Opcode::Write | Opcode::Trim | Opcode::Delete | Opcode::Push if replica => {
            replica_request(osd, h, payload, sink, permit);
        }
        Opcode::Push => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::CopyUp if replica => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::CopyUp => {
            let osd = osd.clone();
            spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
                (primary_copy_up(&osd, h).await, Bytes::new())
            });
        }
        Opcode::Fence if replica => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::Fence => fence_request(osd, h, sink, permit),
        // Object classes run on the primary only; replicas get their effect as plain writes.
        Opcode::Call if replica => sink.send(h.reply(Status::Invalid), Bytes::new()),
        Opcode::Call => {
            let osd = osd.clone();
            spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
                crate::kv::call(&osd, h, payload).await
            });
        }
        Opcode::Read | Opcode::Allocation => client_read_request(osd, h, sink, permit),
        Opcode::Write | Opcode::Trim | Opcode::Delete => {
            client_mutation_request(osd, h, payload, sink, permit);
        }
    }
}

/// USAGE: the space this OSD's objects of the asked inodes take (read from the store's
/// counters: no walk, so no thread of its own).
fn usage_request(
    osd: &Arc<Osd>,
    h: Header,
    payload: Bytes,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let osd = osd.clone();
    spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
        match usage(&osd.store, &payload) {
            Some(out) => (Status::Ok, out),
            None => (Status::Invalid, Bytes::new()),
        }
    });
}

/// A mutation or push from a PG's primary: applied inline, in arrival order (watched for
/// slowness while it runs); with FUA, answered once flushed, from its own task.
fn replica_request(
    osd: &Arc<Osd>,
    h: Header,
    payload: Bytes,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let op = osd.slow.start(&h, SlowStage::StoreWrite);
    let status = replica_apply(osd, &h, &payload);
    drop(op);
    if status == Status::Ok {
        OsdCounters::add(&osd.counters.replica_ops, 1);
    }
    if status == Status::Ok && h.flags.has(Flags::FUA) {
        let osd = osd.clone();
        spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
            (flush(&osd).await, Bytes::new())
        });
    } else {
        sink.send(h.reply(status), Bytes::new());
    }
}

/// FENCE: freeze a layer, answered once no mutation that saw it unfrozen is in progress.
fn fence_request(osd: &Arc<Osd>, h: Header, sink: ReplySink, permit: Option<OwnedSemaphorePermit>) {
    let osd = osd.clone();
    spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
        osd.layers.fence(h.object.inode).await;
        tracing::info!(osd = osd.id, "layer {:#x} frozen", h.object.inode);
        (Status::Ok, Bytes::new())
    });
}

/// A client READ or ALLOCATION of a replicated PG: checked as the active primary, then
/// served from its copy ([`read_own_copy`]).
fn client_read_request(
    osd: &Arc<Osd>,
    h: Header,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    if let Err(status) = primary_gate(osd, &h) {
        osd.counters.error(status);
        sink.send(h.reply(status), Bytes::new());
        return;
    }
    read_own_copy(osd, h, sink, permit);
}

/// A READ or ALLOCATION its gate let through, from this OSD's copy: refused on a frozen
/// layer (unless a snapshot read), else served from the layer chain (inline when it is
/// cached, else from a task that loads it).
fn read_own_copy(osd: &Arc<Osd>, h: Header, sink: ReplySink, permit: Option<OwnedSemaphorePermit>) {
    if osd.layers.is_frozen(h.object.inode) && !h.flags.has(Flags::SNAPSHOT) {
        // A reader that has not learnt of the snapshot must not see the old head.
        sink.send(h.reply(Status::Frozen), Bytes::new());
        return;
    }
    match osd.layers.cached_chain(h.object.inode) {
        Some(chain) => serve_read(osd, h, &chain, sink, permit),
        None => {
            let osd = osd.clone();
            tokio::spawn(async move {
                match osd.layers.chain(osd.meta.as_ref(), h.object.inode).await {
                    Ok(chain) => serve_read(&osd, h, &chain, sink, permit),
                    Err(e) => sink.send(h.reply(layer_status(&osd, &h, &e)), Bytes::new()),
                }
            });
        }
    }
}

/// How many 50 ms waits a COMPLETE gives this OSD's PG entry to reach the interval it names.
const COMPLETE_WAIT_ROUNDS: u32 = 40;

/// COMPLETE from the primary of this OSD's interval of PG `h.pg` (`object`: the sender's id
/// and run): this copy is complete in interval `h.map_epoch`, and that interval is the PG's
/// last activated one. Stale when this OSD's entry has moved on (or was sealed past it).
async fn note_complete(osd: &Osd, h: &Header) -> Status {
    // The primary activated the interval after sealing this copy for it, but this OSD's
    // entry may not have reached it yet (its map arrives, then the entry follows).
    // Bound: a few short waits, then the notice is dropped (the reads go to the primary).
    for _ in 0..COMPLETE_WAIT_ROUNDS {
        let behind = osd.pgs.with(h.pg, |e| e.interval < h.map_epoch);
        if !behind {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let sender = (h.object.inode as OsdId, h.object.index);
    osd.pgs.with(h.pg, |e| {
        let current = e.interval == h.map_epoch
            && e.phase == PgPhase::Replica
            && e.sealed <= e.interval
            && e.acting.first() == Some(&sender)
            && e.acting.iter().any(|a| a.0 == osd.id);
        if !current {
            return Status::Stale;
        }
        e.complete_in = e.interval;
        e.since_active = e.acting.iter().map(|a| a.0).collect();
        Status::Ok
    })
}

/// A gateway's READ of a replicated PG sent to this member, not to the primary
/// ([`Flags::LOCAL_READ`]): served from this copy, like the primary's reads, when
/// [`local_gate`] allows it; else NotPrimary, and the gateway asks the primary.
fn local_read_request(
    osd: &Arc<Osd>,
    h: Header,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    if let Err(why) = local_gate(osd, &h) {
        tracing::trace!(osd = osd.id, pg = %h.pg, ?why, "local read refused");
        crate::metrics::OsdCounters::add(&osd.counters.local_read_refusals, 1);
        sink.send(h.reply(Status::NotPrimary), Bytes::new());
        return;
    }
    crate::metrics::OsdCounters::add(&osd.counters.local_reads, 1);
    read_own_copy(osd, h, sink, permit);
}

/// May this OSD serve the gateway's LOCAL_READ `h` from its own copy (docs/design.md,
/// "Reads from a local replica")? Not without peer leases (OSDs of one process run
/// without heartbeats: nothing would bound a stale replica), not when fenced (its liveness
/// lease lapsed), not for an erasure-coded PG, not when the gateway's map is newer than
/// ours; else as [`crate::decide::local_read_gate`] decides from the PG entry, our map and
/// our leases.
pub(crate) fn local_gate(osd: &Osd, h: &Header) -> Result<u32, LocalReadRefusal> {
    if !osd.leases.enabled() || osd.fenced() {
        return Err(LocalReadRefusal::NoLeases);
    }
    let map = osd.map();
    if h.map_epoch > map.epoch {
        return Err(LocalReadRefusal::IntervalMoved);
    }
    if map.pools.get(&h.pg.pool).is_none_or(|p| p.ec.is_some()) {
        return Err(LocalReadRefusal::NotReplica);
    }
    if !object_in_pg(&map, h) {
        return Err(LocalReadRefusal::IntervalMoved);
    }
    let map_interval = map.interval(h.pg);
    let in_map_acting = map.acting(h.pg).is_ok_and(|a| a.contains(&osd.id));
    osd.pgs.with(h.pg, |e| {
        let leases = osd.leases.holds_all(osd.id, &e.acting);
        crate::decide::local_read_gate(e, osd.id, map_interval, in_map_acting, leases)
    })
}

/// A client WRITE, TRIM or DELETE of a replicated PG, in its own task (see
/// [`primary_mutation`]).
fn client_mutation_request(
    osd: &Arc<Osd>,
    h: Header,
    payload: Bytes,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let osd = osd.clone();
    spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
        let bytes = payload.len() as u64;
        let status = primary_mutation(&osd, h, payload).await;
        if status == Status::Ok {
            osd.counters.write(h.pg.pool, bytes);
        } else {
            osd.counters.error(status);
        }
        (status, Bytes::new())
    });
}

/// A client request to an erasure-coded PG (see [`crate::ec`]), in its own task.
fn ec_client_request(
    osd: &Arc<Osd>,
    h: Header,
    payload: Bytes,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let osd = osd.clone();
    spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
        let c = &osd.counters;
        match h.opcode {
            Opcode::Read => {
                let (status, data) = crate::ec::client_read(&osd, h).await;
                if status == Status::Ok {
                    c.read(h.pg.pool, data.len() as u64);
                } else {
                    c.error(status);
                }
                (status, data)
            }
            Opcode::Allocation => crate::ec::client_allocation(&osd, &h),
            _ => {
                let bytes = payload.len() as u64;
                let status = crate::ec::client_mutation(&osd, h, payload).await;
                if status == Status::Ok {
                    c.write(h.pg.pool, bytes);
                } else {
                    c.error(status);
                }
                (status, Bytes::new())
            }
        }
    });
}

/// Serve a client READ or ALLOCATION from the first layer of the chain holding the object
/// (the object's own layer when it has no ancestors).
fn serve_read(
    osd: &Arc<Osd>,
    h: Header,
    chain: &[InodeId],
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let mut src = h;
    if !chain.is_empty() {
        if let Some(holder) = first_holder(h.object, chain, |o| osd.store.version(o).is_some()) {
            src.object = holder;
        }
    }
    if h.opcode == Opcode::Allocation {
        let (status, data) = allocation(osd, &src);
        sink.send(h.reply(status), data);
        return;
    }
    if osd.store.awaits_io() {
        // The store's reads are awaited (direct I/O): in a task of their own.
        let osd = osd.clone();
        spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
            let (status, data) = read_awaited(&osd, &src).await;
            if status == Status::Ok {
                osd.counters.read(h.pg.pool, data.len() as u64);
            }
            if status == Status::Io {
                return read_from_replicas(&osd, src).await;
            }
            (status, data)
        });
        return;
    }
    let op = osd.slow.start(&h, SlowStage::StoreRead);
    let (status, data) = read(osd, &src);
    drop(op);
    if status == Status::Ok {
        osd.counters.read(h.pg.pool, data.len() as u64);
    }
    if status == Status::Io {
        // Our copy is damaged (or unreadable): serve a replica's copy instead of an error
        // when one is good. Never serve the damaged bytes.
        let osd = osd.clone();
        spawn_reply(Queued::new(&osd, &h), sink, h, permit, async move {
            read_from_replicas(&osd, src).await
        });
        return;
    }
    sink.send(h.reply(status), data);
}

/// The status for a request whose layer chain could not be read.
fn layer_status(osd: &Osd, h: &Header, e: &LayerError) -> Status {
    tracing::warn!(osd = osd.id, object = %h.object, "layer chain: {e}");
    match e {
        LayerError::Meta(_) => Status::Unavailable,
        LayerError::Unknown { .. } => Status::Invalid,
        LayerError::Corrupt { .. } | LayerError::TooDeep { .. } => Status::Io,
    }
}

/// The in-process entry point: a client in the same process calls the OSD's request handler
/// directly (no socket, no framing). Replication to peers goes over the data plane, or
/// through in-process queues between the OSDs of one process ([`link_in_process`]).
pub struct LocalOsd(pub Arc<Osd>);

impl LocalHandler for LocalOsd {
    fn handle(&self, header: Header, payload: Bytes, reply: ReplySink) {
        dispatch(&self.0, header, payload, reply, None);
    }
}

/// A peer OSD of the same process, as its replicas see it: requests reach its handler
/// through an in-process queue ([`basalt_client::Connection::queued`]) instead of loopback
/// TCP. Holds the OSD weakly, so peers never keep each other alive; once the OSD stops or is
/// gone, requests fail as on a closed connection.
pub struct PeerOsd(pub std::sync::Weak<Osd>);

impl LocalHandler for PeerOsd {
    fn handle(&self, header: Header, payload: Bytes, reply: ReplySink) {
        match self.0.upgrade() {
            Some(osd) if !osd.stopping() => dispatch(&osd, header, payload, reply, None),
            _ => {
                if let ReplySink::Direct(waiter) = reply {
                    let _ = waiter.send(Err(basalt_client::ClientError::Closed {
                        addr: String::new(),
                        reason: "the in-process OSD stopped".into(),
                    }));
                }
            }
        }
    }
}

/// Make the OSDs of one process (`basalt up`) replicate to each other through in-process
/// queues; `osds` pairs each with its data-plane address in the map. A peer whose address
/// changes in the map (a restart) is dialled over TCP again.
pub fn link_in_process(osds: &[(Arc<Osd>, String)]) {
    for (from, _) in osds {
        for (to, addr) in osds {
            if from.id != to.id {
                let handler = Arc::new(PeerOsd(Arc::downgrade(to)));
                from.peers.add_queued(to.id, addr, handler);
            }
        }
    }
}

pub(crate) fn status_of(e: &StoreError) -> Status {
    match e {
        StoreError::NoSpace => Status::NoSpace,
        StoreError::Failed => Status::Failed,
        StoreError::OutOfRange { .. } | StoreError::BadOptions { .. } => Status::Invalid,
        _ => Status::Io,
    }
}

/// May this OSD serve a client request for `h.pg` now? Only as the active primary of the
/// PG's current interval, holding its lease, with a map at least as new as the client's.
/// Returns the interval on success.
pub(crate) fn primary_gate(osd: &Osd, h: &Header) -> Result<u32, Status> {
    osd.note_client_op();
    if osd.fenced() {
        return Err(Status::Unavailable);
    }
    let map = osd.map();
    if h.map_epoch > map.epoch {
        // The client knows a newer map than we do; ours arrives shortly.
        return Err(Status::Unavailable);
    }
    if !object_in_pg(&map, h) {
        // Routed before the pool's PG count changed: the client fetches the map.
        return Err(Status::NotPrimary);
    }
    osd.pgs.with(h.pg, |e| {
        let interval = crate::decide::client_gate(e, h.map_epoch)?;
        if !osd.leases.holds_all(osd.id, &e.acting) {
            // A member's peer lease lapsed: it may be sealing for a new primary.
            crate::metrics::OsdCounters::add(&osd.counters.peer_lease_refusals, 1);
            return Err(Status::Unavailable);
        }
        Ok(interval)
    })
}

/// Is the object of `h` in `h.pg` under `map`? True for requests addressed to a PG rather
/// than an object (scrub, unfound stripes), and for a pool the map lacks (refused later).
/// A client that computed the PG before the pool's PG count changed is not served by a PG
/// its object left.
fn object_in_pg(map: &ClusterMap, h: &Header) -> bool {
    map.routed_pg(h.pg, h.opcode, h.object) == h.pg
}

fn in_object(osd: &Osd, h: &Header) -> bool {
    let os = osd.store.object_size() as u64;
    h.offset as u64 + h.length as u64 <= os
}

/// STAT: the store's five counts, then the OSD's operation counters (see `OsdStats`), then
/// its slow operations (a count and fixed-size entries, `basalt_proto::slowop`).
fn stat(osd: &Osd) -> Bytes {
    let st = osd.store.stats();
    let slow = osd.slow.report();
    let mut out = BytesMut::with_capacity(
        STAT_WORDS_BYTES + 4 + slow.len() * basalt_proto::slowop::SLOW_OP_BYTES,
    );
    let store = [
        st.capacity_bytes,
        st.used_bytes,
        st.slots_total,
        st.slots_free,
        st.objects,
    ];
    for v in store.into_iter().chain(osd.counters.stat_words()) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    debug_assert_eq!(out.len(), STAT_WORDS_BYTES);
    basalt_proto::slowop::encode_list(&slow, &mut out);
    out.freeze()
}

/// USAGE: objects and allocated bytes of each requested inode in this store, from the
/// store's per-inode counters (None: a malformed request).
fn usage(store: &basalt_store::Store, payload: &[u8]) -> Option<Bytes> {
    let count = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
    if count == 0 || count > basalt_proto::USAGE_MAX_INODES || payload.len() != 4 + 8 * count {
        return None;
    }
    let inodes: Vec<InodeId> = payload[4..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let mut out = BytesMut::with_capacity(16 * inodes.len());
    for (objects, bytes) in store.usage(&inodes) {
        out.extend_from_slice(&objects.to_le_bytes());
        out.extend_from_slice(&bytes.to_le_bytes());
    }
    Some(out.freeze())
}

fn read(osd: &Osd, h: &Header) -> (Status, Bytes) {
    if !in_object(osd, h) || h.length > MAX_PAYLOAD_BYTES {
        return (Status::Invalid, Bytes::new());
    }
    let mut buf = BytesMut::zeroed(h.length as usize);
    crate::slow::stage(SlowStage::StoreRead, None);
    let start = basalt_metrics::now();
    let result = osd.store.read(h.object, h.offset, &mut buf);
    osd.counters.latency.store_read.observe_since(start);
    read_outcome(osd, h, result, buf)
}

/// [`read`] on a store whose reads are awaited: the task waits, not its thread.
async fn read_awaited(osd: &Osd, h: &Header) -> (Status, Bytes) {
    if !in_object(osd, h) || h.length > MAX_PAYLOAD_BYTES {
        return (Status::Invalid, Bytes::new());
    }
    let mut buf = BytesMut::zeroed(h.length as usize);
    crate::slow::stage(SlowStage::StoreRead, None);
    let start = basalt_metrics::now();
    let result = osd.store.read_async(h.object, h.offset, &mut buf).await;
    osd.counters.latency.store_read.observe_since(start);
    read_outcome(osd, h, result, buf)
}

fn read_outcome(
    osd: &Osd,
    h: &Header,
    result: Result<(), StoreError>,
    buf: BytesMut,
) -> (Status, Bytes) {
    match result {
        Ok(()) => (Status::Ok, buf.freeze()),
        Err(e) => {
            tracing::error!(osd = osd.id, object = %h.object, "read failed: {e}");
            (status_of(&e), Bytes::new())
        }
    }
}

/// Read the range from the other OSDs of the acting set, first good copy wins. Each copy is
/// checksummed by its own store, so a copy that arrives is one its store verified.
async fn read_from_replicas(osd: &Arc<Osd>, h: Header) -> (Status, Bytes) {
    let map = osd.map();
    let acting = match map.acting(h.pg) {
        Ok(a) => a.to_vec(),
        Err(_) => return (Status::Io, Bytes::new()),
    };
    for &peer in acting.iter().filter(|&&p| p != osd.id) {
        let Ok(info) = map.osd(peer) else { continue };
        let Ok(conn) = osd.peers.get(peer, &info.addr).await else {
            continue;
        };
        let mut req = h;
        req.flags = Flags(Flags::REPLICA);
        match tokio::time::timeout(REPLICA_TIMEOUT, conn.start(req, Bytes::new())).await {
            Ok(Ok(r)) if r.header.status == Status::Ok && r.payload.len() == h.length as usize => {
                tracing::warn!(
                    osd = osd.id, peer, object = %h.object,
                    "served a damaged read from a replica; the local copy needs repair"
                );
                return (Status::Ok, r.payload);
            }
            _ => continue,
        }
    }
    (Status::Io, Bytes::new())
}

fn allocation(osd: &Osd, h: &Header) -> (Status, Bytes) {
    match osd.store.allocation(h.object) {
        Ok(words) => {
            let mut out = BytesMut::with_capacity(words.len() * 8);
            for w in words {
                out.extend_from_slice(&w.to_le_bytes());
            }
            (Status::Ok, out.freeze())
        }
        Err(e) => (status_of(&e), Bytes::new()),
    }
}

pub(crate) async fn flush(osd: &Arc<Osd>) -> Status {
    let store = osd.store.clone();
    crate::slow::stage(SlowStage::WalFlush, None);
    let start = basalt_metrics::now();
    let result = osd.store_call(move || store.flush()).await;
    osd.counters.latency.store_flush.observe_since(start);
    match result {
        Ok(()) => Status::Ok,
        Err(e) => {
            tracing::error!(osd = osd.id, "flush failed: {e}");
            status_of(&e)
        }
    }
}

/// Delete every local object of an inode from an index on (volume removal or shrink).
/// Removed objects carry no version, so every OSD removing its copy leaves the copies equal.
async fn purge(osd: &Arc<Osd>, h: Header) -> Status {
    let store = osd.store.clone();
    let (inode, from) = (h.object.inode, h.object.index);
    let version = Version::new(osd.map().epoch as u64, 0);
    let result = osd
        .store_call(move || {
            for (obj, _) in store.objects() {
                // Chunk keys of erasure-coded stripes count by their stripe's index.
                if obj.inode == inode && obj.stripe().index >= from {
                    store.delete(obj, version)?;
                }
            }
            Ok(())
        })
        .await;
    match result {
        Ok(()) => Status::Ok,
        Err(e) => {
            tracing::error!(osd = osd.id, inode, "purge failed: {e}");
            status_of(&e)
        }
    }
}

/// Every local object of `pg` with its version, sorted, from `from` on (at most `limit`).
pub(crate) fn local_list(
    osd: &Osd,
    map: &ClusterMap,
    pg: PgId,
    from: basalt_proto::ObjectId,
    limit: usize,
) -> Option<Vec<(basalt_proto::ObjectId, Version)>> {
    let pool = map.pools.get(&pg.pool)?;
    Some(local_list_counted(osd, pg, pool.pg_count, from, limit))
}

/// [`local_list`] for the pool's PGs counted `count` (a LIST's scope: the lister's map
/// may be newer than ours).
pub(crate) fn local_list_counted(
    osd: &Osd,
    pg: PgId,
    count: u32,
    from: basalt_proto::ObjectId,
    limit: usize,
) -> Vec<(basalt_proto::ObjectId, Version)> {
    osd.store
        .objects()
        .into_iter()
        .filter(|(obj, _)| {
            *obj >= from
                && inode_pool(obj.inode) == pg.pool
                && ClusterMap::pg_index(*obj, count) == pg.index
        })
        .take(limit)
        .collect()
}

/// Is this OSD the incarnation a LIST or PULL is meant for (`version.epoch`, 0 = any)?
fn expected_incarnation(osd: &Osd, h: &Header) -> bool {
    h.version.epoch == 0 || h.version.epoch == osd.incarnation
}

/// Longest a LIST waits for the map it names before answering Unavailable.
const MAP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Would this LIST seal its PG further, while the request's map is newer than ours or a
/// promise still binds this OSD? (See `crate::heartbeat`.)
fn seal_must_wait(osd: &Osd, h: &Header) -> bool {
    if !osd.leases.enabled() {
        return false;
    }
    let sealed = osd.pgs.with(h.pg, |e| e.sealed);
    if h.map_epoch <= sealed {
        return false;
    }
    if h.map_epoch > osd.map().epoch {
        return true;
    }
    // Sealing now: the members the new interval drops get no new promise from here on, and
    // the seal waits if one they hold is still running.
    let dropped = crate::heartbeat::dropped_by_seal(osd, h.pg, h.map_epoch, None);
    osd.leases.bar(&dropped, h.map_epoch);
    osd.leases
        .seal_not_before(|| osd.map(), &dropped, h.map_epoch)
        > tokio::time::Instant::now()
}

/// Does this LIST seal a predecessor of its PG that is not sealed yet (the pool's PG
/// count changed: see [`crate::peering::seal_predecessors`])?
fn predecessors_unsealed(osd: &Osd, h: &Header) -> bool {
    let Ok(Some(scope)) = ListScope::decode(h.prev_version, h.pg) else {
        return false;
    };
    scope.predecessors(h.pg.index).into_iter().any(|index| {
        let pred = PgId {
            pool: h.pg.pool,
            index,
        };
        osd.pgs.with(pred, |e| e.sealed) < scope.since
    })
}

/// LIST: seal the PG below the request's epoch (and its predecessors below the PG count
/// change, when the lister's map has one), then list its objects under the lister's count.
fn list(osd: &Osd, h: &Header) -> (Status, Bytes) {
    let Ok(scope) = ListScope::decode(h.prev_version, h.pg) else {
        return (Status::Invalid, Bytes::new());
    };
    osd.pgs.with(h.pg, |e| e.sealed = e.sealed.max(h.map_epoch));
    let entries = match scope {
        Some(scope) => {
            for index in scope.predecessors(h.pg.index) {
                let pred = PgId {
                    pool: h.pg.pool,
                    index,
                };
                osd.pgs.with(pred, |e| e.sealed = e.sealed.max(scope.since));
            }
            local_list_counted(osd, h.pg, scope.count, h.object, LIST_MAX_ENTRIES)
        }
        None => {
            let map = osd.map();
            let Some(entries) = local_list(osd, &map, h.pg, h.object, LIST_MAX_ENTRIES) else {
                return (Status::Invalid, Bytes::new());
            };
            entries
        }
    };
    let mut out = BytesMut::with_capacity(entries.len() * LIST_ENTRY_BYTES);
    for (obj, version) in entries {
        put_list_entry(&mut out, obj, version);
    }
    (Status::Ok, out.freeze())
}

/// PULL's answer: the whole local object and its version, from its read.
fn pull_reply(
    osd: &Osd,
    h: &Header,
    read: Result<Option<(Version, ObjectImage)>, StoreError>,
) -> (Status, Version, Bytes) {
    match read {
        Ok(Some((version, image))) => (Status::Ok, version, image.encode()),
        Ok(None) => (Status::Ok, Version::ZERO, Bytes::new()),
        Err(e) => {
            tracing::error!(osd = osd.id, object = %h.object, "pull read failed: {e}");
            (status_of(&e), Version::ZERO, Bytes::new())
        }
    }
}

/// Apply a mutation to the local store.
pub(crate) fn apply(osd: &Osd, h: &Header, payload: &[u8], version: Version) -> Status {
    apply_with(osd, h, payload, version, &mut EdgeBlocks::default())
}

/// [`apply`] with the partial blocks of a write or trim read ahead ([`crate::prefetch`]);
/// `edges` then holds a write's partial blocks as written.
fn apply_with(
    osd: &Osd,
    h: &Header,
    payload: &[u8],
    version: Version,
    edges: &mut EdgeBlocks,
) -> Status {
    let length = if h.opcode == Opcode::Write {
        payload.len() as u32
    } else {
        h.length
    };
    if h.opcode != Opcode::Delete
        && h.offset as u64 + length as u64 > osd.store.object_size() as u64
    {
        return Status::Invalid;
    }
    crate::slow::stage(SlowStage::StoreWrite, None);
    let start = basalt_metrics::now();
    let result = match h.opcode {
        Opcode::Write => osd
            .store
            .write_prefetched(h.object, h.offset, payload, version, edges),
        Opcode::Trim => osd
            .store
            .trim_prefetched(h.object, h.offset, h.length, version, edges),
        Opcode::Delete => osd.store.delete(h.object, version),
        _ => unreachable!("apply is only called for mutations"),
    };
    osd.counters.latency.store_write.observe_since(start);
    if osd.store.unflushed_bytes() >= crate::daemon::BACKGROUND_FLUSH_BYTES {
        osd.flush_wanted.notify_one();
    }
    match result {
        Ok(()) => Status::Ok,
        Err(e) => {
            if !matches!(e, StoreError::NoSpace) {
                tracing::error!(osd = osd.id, object = %h.object, "{:?} failed: {e}", h.opcode);
            }
            status_of(&e)
        }
    }
}

/// The version a store reports for an object, absent = zero (real versions never are).
pub(crate) fn current_version(osd: &Osd, obj: basalt_proto::ObjectId) -> Version {
    osd.store.version(obj).unwrap_or(Version::ZERO)
}

/// As a replica: apply a mutation or a push from the PG's primary, under the PG's lock, if
/// it belongs to the current interval (not sealed) and — for mutations — our copy is at the
/// version the primary's copy had before it.
fn replica_apply(osd: &Osd, h: &Header, payload: &Bytes) -> Status {
    let mut shard = osd.pgs.shard(h.pg).lock().expect("pg shard lock");
    // Under the lock: a flush after going down passes every shard first (`PgTable::barrier`).
    let entry = shard.entry(h.pg).or_default();
    let may_write = member_may_write(osd, h.map_epoch);
    if let Err(status) = crate::decide::copy_gate(Some(entry.sealed), h.map_epoch, may_write) {
        return status;
    }
    if h.opcode == Opcode::Push {
        if payload.is_empty() {
            return match osd.store.delete(h.object, h.version) {
                Ok(()) => Status::Ok,
                Err(e) => status_of(&e),
            };
        }
        return match ObjectImage::decode(payload) {
            Ok(image) => match apply_image(osd, h.object, h.version, &image) {
                Ok(()) => Status::Ok,
                Err(e) => status_of(&e),
            },
            Err(e) => {
                tracing::warn!(osd = osd.id, object = %h.object, "bad push: {e}");
                Status::Invalid
            }
        };
    }
    if current_version(osd, h.object) != h.prev_version {
        // Behind on this object (the primary pushes it next): no longer known complete.
        entry.complete_in = 0;
        return Status::Stale;
    }
    if h.version <= h.prev_version {
        // A primary never sends this (it asserts versions grow): refuse rather than apply.
        tracing::error!(
            osd = osd.id,
            object = %h.object,
            "refusing a replica write whose version {:?} does not exceed {:?}",
            h.version,
            h.prev_version
        );
        return Status::Invalid;
    }
    let status = apply(osd, h, payload, h.version);
    if status != Status::Ok {
        // The primary applied what this copy could not: it no longer serves local reads.
        entry.complete_in = 0;
    }
    // Versions only grow on a replica, under the PG lock: the copy ends at the mutation's
    // version, stays at the one before (nothing to change) or is gone, never elsewhere.
    let after = osd.store.version(h.object);
    assert!(
        status != Status::Ok || after.is_none_or(|v| (h.prev_version..=h.version).contains(&v)),
        "osd.{} pg {} {}: a replica {:?} from {:?} to {:?} left the copy at {after:?}",
        osd.id,
        h.pg,
        h.object,
        h.opcode,
        h.prev_version,
        h.version
    );
    status
}

/// As primary: order the mutation, apply it locally, replicate it, and wait for every replica.
async fn primary_mutation(osd: &Arc<Osd>, h: Header, payload: Bytes) -> Status {
    crate::slow::stage(SlowStage::LayerChain, None);
    let chain = match osd.layers.chain(osd.meta.as_ref(), h.object.inode).await {
        Ok(chain) => chain,
        Err(e) => return layer_status(osd, &h, &e),
    };
    // Read ahead, awaited, what applying it under the PG lock would otherwise read there.
    let mut edges = crate::prefetch::edges(osd, &h, &payload).await;
    let mut source = match h.opcode {
        Opcode::Delete => None,
        _ => crate::prefetch::copy_up_source(osd, h.object, &chain).await,
    };
    let checked = Checked::of(&h, &payload);
    let result = replicate(osd, &h, true, checked, |version| {
        if chain.is_empty() {
            plain_mutation(osd, &h, &payload, version, &mut edges)
        } else {
            let ahead = Ahead {
                edges: &mut edges,
                source: &mut source,
            };
            layered_mutation(osd, &h, &payload, version, &chain, ahead)
        }
    })
    .await;
    match result {
        Ok(()) => Status::Ok,
        Err(status) => status,
    }
}

/// COPYUP: if the layer lacks the object and an ancestor holds it, copy the nearest
/// holder's object into the layer as one whole-object write, replicated like any write.
async fn primary_copy_up(osd: &Arc<Osd>, h: Header) -> Status {
    crate::slow::stage(SlowStage::LayerChain, None);
    let chain = match osd.layers.chain(osd.meta.as_ref(), h.object.inode).await {
        Ok(chain) => chain,
        Err(e) => return layer_status(osd, &h, &e),
    };
    let mut source = crate::prefetch::copy_up_source(osd, h.object, &chain).await;
    let result = replicate(osd, &h, false, None, |version| {
        let holds = |o: ObjectId| osd.store.version(o).is_some();
        let Some(&nearest) = chain.first() else {
            return Ok(((), None));
        };
        if holds(h.object) {
            return Ok(((), None));
        }
        let nearest = ObjectId::new(nearest, h.object.index);
        let Some(ancestor) = first_holder(nearest, &chain[1..], holds) else {
            return Ok(((), None));
        };
        let mut buf = BytesMut::zeroed(osd.store.object_size() as usize);
        if let Err(e) = crate::prefetch::read_object(osd, ancestor, &mut source, &mut buf) {
            tracing::error!(osd = osd.id, object = %h.object, %ancestor, "copy-up read failed: {e}");
            return Err(status_of(&e));
        }
        let data = buf.freeze();
        let write = Header {
            opcode: Opcode::Write,
            offset: 0,
            length: data.len() as u32,
            ..h
        };
        match apply(osd, &write, &data, version) {
            Status::Ok => Ok(((), Some((write, data)))),
            status => Err(status),
        }
    })
    .await;
    match result {
        Ok(()) => Status::Ok,
        Err(status) => status,
    }
}

/// Apply a client mutation as it came (its partial blocks read ahead in `edges`) and
/// forward it: unchanged, or a write widened to whole blocks ([`crate::prefetch::forwarded`]).
fn plain_mutation(
    osd: &Osd,
    h: &Header,
    payload: &Bytes,
    version: Version,
    edges: &mut EdgeBlocks,
) -> Result<((), Option<Forward>), Status> {
    match apply_with(osd, h, payload, version, edges) {
        Status::Ok => Ok(((), Some(crate::prefetch::forwarded(h, payload, edges)))),
        status => Err(status),
    }
}

/// What a layered mutation read ahead: its partial blocks, and the object a copy-up copies.
struct Ahead<'a> {
    edges: &'a mut EdgeBlocks,
    source: &'a mut Option<crate::prefetch::ReadAhead>,
}

/// A client mutation of a layer with ancestors (`chain`; docs/design.md, "Layers"). When
/// an ancestor holds the object (it is *shadowed*), the head must end up holding it whole:
/// a copy-up writes the ancestor's object with the mutation applied as one whole-object
/// write (atomic in the store), and a trim or delete writes zeros instead of deallocating,
/// since an object missing from the head would let the ancestor's bytes show through.
/// Whatever was written locally is forwarded as a plain WRITE.
fn layered_mutation(
    osd: &Osd,
    h: &Header,
    payload: &Bytes,
    version: Version,
    chain: &[InodeId],
    ahead: Ahead,
) -> Result<((), Option<Forward>), Status> {
    let object_size = osd.store.object_size();
    let (offset, len) = match h.opcode {
        Opcode::Write => (h.offset, payload.len() as u32),
        Opcode::Trim => (h.offset, h.length),
        Opcode::Delete => (0, object_size),
        _ => unreachable!("only client mutations reach layered_mutation"),
    };
    if offset as u64 + len as u64 > object_size as u64 {
        return Err(Status::Invalid);
    }
    let holds = |o: ObjectId| osd.store.version(o).is_some();
    let nearest = ObjectId::new(chain[0], h.object.index);
    let Some(ancestor) = first_holder(nearest, &chain[1..], holds) else {
        return plain_mutation(osd, h, payload, version, ahead.edges);
    };
    let zeroing = h.opcode != Opcode::Write;
    let range = offset as usize..(offset + len) as usize;
    let (write_offset, data) = if holds(h.object) {
        if !zeroing {
            return plain_mutation(osd, h, payload, version, ahead.edges);
        }
        (offset, Bytes::from_static(&ZEROS[..len as usize]))
    } else {
        let mut buf = BytesMut::zeroed(object_size as usize);
        if h.opcode != Opcode::Delete {
            if let Err(e) = crate::prefetch::read_object(osd, ancestor, ahead.source, &mut buf) {
                tracing::error!(osd = osd.id, object = %h.object, %ancestor, "copy-up read failed: {e}");
                return Err(status_of(&e));
            }
        }
        if zeroing {
            buf[range].fill(0);
        } else {
            buf[range].copy_from_slice(payload);
        }
        (0, buf.freeze())
    };
    let write = Header {
        opcode: Opcode::Write,
        offset: write_offset,
        length: data.len() as u32,
        ..*h
    };
    // A trim's zeros have the trim's partial blocks, read ahead as such.
    plain_mutation(osd, &write, &data, version, ahead.edges)
}

/// A request payload whose crc32c the connection checked on receipt (`Flags::CRC_CHECKED`):
/// forwarding those same bytes, a primary hands the crc on instead of computing it again.
#[derive(Clone, Copy)]
pub(crate) struct Checked {
    /// Address of the payload's first byte (only compared).
    addr: usize,
    len: usize,
    crc: u32,
}

impl Checked {
    /// The request's checked crc, if its connection checked one.
    pub(crate) fn of(h: &Header, payload: &Bytes) -> Option<Checked> {
        (h.flags.has(Flags::CRC_CHECKED) && !payload.is_empty()).then_some(Checked {
            addr: payload.as_ptr() as usize,
            len: payload.len(),
            crc: h.payload_crc,
        })
    }

    /// The crc of `payload` if it is the checked payload itself (the same bytes in memory:
    /// `Bytes` never change), not a widened or copied-up one.
    fn crc_of(self, payload: &Bytes) -> Option<u32> {
        (payload.as_ptr() as usize == self.addr && payload.len() == self.len).then_some(self.crc)
    }
}

/// A mutation the primary applied to its own copy, to forward to every replica: the request
/// header (opcode, object, offset, FUA flag) and payload. Replicas get it as an ordinary
/// mutation frame, so they need to know nothing of how the primary computed it.
pub(crate) type Forward = (Header, Bytes);

/// What became of a request a primary sent to another member of a PG's interval.
pub(crate) enum MemberReply {
    Answered(Result<basalt_client::Reply, basalt_client::ClientError>),
    /// No answer in [`REPLICA_TIMEOUT`].
    TimedOut,
    /// The map began a newer interval of the PG first.
    Superseded,
}

/// Await a member's reply to a request of `interval` of `pg`, giving up after
/// [`REPLICA_TIMEOUT`] or as soon as this OSD's map begins a newer interval of the PG. A
/// member cut off from us (a partition drops the request, no error comes back) is out of
/// the PG by then; waiting for it would hold the client's request, and the client's I/O
/// slot, for the whole timeout. The mutation was not acknowledged, so the caller answers
/// a retryable status and the client sends it again in the new interval.
pub(crate) async fn await_member(
    osd: &Osd,
    pg: PgId,
    interval: u32,
    reply: basalt_client::conn::Pending,
) -> MemberReply {
    let mut maps = osd.maps();
    let newer = async {
        if maps.wait_for(|m| m.interval(pg) > interval).await.is_err() {
            // The map's sender is gone (the OSD stops): only the timeout remains.
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        r = tokio::time::timeout(REPLICA_TIMEOUT, reply) => match r {
            Ok(r) => MemberReply::Answered(r),
            Err(_) => MemberReply::TimedOut,
        },
        _ = newer => MemberReply::Superseded,
    }
}

/// A connection to each of `replicas` (step 1 of [`replicate`], before the PG lock:
/// connecting may wait); Unavailable when one is unknown or unreachable.
async fn connect_replicas(
    osd: &Arc<Osd>,
    map: &ClusterMap,
    replicas: &[basalt_proto::OsdId],
) -> Result<Vec<(basalt_proto::OsdId, Arc<basalt_client::Connection>)>, Status> {
    let mut out = Vec::with_capacity(replicas.len());
    for &peer in replicas {
        let addr = match map.osd(peer) {
            Ok(info) => info.addr.clone(),
            Err(_) => return Err(Status::Unavailable),
        };
        crate::slow::stage(SlowStage::Connect, Some(peer));
        match osd.peers.get(peer, &addr).await {
            Ok(conn) => out.push((peer, conn)),
            Err(e) => {
                tracing::warn!(osd = osd.id, peer, "replica unreachable: {e}");
                return Err(Status::Unavailable);
            }
        }
    }
    Ok(out)
}

/// The primary's path for every client mutation of `h.object`. Check this OSD may serve it,
/// connect to the replicas (before the PG lock: connecting may wait), then under the PG lock
/// run `mutate` with the version assigned to it: it applies the mutation to the local store
/// and returns its result with the mutation to forward (None: nothing changed, nothing to
/// replicate). The forwarded frame is queued to every replica under the same lock, so
/// replicas receive this PG's mutations in version order; then wait for every replica
/// (pushing the whole object to one whose copy is stale) and, for FUA, flush. With
/// `refuse_frozen`, a mutation of a frozen layer answers Frozen (everything but COPYUP,
/// which leaves what the layer reads unchanged).
pub(crate) async fn replicate<T>(
    osd: &Arc<Osd>,
    h: &Header,
    refuse_frozen: bool,
    checked: Option<Checked>,
    mutate: impl FnOnce(Version) -> Result<(T, Option<Forward>), Status>,
) -> Result<T, Status> {
    // Held until the mutation is answered, so a FENCE returns only after it finished.
    let _fence = osd.layers.enter().await;
    crate::slow::stage(SlowStage::Running, None);
    primary_gate(osd, h)?;
    if refuse_frozen && osd.layers.is_frozen(h.object.inode) {
        return Err(Status::Frozen);
    }
    let map = osd.map();
    let acting = match map.acting(h.pg) {
        Ok(a) => a.to_vec(),
        Err(_) => return Err(Status::Invalid),
    };
    if acting.first() != Some(&osd.id) {
        return Err(Status::NotPrimary);
    }
    // The placement never names more OSDs than the pool's size.
    debug_assert!(
        map.pools
            .get(&h.pg.pool)
            .is_some_and(|p| acting.len() <= p.size as usize),
        "pg {}: acting set {acting:?} larger than its pool's size",
        h.pg
    );
    let replicas = connect_replicas(osd, &map, &acting[1..]).await?;
    if osd.store.write_would_flush() {
        // The write would flush first, waiting on the device under the PG lock: flush here,
        // off the runtime's threads. (A failure stops the store; the write then says so.)
        flush(osd).await;
    }
    // Under the PG lock: check the interval is still ours, assign the version, apply locally
    // and queue to every replica, so the replicas receive this PG's mutations in version
    // order.
    let (out, pending, interval) = {
        let mut shard = osd.pgs.shard(h.pg).lock().expect("pg shard lock");
        let entry = shard.entry(h.pg).or_default();
        let interval = crate::decide::client_gate(entry, h.map_epoch)?;
        // The replicas we connected to must be this interval's.
        if entry.acting.len() != acting.len()
            || entry.acting.iter().zip(&acting).any(|(a, b)| a.0 != *b)
        {
            return Err(Status::Unavailable);
        }
        // Counted before the mutation runs: a version a failed mutation may have partly
        // applied is never handed out again.
        entry.counter += 1;
        let version = Version::new(interval as u64, entry.counter);
        let prev = current_version(osd, h.object);
        // Versions only grow: a later interval starts above every version an earlier one
        // assigned, and within an interval the counter only rises. A copy at or above the
        // version we are about to assign means two writers of one version: replicas that
        // compare versions could no longer tell copies apart.
        assert!(
            version > prev,
            "osd.{} pg {} interval {interval}: assigning version {version:?} to {} which is \
             already at {prev:?}",
            osd.id,
            h.pg,
            h.object
        );
        let (out, forward) = mutate(version)?;
        let Some((fwd, payload)) = forward else {
            return Ok(out);
        };
        // What is forwarded was applied here at `version` (or removed the object, or
        // changed nothing): replicas must not be sent a state the primary lacks.
        let after = current_version(osd, h.object);
        assert!(
            after == Version::ZERO || (prev..=version).contains(&after),
            "osd.{} pg {} {}: applied at {version:?} (from {prev:?}) but the copy is at {after:?}",
            osd.id,
            h.pg,
            h.object
        );
        let mut fwd = Header {
            version,
            prev_version: prev,
            map_epoch: interval,
            ..fwd
        };
        fwd.flags = Flags(fwd.flags.0 | Flags::REPLICA);
        // Checksummed once for every replica it crosses a network to (in-process peers need
        // no checksum), or not at all when these are the very bytes the client's crc covers.
        let framed = replicas.iter().filter(|(_, c)| c.is_framed()).count();
        let crc = if payload.is_empty() {
            None
        } else if let Some(crc) = checked.and_then(|c| c.crc_of(&payload)) {
            Some(crc)
        } else {
            (framed > 1).then(|| crc32c::crc32c(&payload))
        };
        let pending = replicas
            .iter()
            .map(|(peer, c)| {
                let p = match crc {
                    Some(crc) => c.start_with_crc(fwd, payload.clone(), crc),
                    None => c.start(fwd, payload.clone()),
                };
                (*peer, c.clone(), p)
            })
            .collect::<Vec<_>>();
        (out, pending, interval)
    };
    let fua = h.flags.has(Flags::FUA);
    let mut status = Status::Ok;
    let sent = (!pending.is_empty()).then(basalt_metrics::now).flatten();
    for (peer, conn, p) in pending {
        crate::slow::stage(SlowStage::Replica, Some(peer));
        let reply_status = match await_member(osd, h.pg, interval, p).await {
            MemberReply::Answered(Ok(r)) => r.header.status,
            MemberReply::Answered(Err(e)) => {
                tracing::warn!(osd = osd.id, peer, "replication failed: {e}");
                Status::Unavailable
            }
            MemberReply::TimedOut => {
                tracing::warn!(
                    osd = osd.id,
                    peer,
                    "replica did not answer in {REPLICA_TIMEOUT:?}"
                );
                Status::Unavailable
            }
            MemberReply::Superseded => {
                tracing::debug!(osd = osd.id, peer, pg = %h.pg, "a newer interval began while waiting for a replica");
                Status::Peering
            }
        };
        let reply_status = if reply_status == Status::Stale {
            // The replica's copy is behind (it is recovering): send it the whole object.
            crate::slow::stage(SlowStage::Push, Some(peer));
            push_object(osd, h.pg, interval, h.object, &conn, fua, PushKind::Stale).await
        } else {
            reply_status
        };
        if reply_status != Status::Ok {
            status = reply_status;
        }
    }
    if let Some(sent) = sent {
        osd.counters.latency.replication.observe_since(sent);
    }
    if status == Status::Ok && fua {
        status = flush(osd).await;
    }
    match status {
        Status::Ok => {
            // For the simulator's split-brain check (see `crate::INVARIANT_EVENTS`).
            tracing::trace!(target: "basalt::invariant", osd = osd.id, pg = %h.pg, interval, "acknowledged");
            Ok(out)
        }
        status => Err(status),
    }
}
