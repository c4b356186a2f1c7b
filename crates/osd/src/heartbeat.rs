//! Heartbeats between OSDs that share PGs: failure reports to the monitor, and the peer
//! leases that keep fencing correct when the monitor marks an OSD down before its liveness
//! lease expires (docs/design.md, "Failure detection by peers").
//!
//! Every interval an OSD pings its heartbeat peers (the other members of the acting sets it
//! is in, and whoever it reports). A peer that answers *promises* not to seal a PG for a
//! newer interval until a peer lease has passed since it received the ping; the pinging OSD
//! counts that lease from when it sent the ping, and serves a PG as primary only while it
//! holds a lease from every other member of the PG's interval. A peer silent for the grace
//! (or whose connection is refused) is reported under this OSD's liveness lease.

use crate::daemon::Osd;
use basalt_meta::schema::{failure_key, FailureReport};
use basalt_placement::ClusterMap;
use basalt_proto::{Flags, Header, ObjectId, Opcode, OsdId, PgId, Status, Version};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How an OSD watches its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// Between two pings to a peer.
    pub interval: Duration,
    /// A peer silent this long is reported to the monitor.
    pub grace: Duration,
    /// How long an answered ping lets its sender serve as primary (and keeps the answering
    /// peer from sealing for a newer interval).
    pub peer_lease: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(100),
            grace: Duration::from_millis(1000),
            peer_lease: Duration::from_millis(600),
        }
    }
}

impl HeartbeatConfig {
    /// Refuse settings under which the leases cannot work: a lease must outlast a ping
    /// interval plus a round trip, and a peer must be reported only after its lease could
    /// have lapsed.
    pub fn check(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("the heartbeat interval must be positive".into());
        }
        if self.peer_lease < self.interval * 3 {
            return Err(format!(
                "the peer lease ({} ms) must be at least three heartbeat intervals ({} ms)",
                self.peer_lease.as_millis(),
                (self.interval * 3).as_millis()
            ));
        }
        if self.grace < self.peer_lease {
            return Err(format!(
                "the heartbeat grace ({} ms) must be at least the peer lease ({} ms)",
                self.grace.as_millis(),
                self.peer_lease.as_millis()
            ));
        }
        Ok(())
    }
}

/// A lease this OSD holds from a peer: it may serve as primary of PGs the peer is a member
/// of until `until`, as long as the peer still runs `incarnation`.
#[derive(Clone, Copy, Debug)]
struct Held {
    incarnation: u64,
    until: Instant,
}

/// A promise this OSD gave a peer: no seal for a newer interval until `until`, unless the
/// map still shows that run of the peer up.
#[derive(Clone, Debug)]
struct Promise {
    incarnation: u64,
    up_from: u32,
    /// The leases given to that run still running (or the last one): each with the epoch
    /// of the map its ping carried, and when it ends.
    grants: Vec<(u32, Instant)>,
}

impl Promise {
    /// When the last lease given to the run ends.
    fn until(&self) -> Instant {
        self.grants
            .iter()
            .map(|g| g.1)
            .max()
            .unwrap_or(Instant::now())
    }

    /// When the last lease given to the run while its map was older than `epoch` ends
    /// (None: none was): a peer whose map reached `epoch` knows every interval that began
    /// there, so what it was promised since cannot let it serve a copy such an interval
    /// dropped.
    fn until_below(&self, epoch: u32) -> Option<Instant> {
        self.grants
            .iter()
            .filter(|g| g.0 < epoch)
            .map(|g| g.1)
            .max()
    }
}

/// The peer leases of one OSD, both ways. Without heartbeats (`lease` None: the OSDs of
/// one process, which cannot fail apart) every lease is held and nothing waits.
pub struct PeerLeases {
    lease: Option<Duration>,
    started: Instant,
    held: Mutex<HashMap<OsdId, Held>>,
    promised: Mutex<HashMap<OsdId, Promise>>,
    /// Per peer, the map epoch its pings must carry to be promised anything: raised when
    /// this OSD seals a PG for an interval that drops that peer while it is up (it may be
    /// serving local reads of the PG under its older map until its lease from us lapses).
    /// Guarded by the promises lock.
    floors: Mutex<HashMap<OsdId, u32>>,
}

impl PeerLeases {
    pub fn new(lease: Option<Duration>) -> Self {
        Self {
            lease,
            started: Instant::now(),
            held: Mutex::new(HashMap::new()),
            promised: Mutex::new(HashMap::new()),
            floors: Mutex::new(HashMap::new()),
        }
    }

    /// Are peer leases in force (heartbeats on)?
    pub fn enabled(&self) -> bool {
        self.lease.is_some()
    }

    /// Does this OSD hold a live lease from every member of `acting` but itself?
    pub fn holds_all(&self, me: OsdId, acting: &[(OsdId, u64)]) -> bool {
        if self.lease.is_none() {
            return true;
        }
        let now = Instant::now();
        let held = self.held.lock().expect("held leases lock");
        acting.iter().filter(|(id, _)| *id != me).all(|(id, inc)| {
            held.get(id)
                .is_some_and(|h| h.incarnation == *inc && h.until > now)
        })
    }

    /// `peer` (as run `incarnation`) answered, with a promise, a ping sent at `sent`.
    pub fn note_promise(&self, peer: OsdId, incarnation: u64, sent: Instant) {
        let Some(lease) = self.lease else { return };
        // The peer counts from when it received the ping, which is after `sent`; the
        // margin covers clock-rate drift of up to 1 % each side.
        let until = sent + lease - lease / 50;
        let mut held = self.held.lock().expect("held leases lock");
        let entry = held.entry(peer).or_insert(Held { incarnation, until });
        if entry.incarnation != incarnation || entry.until < until {
            *entry = Held { incarnation, until };
        }
    }

    /// A ping from `sender` (run `incarnation`, up since `up_from` by its own map of epoch
    /// `sender_epoch`): promise it a lease if `map()` (read under the promise lock, so no
    /// seal check slips in between) shows exactly that run up, and its map has reached every
    /// seal of ours that dropped it from a PG ([`PeerLeases::bar`]). Returns whether it was
    /// promised.
    pub fn grant(
        &self,
        map: impl FnOnce() -> Arc<ClusterMap>,
        sender: OsdId,
        incarnation: u64,
        up_from: u32,
        sender_epoch: u32,
    ) -> bool {
        let Some(lease) = self.lease else {
            return false;
        };
        let mut promised = self.promised.lock().expect("promises lock");
        let floor = self
            .floors
            .lock()
            .expect("promise floors lock")
            .get(&sender)
            .copied()
            .unwrap_or(0);
        if sender_epoch < floor {
            return false;
        }
        let map = map();
        let up = map.osds.get(&sender).is_some_and(|o| {
            o.up && o.incarnation == incarnation && o.up_from == up_from && up_from != 0
        });
        if up {
            let now = Instant::now();
            let until = now + lease;
            let same_run = |p: &Promise| p.incarnation == incarnation && p.up_from == up_from;
            match promised.get_mut(&sender) {
                Some(p) if same_run(p) => {
                    // One grant per map epoch, the newest; the ended ones go (the last stays
                    // until replaced, so `until` always has one).
                    p.grants.retain(|g| g.0 != sender_epoch && g.1 > now);
                    p.grants.push((sender_epoch, until));
                }
                _ => {
                    promised.insert(
                        sender,
                        Promise {
                            incarnation,
                            up_from,
                            grants: vec![(sender_epoch, until)],
                        },
                    );
                }
            }
        }
        up
    }

    /// Promise `peers` nothing more until their pings carry a map of epoch `epoch` or newer
    /// (this OSD is sealing a PG for the interval `epoch` begins, which drops them).
    pub fn bar(&self, peers: &[OsdId], epoch: u32) {
        if self.lease.is_none() || peers.is_empty() {
            return;
        }
        let _promised = self.promised.lock().expect("promises lock");
        let mut floors = self.floors.lock().expect("promise floors lock");
        for &peer in peers {
            let floor = floors.entry(peer).or_insert(0);
            *floor = (*floor).max(epoch);
        }
    }

    /// The earliest instant at which this OSD may seal a PG for a newer interval beginning
    /// at `epoch`, given `map()` (read under the promise lock): every promise to a run that
    /// map no longer shows up must have run out, and every promise to one of `dropped`
    /// (members the new interval drops, barred first with [`PeerLeases::bar`]) given while
    /// its map was older than `epoch`; and a lease must have passed since this process
    /// started (promises of an earlier process of this OSD died with it).
    pub fn seal_not_before(
        &self,
        map: impl FnOnce() -> Arc<ClusterMap>,
        dropped: &[OsdId],
        epoch: u32,
    ) -> Instant {
        let Some(lease) = self.lease else {
            return self.started;
        };
        let promised = self.promised.lock().expect("promises lock");
        let map = map();
        promised
            .iter()
            .filter_map(|(id, p)| {
                let running = map.osds.get(id).is_some_and(|o| {
                    o.up && o.incarnation == p.incarnation && o.up_from == p.up_from
                });
                if !running {
                    Some(p.until())
                } else if dropped.contains(id) {
                    p.until_below(epoch)
                } else {
                    None
                }
            })
            .fold(self.started + lease, Instant::max)
    }
}

/// The members a seal of `pg` for the interval beginning at `epoch` drops: those of the
/// intervals this OSD saw since the PG last activated under it that are not members of the
/// new one. The new interval's members are `acting` when the sealer knows them (a primary
/// peering), else read from this OSD's map when it has `pg` at exactly that interval; when
/// the map has moved past it, every one of them but this OSD (the safe side). None for an
/// erasure-coded PG, whose members never serve local reads.
pub(crate) fn dropped_by_seal(
    osd: &Osd,
    pg: PgId,
    epoch: u32,
    acting: Option<&[(OsdId, u64)]>,
) -> Vec<OsdId> {
    let map = osd.map();
    if map.pools.get(&pg.pool).is_some_and(|p| p.ec.is_some()) {
        return Vec::new();
    }
    let members: Option<Vec<OsdId>> = match acting {
        Some(a) => Some(a.iter().map(|m| m.0).collect()),
        None if map.interval(pg) == epoch => map.acting(pg).ok().map(<[_]>::to_vec),
        None => None,
    };
    osd.pgs.with(pg, |e| {
        e.since_active
            .iter()
            .copied()
            .filter(|id| *id != osd.id && members.as_ref().is_none_or(|m| !m.contains(id)))
            .collect()
    })
}

/// Wait until this OSD may seal a PG for a newer interval beginning at `epoch`, which drops
/// the members `dropped` (see [`dropped_by_seal`]): they are barred from new promises first,
/// then every promise that binds the seal must run out (see
/// [`PeerLeases::seal_not_before`]). Each pass re-reads the map: one that arrived during the
/// wait may show another OSD down.
pub(crate) async fn wait_to_seal(osd: &Osd, dropped: &[OsdId], epoch: u32) {
    osd.leases.bar(dropped, epoch);
    // Bound: a handful of passes; each waits out what the map showed when it began (the
    // dropped members get no new promise, so their part ends within one lease).
    for _ in 0..16 {
        let not_before = osd.leases.seal_not_before(|| osd.map(), dropped, epoch);
        if not_before <= Instant::now() {
            return;
        }
        tokio::time::sleep_until(not_before).await;
    }
}

/// Wait until this OSD's map reaches `epoch` (a new primary's LIST may carry a map this OSD
/// has not seen yet, and the seal must be judged against it). False after `within`.
pub(crate) async fn wait_for_map(osd: &Osd, epoch: u32, within: Duration) -> bool {
    let mut maps = osd.maps();
    tokio::time::timeout(within, async {
        // Bound: ends at the map or the timeout.
        loop {
            if maps.borrow_and_update().epoch >= epoch {
                return true;
            }
            if maps.changed().await.is_err() {
                return false;
            }
        }
    })
    .await
    .unwrap_or(false)
}

/// Answer a peer's PING: promise a lease if the map shows the sender's run up. The reply
/// names this OSD's run (`version.epoch`) and whether it promised (`offset` 1).
pub(crate) fn answer(osd: &Osd, h: &Header) -> Header {
    let sender = h.object.inode as OsdId;
    let promised = osd.leases.grant(
        || osd.map(),
        sender,
        h.object.index,
        h.version.counter as u32,
        h.map_epoch,
    );
    let mut reply = h.reply(Status::Ok);
    reply.version = Version {
        epoch: osd.incarnation,
        counter: 0,
    };
    reply.offset = u32::from(promised);
    reply
}

/// The OSDs this OSD shares an acting set with in `map`.
pub fn heartbeat_peers(map: &ClusterMap, me: OsdId) -> Vec<OsdId> {
    let mut peers = std::collections::BTreeSet::new();
    for pg in map.all_pgs() {
        let acting = map.acting(pg).unwrap_or_default();
        if acting.contains(&me) {
            peers.extend(acting.iter().copied().filter(|id| *id != me));
        }
    }
    peers.into_iter().collect()
}

/// What this OSD knows of one peer.
#[derive(Debug)]
struct PeerState {
    /// When the peer's expected run last answered (or when watching it began).
    last_answer: Instant,
    /// The run this OSD reported, if it did.
    reported: Option<u64>,
    /// Why the last ping failed at once (refused, reset, another run answered).
    failed_now: Option<String>,
}

/// Ping the heartbeat peers every interval, report the silent ones, withdraw reports of
/// those that answer again. Runs until `stop`.
pub(crate) async fn run(osd: Arc<Osd>, config: HeartbeatConfig, mut stop: watch::Receiver<bool>) {
    let state: Arc<Mutex<BTreeMap<OsdId, PeerState>>> = Default::default();
    // Bound: one round per interval until the OSD stops.
    loop {
        let map = osd.map();
        let mut peers = heartbeat_peers(&map, osd.id);
        {
            let mut st = state.lock().expect("heartbeat state lock");
            let reported: Vec<OsdId> = st
                .iter()
                .filter(|(_, s)| s.reported.is_some())
                .map(|(id, _)| *id)
                .collect();
            peers.extend(reported);
            peers.sort_unstable();
            peers.dedup();
            st.retain(|id, _| peers.contains(id));
            for id in &peers {
                st.entry(*id).or_insert_with(|| PeerState {
                    last_answer: Instant::now(),
                    reported: None,
                    failed_now: None,
                });
            }
        }
        for &peer in &peers {
            let Some(info) = map.osds.get(&peer) else {
                continue;
            };
            if info.addr.is_empty() {
                continue;
            }
            let (osd, state, addr, expected) = (
                osd.clone(),
                state.clone(),
                info.addr.clone(),
                info.incarnation,
            );
            tokio::spawn(async move {
                let outcome = ping(&osd, peer, &addr, expected, config.grace).await;
                let mut st = state.lock().expect("heartbeat state lock");
                if let Some(s) = st.get_mut(&peer) {
                    match outcome {
                        Ok(()) => {
                            s.last_answer = Instant::now();
                            s.failed_now = None;
                        }
                        Err(why) => s.failed_now = why,
                    }
                }
            });
        }
        judge(&osd, &map, &state, config).await;
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = tokio::time::sleep(config.interval) => {}
        }
    }
}

/// One ping. Ok when the expected run answered; Err(Some(why)) when the failure proves that
/// run is not there (refused, reset, another run answered), Err(None) when it merely did not
/// answer in time.
async fn ping(
    osd: &Osd,
    peer: OsdId,
    addr: &str,
    expected: u64,
    timeout: Duration,
) -> Result<(), Option<String>> {
    let map = osd.map();
    let mut h = Header::request(
        Opcode::Ping,
        0,
        ObjectId::new(osd.id as u64, osd.incarnation),
    );
    h.flags = Flags(Flags::REPLICA);
    h.version = Version {
        epoch: expected,
        counter: map.osds.get(&osd.id).map_or(0, |o| o.up_from as u64),
    };
    h.map_epoch = map.epoch;
    let sent = Instant::now();
    let call = async {
        let conn = osd
            .heartbeat_conns
            .get(peer, addr)
            .await
            .map_err(|e| Some(format!("cannot connect: {e}")))?;
        // A connection that breaks mid-call proves nothing (a reset link): the next round
        // dials again, and only a refused dial or the grace reports the peer.
        conn.call(h, Bytes::new()).await.map_err(|_| None)
    };
    let reply = match tokio::time::timeout(timeout, call).await {
        Ok(reply) => reply?,
        Err(_) => return Err(None),
    };
    if reply.header.status != Status::Ok || reply.header.version.epoch != expected {
        return Err(Some(format!(
            "another run answered (incarnation {:#x})",
            reply.header.version.epoch
        )));
    }
    if reply.header.offset == 1 {
        osd.leases.note_promise(peer, expected, sent);
    }
    Ok(())
}

/// Report peers silent past the grace (or failed for sure), withdraw reports of peers that
/// answered again.
async fn judge(
    osd: &Osd,
    map: &ClusterMap,
    state: &Mutex<BTreeMap<OsdId, PeerState>>,
    config: HeartbeatConfig,
) {
    let Some(lease) = osd.liveness_lease() else {
        // Not registered (a test without liveness): nobody to report to.
        return;
    };
    let mut to_report = Vec::new();
    let mut to_withdraw = Vec::new();
    {
        let mut st = state.lock().expect("heartbeat state lock");
        for (&peer, s) in st.iter_mut() {
            let Some(info) = map.osds.get(&peer) else {
                continue;
            };
            let silent = s.last_answer.elapsed();
            let failing = s.failed_now.clone().or_else(|| {
                (silent >= config.grace)
                    .then(|| format!("no answer for {:.1} s", silent.as_secs_f64()))
            });
            match (&failing, s.reported) {
                (Some(why), reported) if info.up && reported != Some(info.incarnation) => {
                    s.reported = Some(info.incarnation);
                    to_report.push((peer, info.incarnation, why.clone(), silent));
                }
                (None, Some(incarnation)) => {
                    s.reported = None;
                    to_withdraw.push((peer, incarnation));
                }
                _ => {}
            }
        }
    }
    for (peer, incarnation, reason, silent) in to_report {
        tracing::warn!(
            osd = osd.id,
            peer,
            "reporting osd.{peer} unreachable: {reason}"
        );
        let since = std::time::SystemTime::now()
            .checked_sub(silent)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let report = FailureReport {
            target_incarnation: incarnation,
            reporter_incarnation: osd.incarnation,
            reason,
            since,
        };
        let value = serde_json::to_vec(&report).expect("report serialises");
        if let Err(e) = osd
            .meta
            .put_with_lease(&failure_key(peer, osd.id), value, lease)
            .await
        {
            tracing::warn!(osd = osd.id, peer, "cannot record the failure report: {e}");
            forget_report(state, peer);
        }
        crate::metrics::OsdCounters::add(&osd.counters.failure_reports, 1);
    }
    for (peer, incarnation) in to_withdraw {
        tracing::info!(
            osd = osd.id,
            peer,
            "osd.{peer} answers again; withdrawing the report"
        );
        if let Err(e) = withdraw(osd, peer).await {
            tracing::warn!(
                osd = osd.id,
                peer,
                "cannot withdraw the failure report: {e}"
            );
            // Still on record: withdraw it again next round.
            if let Some(s) = state.lock().expect("heartbeat state lock").get_mut(&peer) {
                s.reported = Some(incarnation);
            }
        }
    }
}

/// Delete this OSD's report of `peer` (absent: nothing to do).
async fn withdraw(osd: &Osd, peer: OsdId) -> Result<(), basalt_meta::MetaError> {
    let key = failure_key(peer, osd.id);
    if let Some((_, revision)) = osd.meta.get(&key).await? {
        osd.meta.compare_and_delete(&key, revision).await?;
    }
    Ok(())
}

/// A report that could not be recorded is tried again next round.
fn forget_report(state: &Mutex<BTreeMap<OsdId, PeerState>>, peer: OsdId) {
    if let Some(s) = state.lock().expect("heartbeat state lock").get_mut(&peer) {
        s.reported = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_placement::OsdInfo;

    fn map_with(osds: &[(OsdId, u64, u32, bool)]) -> Arc<ClusterMap> {
        let mut m = ClusterMap::default();
        for &(id, incarnation, up_from, up) in osds {
            m.osds.insert(
                id,
                OsdInfo {
                    id,
                    host: format!("h{id}"),
                    addr: format!("10.0.0.{id}:7000"),
                    weight: 1,
                    up,
                    is_in: true,
                    incarnation,
                    io: String::new(),
                    up_from,
                    unflushed: false,
                    ..Default::default()
                },
            );
        }
        Arc::new(m)
    }

    /// Goal: a member promises only to the run its map shows up; once the map shows that run
    /// down, a seal waits out the promise, and a fresh process waits one lease before any
    /// seal.
    #[tokio::test(start_paused = true)]
    async fn promises_hold_seals_until_they_run_out() {
        let lease = Duration::from_millis(600);
        let leases = PeerLeases::new(Some(lease));
        let start = Instant::now();
        assert_eq!(
            leases.seal_not_before(|| map_with(&[]), &[], 9),
            start + lease
        );
        let up = map_with(&[(1, 7, 3, true)]);
        assert!(!leases.grant(|| up.clone(), 1, 8, 3, 5), "another run");
        assert!(
            !leases.grant(|| up.clone(), 1, 7, 2, 5),
            "an earlier up_from"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(leases.grant(|| up.clone(), 1, 7, 3, 5));
        let granted_at = Instant::now();
        // While the map shows the run up, nothing waits for it.
        assert!(leases.seal_not_before(|| up.clone(), &[], 9) <= Instant::now());
        let down = map_with(&[(1, 7, 3, false)]);
        assert_eq!(
            leases.seal_not_before(|| down.clone(), &[], 9),
            granted_at + lease
        );
        assert!(
            !leases.grant(|| down.clone(), 1, 7, 3, 5),
            "no promise to a down run"
        );
        let back = map_with(&[(1, 7, 9, true)]);
        assert_eq!(
            leases.seal_not_before(|| back.clone(), &[], 9),
            granted_at + lease,
            "back up with a new up_from: the old promise still binds"
        );
    }

    /// Goal: a seal that drops a member still up waits out the promise to it, and the
    /// member gets no new promise until its pings carry a map at least as new as the seal's
    /// interval (else the wait would never end while it keeps pinging).
    #[tokio::test(start_paused = true)]
    async fn a_seal_that_drops_a_live_member_bars_and_waits_for_it() {
        let lease = Duration::from_millis(600);
        let leases = PeerLeases::new(Some(lease));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let up = map_with(&[(1, 7, 3, true)]);
        assert!(leases.grant(|| up.clone(), 1, 7, 3, 5));
        let granted_at = Instant::now();
        assert!(leases.seal_not_before(|| up.clone(), &[], 9) <= Instant::now());
        assert_eq!(
            leases.seal_not_before(|| up.clone(), &[1], 9),
            granted_at + lease,
            "dropped though up: its promise binds"
        );
        leases.bar(&[1], 9);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !leases.grant(|| up.clone(), 1, 7, 3, 8),
            "a ping with a map older than the seal is not promised"
        );
        assert_eq!(
            leases.seal_not_before(|| up.clone(), &[1], 9),
            granted_at + lease
        );
        assert!(
            leases.grant(|| up.clone(), 1, 7, 3, 9),
            "its map reached the seal: promised again"
        );
        // That promise does not hold the seal up (the member knows the new interval), the
        // one given under the older map still does until it ends.
        assert_eq!(
            leases.seal_not_before(|| up.clone(), &[1], 9),
            granted_at + lease
        );
        tokio::time::sleep(lease - Duration::from_millis(100)).await;
        assert!(leases.seal_not_before(|| up.clone(), &[1], 9) <= Instant::now());
        assert!(
            leases.seal_not_before(|| up.clone(), &[1], 10) > Instant::now(),
            "a seal of a later interval waits for it"
        );
    }

    /// Goal: a primary holds a PG while every other member's lease lives, counted from the
    /// ping's sending, and not for another run of a member.
    #[tokio::test(start_paused = true)]
    async fn held_leases_expire_and_name_the_run() {
        let lease = Duration::from_millis(600);
        let leases = PeerLeases::new(Some(lease));
        let acting = [(0, 1), (1, 7), (2, 9)];
        assert!(!leases.holds_all(0, &acting));
        let sent = Instant::now();
        leases.note_promise(1, 7, sent);
        assert!(!leases.holds_all(0, &acting), "one member still missing");
        leases.note_promise(2, 9, sent);
        assert!(leases.holds_all(0, &acting));
        assert!(
            !leases.holds_all(0, &[(0, 1), (1, 8)]),
            "another run of osd.1"
        );
        tokio::time::sleep(lease - lease / 50).await;
        assert!(
            !leases.holds_all(0, &acting),
            "expired at sent + lease - margin"
        );
        // Without heartbeats every lease is held and nothing waits.
        let none = PeerLeases::new(None);
        assert!(none.holds_all(0, &acting));
        assert!(none.seal_not_before(|| map_with(&[]), &[1], 9) <= Instant::now());
    }

    /// Goal: settings under which leases cannot work are refused.
    #[test]
    fn bad_settings_are_refused() {
        assert!(HeartbeatConfig::default().check().is_ok());
        let c = HeartbeatConfig {
            peer_lease: Duration::from_millis(200),
            ..Default::default()
        };
        assert!(c.check().unwrap_err().contains("three heartbeat intervals"));
        let c = HeartbeatConfig {
            grace: Duration::from_millis(500),
            ..Default::default()
        };
        assert!(c.check().unwrap_err().contains("at least the peer lease"));
    }
}
