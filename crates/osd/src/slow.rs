//! Slow-op detection: every operation in flight holds a slot of a fixed table with its start
//! time, what it is (opcode, object, PG) and the stage it is in; a task scans the table once
//! a second and reports, once each, the operations older than the threshold (a warn line,
//! `basalt_osd_slow_ops`, and the STAT reply that `basalt status --watch` reads).
//!
//! Hot path: taking a slot is one `fetch_add` and one compare-exchange, a stage change one
//! relaxed store, releasing two stores; no lock and no allocation. The stage is set where
//! the work happens through a task-local handle ([`stage`]), so the functions an operation
//! passes through need no extra argument.

use crate::daemon::Osd;
use basalt_proto::slowop::{SlowOp, SlowStage, SLOW_OPS_MAX};
use basalt_proto::{Flags, Header, ObjectId, Opcode, OsdId, PgId};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
// Tokio's clock (the system's outside tests): the simulator's virtual time ages operations
// deterministically, and the tests advance a paused clock instead of sleeping.
use tokio::sync::watch;
use tokio::time::Instant;

/// Default age at which an operation is slow (`--slow-op-ms`).
pub const SLOW_OP_THRESHOLD_MS: u64 = 5_000;
/// Slots of the in-flight table: operations beyond this many at once go untracked (counted).
pub const IN_FLIGHT_SLOTS: usize = 4096;
/// Slots tried from an operation's starting slot before it gives up (bounds the probe).
const PROBE_SLOTS: usize = 16;
/// How often the table is scanned.
pub const SCAN_INTERVAL_MS: u64 = 1_000;
/// How long a slow operation that finished stays in STAT replies, so a watcher polling
/// every few seconds still sees one that was slow between two polls.
const FINISHED_KEEP_MS: u64 = 60_000;
/// `peer` in a slot's packed word meaning none.
const NO_PEER: u64 = u32::MAX as u64;

/// One operation's slot; `id` 0 means free. Fields are written before `start_ms` is
/// published, and a scan accepts a slot only if `id` and `start_ms` read the same before
/// and after its fields.
#[derive(Default)]
struct Slot {
    id: AtomicU64,
    start_ms: AtomicU64,
    inode: AtomicU64,
    index: AtomicU64,
    /// pool << 32 | PG index.
    pg: AtomicU64,
    /// opcode << 48 | replica << 40 | stage << 32 | peer.
    what: AtomicU64,
}

fn pack(opcode: Opcode, replica: bool, stage: SlowStage, peer: Option<OsdId>) -> u64 {
    (opcode as u64) << 48
        | u64::from(replica) << 40
        | (stage as u64) << 32
        | peer.map_or(NO_PEER, u64::from)
}

/// The operations of one OSD in flight, and the slow ones found so far.
pub struct InFlight {
    slots: Box<[Slot]>,
    next_id: AtomicU64,
    base: Instant,
    threshold_ms: AtomicU64,
    /// In-flight operations older than the threshold at the last scan.
    slow_now: AtomicU64,
    /// Operations found slow since the OSD started (each once).
    slow_total: AtomicU64,
    /// Operations that found no free slot (not watched).
    untracked: AtomicU64,
    /// Slow operations: in flight, or finished within [`FINISHED_KEEP_MS`], with the
    /// milliseconds (since `base`) of the scan that last saw each in flight.
    found: Mutex<Vec<(SlowOp, u64)>>,
}

impl Default for InFlight {
    fn default() -> Self {
        Self::new(IN_FLIGHT_SLOTS)
    }
}

impl InFlight {
    /// A table of `slots` slots (at least one).
    pub fn new(slots: usize) -> Self {
        Self {
            slots: (0..slots.max(1)).map(|_| Slot::default()).collect(),
            next_id: AtomicU64::new(1),
            base: Instant::now(),
            threshold_ms: AtomicU64::new(SLOW_OP_THRESHOLD_MS),
            slow_now: AtomicU64::new(0),
            slow_total: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
            found: Mutex::new(Vec::new()),
        }
    }

    /// Report operations older than `ms` from now on (at least 1 ms).
    pub fn set_threshold_ms(&self, ms: u64) {
        self.threshold_ms.store(ms.max(1), Ordering::Relaxed);
    }

    pub fn threshold_ms(&self) -> u64 {
        self.threshold_ms.load(Ordering::Relaxed)
    }

    /// Slow operations in flight at the last scan.
    pub fn slow_now(&self) -> u64 {
        self.slow_now.load(Ordering::Relaxed)
    }

    /// Operations found slow since start.
    pub fn slow_total(&self) -> u64 {
        self.slow_total.load(Ordering::Relaxed)
    }

    /// Operations that were not watched because the table was full around their slot.
    pub fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Milliseconds since the table was made, never 0 (0 marks a free slot's start).
    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64 + 1
    }

    /// Watch the operation of header `h` from now on, in `stage`; it is released when the
    /// guard drops.
    pub fn start(self: &Arc<Self>, h: &Header, stage: SlowStage) -> OpGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let n = self.slots.len();
        let first = id as usize % n;
        let replica = h.flags.has(Flags::REPLICA);
        for k in 0..PROBE_SLOTS.min(n) {
            let i = (first + k) % n;
            let s = &self.slots[i];
            if s.id
                .compare_exchange(0, id, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            s.inode.store(h.object.inode, Ordering::Relaxed);
            s.index.store(h.object.index, Ordering::Relaxed);
            s.pg.store(
                (h.pg.pool as u64) << 32 | h.pg.index as u64,
                Ordering::Relaxed,
            );
            s.what
                .store(pack(h.opcode, replica, stage, None), Ordering::Relaxed);
            s.start_ms.store(self.now_ms(), Ordering::Release);
            return OpGuard {
                table: self.clone(),
                slot: i,
                id,
                opcode: h.opcode,
                replica,
            };
        }
        self.untracked.fetch_add(1, Ordering::Relaxed);
        OpGuard {
            table: self.clone(),
            slot: usize::MAX,
            id,
            opcode: h.opcode,
            replica,
        }
    }

    /// A consistent copy of slot `s` as a slow-op entry aged at `now_ms`; None when free or
    /// changing under the read.
    fn read_slot(s: &Slot, now_ms: u64) -> Option<SlowOp> {
        let id = s.id.load(Ordering::Acquire);
        let start = s.start_ms.load(Ordering::Acquire);
        if id == 0 || start == 0 {
            return None;
        }
        let (inode, index) = (
            s.inode.load(Ordering::Relaxed),
            s.index.load(Ordering::Relaxed),
        );
        let (pg, what) = (s.pg.load(Ordering::Relaxed), s.what.load(Ordering::Relaxed));
        if s.start_ms.load(Ordering::Acquire) != start || s.id.load(Ordering::Acquire) != id {
            return None;
        }
        let peer = what & 0xffff_ffff;
        Some(SlowOp {
            id,
            object: ObjectId::new(inode, index),
            pg: PgId {
                pool: (pg >> 32) as u32,
                index: pg as u32,
            },
            opcode: Opcode::from_u8((what >> 48) as u8)?,
            replica: (what >> 40) & 1 == 1,
            stage: SlowStage::from_u8((what >> 32) as u8)?,
            peer: (peer != NO_PEER).then_some(peer as u32),
            age_ms: now_ms.saturating_sub(start),
            in_flight: true,
        })
    }

    /// Look at every slot: update what is known of slow operations and return those found
    /// slow for the first time.
    pub fn scan(&self) -> Vec<SlowOp> {
        let now = self.now_ms();
        let threshold = self.threshold_ms();
        let live: Vec<SlowOp> = self
            .slots
            .iter()
            .filter_map(|s| Self::read_slot(s, now))
            .filter(|op| op.age_ms >= threshold)
            .collect();
        self.slow_now.store(live.len() as u64, Ordering::Relaxed);
        let mut found = self.found.lock().expect("slow-op lock");
        let mut new = Vec::new();
        for op in &live {
            match found.iter_mut().find(|(f, _)| f.id == op.id) {
                Some((f, seen)) => (*f, *seen) = (*op, now),
                None => {
                    new.push(*op);
                    found.push((*op, now));
                }
            }
        }
        for (f, _) in found.iter_mut() {
            if f.in_flight && !live.iter().any(|op| op.id == f.id) {
                f.in_flight = false;
            }
        }
        found.retain(|(f, seen)| f.in_flight || now.saturating_sub(*seen) < FINISHED_KEEP_MS);
        // Bound the list: in-flight ones first, then the oldest.
        found.sort_by_key(|(f, _)| (!f.in_flight, std::cmp::Reverse(f.age_ms)));
        found.truncate(SLOW_OPS_MAX);
        self.slow_total
            .fetch_add(new.len() as u64, Ordering::Relaxed);
        new
    }

    /// The slow operations to report (in flight first, then finished ones kept a while).
    pub fn report(&self) -> Vec<SlowOp> {
        let found = self.found.lock().expect("slow-op lock");
        found.iter().map(|(f, _)| *f).collect()
    }
}

/// An operation's slot; releases it when dropped.
pub struct OpGuard {
    table: Arc<InFlight>,
    /// usize::MAX: untracked.
    slot: usize,
    id: u64,
    opcode: Opcode,
    replica: bool,
}

impl OpGuard {
    /// The operation entered `stage` (waiting on `peer`, if any).
    pub fn stage(&self, stage: SlowStage, peer: Option<OsdId>) {
        if let Some(s) = self.table.slots.get(self.slot) {
            s.what.store(
                pack(self.opcode, self.replica, stage, peer),
                Ordering::Relaxed,
            );
        }
    }
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        if let Some(s) = self.table.slots.get(self.slot) {
            debug_assert_eq!(s.id.load(Ordering::Relaxed), self.id);
            s.start_ms.store(0, Ordering::Relaxed);
            s.id.store(0, Ordering::Release);
        }
    }
}

tokio::task_local! {
    /// The operation the current task runs, for [`stage`].
    static CURRENT: OpGuard;
}

/// Run `fut` as the operation of `op`: [`stage`] calls inside it update `op`, and the slot is
/// released when `fut` finishes.
pub fn scope<F: Future>(op: OpGuard, fut: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(op, fut)
}

/// The current task's operation entered `stage`; nothing outside [`scope`].
pub fn stage(stage: SlowStage, peer: Option<OsdId>) {
    let _ = CURRENT.try_with(|op| op.stage(stage, peer));
}

/// Scan `osd`'s table every [`SCAN_INTERVAL_MS`] until the OSD stops; log each newly slow
/// operation once.
pub(crate) async fn watch_slow_ops(osd: Arc<Osd>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(SCAN_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        for op in osd.slow.scan() {
            tracing::warn!(
                osd = osd.id,
                object = %op.object,
                pg = %op.pg,
                "slow op: {}{:?} {:.1} s in '{}'",
                if op.replica { "replica " } else { "" },
                op.opcode,
                op.age_ms as f64 / 1000.0,
                op.stage_text()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(opcode: Opcode, index: u64) -> Header {
        let mut h = Header::request(opcode, 0, ObjectId::new(0x77, index));
        h.pg = PgId { pool: 2, index: 5 };
        h
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_op_is_reported_once_with_its_stage_and_peer() {
        // Goal: an operation older than the threshold is returned by one scan only, is
        // reported with its object, PG, opcode and current stage (and peer) while in flight,
        // then as finished; a fast one never is.
        let t = Arc::new(InFlight::new(64));
        t.set_threshold_ms(30);
        let fast = t.start(&header(Opcode::Read, 1), SlowStage::StoreRead);
        drop(fast);
        let slow = t.start(&header(Opcode::Write, 2), SlowStage::Queued);
        slow.stage(SlowStage::Replica, Some(4));
        assert!(t.scan().is_empty(), "nothing is slow yet");
        tokio::time::advance(Duration::from_millis(40)).await;
        let new = t.scan();
        assert_eq!(new.len(), 1, "{new:?}");
        let op = new[0];
        assert_eq!(op.object, ObjectId::new(0x77, 2));
        assert_eq!(op.pg, PgId { pool: 2, index: 5 });
        assert_eq!(op.opcode, Opcode::Write);
        assert_eq!((op.stage, op.peer), (SlowStage::Replica, Some(4)));
        assert!(op.in_flight && op.age_ms >= 30 && !op.replica);
        assert_eq!((t.slow_now(), t.slow_total()), (1, 1));
        slow.stage(SlowStage::WalFlush, None);
        assert!(t.scan().is_empty(), "reported once");
        assert_eq!(
            t.report()[0].stage,
            SlowStage::WalFlush,
            "stage kept current"
        );
        drop(slow);
        assert!(t.scan().is_empty());
        assert_eq!((t.slow_now(), t.slow_total()), (0, 1));
        let report = t.report();
        assert_eq!(report.len(), 1);
        assert!(!report[0].in_flight, "finished ones stay listed a while");
    }

    #[test]
    fn a_full_table_leaves_operations_untracked_and_slots_are_reused() {
        // Goal: the table is bounded: past its size operations are counted as untracked
        // (never a panic or a wait); released slots serve later operations.
        let t = Arc::new(InFlight::new(4));
        let held: Vec<_> = (0..4)
            .map(|i| t.start(&header(Opcode::Write, i), SlowStage::Queued))
            .collect();
        let extra = t.start(&header(Opcode::Write, 9), SlowStage::Queued);
        extra.stage(SlowStage::StoreWrite, None);
        assert_eq!(t.untracked(), 1);
        drop(extra);
        drop(held);
        let again: Vec<_> = (0..4)
            .map(|i| t.start(&header(Opcode::Read, i), SlowStage::Queued))
            .collect();
        assert_eq!(t.untracked(), 1, "freed slots are taken again");
        drop(again);
    }

    #[tokio::test(start_paused = true)]
    async fn the_report_is_bounded() {
        // Goal: however many operations are slow, a report holds at most SLOW_OPS_MAX, the
        // gauge still counts them all.
        let t = Arc::new(InFlight::new(256));
        t.set_threshold_ms(1);
        let held: Vec<_> = (0..100)
            .map(|i| t.start(&header(Opcode::Write, i), SlowStage::Queued))
            .collect();
        tokio::time::advance(Duration::from_millis(5)).await;
        assert_eq!(t.scan().len(), 100);
        assert_eq!(t.slow_now(), 100);
        assert_eq!(t.report().len(), SLOW_OPS_MAX);
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn stage_follows_the_task_of_its_scope() {
        // Goal: `stage` inside a scope updates that operation; outside any scope it does
        // nothing.
        let t = Arc::new(InFlight::new(8));
        t.set_threshold_ms(1);
        stage(SlowStage::StoreRead, None);
        let op = t.start(&header(Opcode::Write, 3), SlowStage::Queued);
        let t2 = t.clone();
        scope(op, async move {
            stage(SlowStage::Push, Some(7));
            tokio::time::sleep(Duration::from_millis(5)).await;
            let new = t2.scan();
            assert_eq!(new.len(), 1);
            assert_eq!((new[0].stage, new[0].peer), (SlowStage::Push, Some(7)));
        })
        .await;
        t.scan();
        assert_eq!(t.slow_now(), 0, "released when the scope ended");
    }
}
