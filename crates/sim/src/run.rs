//! One seeded run: start a cluster, run writers and a fault injector against one volume for
//! a while, heal everything, wait for the cluster to be clean, then check every block
//! against the model and every replica against its primary.

use crate::cluster::{ClusterShape, SimCluster};
use crate::model::{block_data, decode_block, Model, OsdSet, BLOCK};
use crate::observer::Observer;
use crate::rng::SimRng;
use basalt_client::{Cluster, Volume};
use basalt_proto::{ObjectId, OsdId, PgId};
use bytes::BytesMut;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What a run does.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub shape: ClusterShape,
    /// Virtual seconds of workload and faults.
    pub run_secs: u64,
    /// Concurrent writers (each owns the objects `index % writers == its number`).
    pub writers: u64,
    /// Objects in the volume.
    pub volume_objects: u64,
    /// Inject faults (else only the workload runs).
    pub faults: bool,
    /// Print the cluster's log (from this level up) and the workload's operations as it runs.
    pub echo_log: Option<tracing::Level>,
    /// Every `ec_every`-th seed (`seed % ec_every == ec_every - 1`) runs an erasure-coded
    /// 2+1 pool instead of `shape`'s (0: none); see [`SimConfig::shape_for`].
    pub ec_every: u64,
    /// The only faults are network latency and jitter (up to 200 ms each way), under which
    /// no OSD may ever be marked down: a false failover fails the seed.
    pub jitter_only: bool,
    /// Even seeds of replicated pools read with [`ReadPolicy::Localize`] on the host of one
    /// OSD (see [`SimConfig::local_host`]): its replica serves those reads when it may, and
    /// the checker holds them to the acknowledged values like any other.
    pub local_reads: bool,
    /// Replicated pools double their PG count a third into the run and halve it back at
    /// two thirds (split and merge while the writers run and faults strike).
    pub pg_changes: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            shape: ClusterShape::default(),
            run_secs: 20,
            writers: 3,
            volume_objects: 12,
            faults: true,
            echo_log: None,
            ec_every: 4,
            jitter_only: false,
            local_reads: true,
            pg_changes: false,
        }
    }
}

impl SimConfig {
    /// The cluster seed `seed` runs: `shape`, or for every `ec_every`-th seed the same with
    /// an erasure-coded 2+1 pool, alternately of min_size 2 (= k: a write is acknowledged
    /// on exactly k chunks when a position is down; seed 1000083 lost one that way until
    /// peering waited for the last interval's members) and 3 (the default a pool gets). The
    /// choice takes nothing from the seed's random stream, so replicated seeds run as they
    /// did before.
    pub fn shape_for(&self, seed: u64) -> ClusterShape {
        if self.ec_every == 0 || seed % self.ec_every != self.ec_every - 1 {
            return self.shape.clone();
        }
        let min_size = if (seed / self.ec_every).is_multiple_of(2) {
            2
        } else {
            3
        };
        self.shape.clone().with_ec(2, 1, min_size)
    }
}

impl SimConfig {
    /// The host whose replicas serve seed `seed`'s reads, when it reads locally: even seeds
    /// of replicated pools, on the host of OSD `seed / 2 % osds`. Takes nothing from the
    /// seed's random stream.
    pub fn local_host(&self, seed: u64) -> Option<String> {
        let shape = self.shape_for(seed);
        (self.local_reads && shape.ec.is_none() && seed.is_multiple_of(2) && shape.osds > 0)
            .then(|| format!("host{}", seed / 2 % shape.osds as u64))
    }
}

/// A run that held every invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub seed: u64,
    /// Client operations completed, and those that returned an error.
    pub ops: u64,
    pub failed_ops: u64,
    /// Faults injected, by kind.
    pub faults: Vec<String>,
    /// Virtual time the run took, in milliseconds.
    pub virtual_ms: u64,
    /// Digest of everything the run did: two runs of a seed must agree.
    pub digest: u64,
    /// The run's pool was erasure coded.
    pub erasure_coded: bool,
    /// Reads a replica served to the client ([`SimConfig::local_host`]), and reads it
    /// declined (served by the primary instead).
    pub local_reads: u64,
    pub local_read_fallbacks: u64,
}

/// A run that broke an invariant (or could not run).
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub error: String,
    /// The end of the cluster's log.
    pub log_tail: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "simulation seed {} failed: {}", self.seed, self.error)?;
        writeln!(f, "--- last {} log lines ---", self.log_tail.len())?;
        for l in &self.log_tail {
            writeln!(f, "{l}")?;
        }
        writeln!(
            f,
            "replay: scripts/sim.sh --seed {} (add --log to print the whole log)",
            self.seed
        )
    }
}

/// Longest virtual wait for the cluster to become clean (start, and after healing).
const CLEAN_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest virtual wait for the writers to finish their last operation.
const WRITERS_TIMEOUT: Duration = Duration::from_secs(300);

thread_local! {
    /// Set by the panic hook when a task of this thread's simulation panicked: the first
    /// panic's message and place.
    static PANICKED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Chain a panic hook that marks the panicking thread (tokio catches task panics; a panic
/// anywhere in the cluster must fail the seed).
fn install_panic_flag() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.with(|p| {
                p.borrow_mut().get_or_insert_with(|| info.to_string());
            });
            previous(info);
        }));
    });
}

/// Does a seed replay exactly? Only when built with `--cfg tokio_unstable` (see
/// `.cargo/config.toml`), which lets the runtime's own randomness be seeded.
pub fn replays_exactly() -> bool {
    cfg!(tokio_unstable)
}

/// The runtime a simulation of `seed` runs on: one thread, paused (virtual) time, and Tokio's
/// own random choices (which of a watch channel's waiter lists a task joins, hence the order
/// tasks wake in) taken from the seed too (see [`replays_exactly`]).
pub fn seeded_runtime(seed: u64) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    #[cfg(not(tokio_unstable))]
    let _ = seed;
    builder.build()
}

/// Run `seed`. Every run of one seed on one commit does the same thing (see
/// [`replays_exactly`]).
pub fn run(seed: u64, config: &SimConfig) -> Result<Outcome, Failure> {
    install_panic_flag();
    PANICKED.with(|p| p.borrow_mut().take());
    let runtime = seeded_runtime(seed).map_err(|e| Failure {
        seed,
        error: format!("build the runtime: {e}"),
        log_tail: Vec::new(),
    })?;
    let observer = Observer::new(
        config.echo_log.unwrap_or(tracing::Level::INFO),
        config.echo_log.is_some(),
    );
    let result = runtime.block_on(async {
        let observer = observer.clone().with_start(Instant::now());
        let sub = observer.clone();
        let _guard = tracing::subscriber::set_default(sub);
        simulate(seed, config, &observer).await
    });
    // Drop the cluster's tasks while the panic flag can still be read.
    drop(runtime);
    let mut result = result;
    // A panic is the first thing that went wrong, whatever the run reported after it.
    if let Some(panic) = PANICKED.with(|p| p.borrow_mut().take()) {
        result = Err(format!("a task panicked: {panic}"));
    }
    if let Ok(outcome) = &result {
        let violations = observer.violations();
        if !violations.is_empty() {
            result = Err(violations.join("; "));
        } else {
            let _ = outcome;
        }
    }
    result.map_err(|error| Failure {
        seed,
        error,
        log_tail: observer.log_tail(),
    })
}

/// State the writers and the fault injector share.
struct Shared {
    model: Mutex<Model>,
    /// The first violation found by a reader.
    violation: Mutex<Option<String>>,
    ops: Mutex<(u64, u64)>,
    /// Crashes (kills and power cuts) so far, per OSD.
    crashes: Mutex<Vec<u64>>,
    /// Every object's PG and where it is served under the newest map (bit per OSD).
    acting: Mutex<BTreeMap<u64, (PgId, OsdSet)>>,
    /// Every OSD's incarnation in the newest map.
    incarnations: Mutex<BTreeMap<OsdId, u64>>,
    /// Every time a map showed an OSD down that the previous map showed up (OSD, virtual
    /// ms since the start).
    downs: Mutex<Vec<(OsdId, u64)>>,
    /// Whether the newest map shows each OSD up.
    up: Mutex<BTreeMap<OsdId, bool>>,
    /// The newest record of every PG (its complete copies and holders).
    records: Mutex<BTreeMap<PgId, basalt_meta::schema::PgRecord>>,
    /// The volume's head inode and its pool: an object's PG follows from them and a map
    /// (the pool's PG count may change during the run).
    head: u64,
    pool: u32,
    /// Objects in the volume.
    objects: u64,
    /// Every acknowledged write is durable (an erasure-coded pool stashes every chunk with
    /// FUA before it acknowledges).
    durable_on_ack: bool,
    digest: Mutex<Digest>,
    started: Instant,
    observer: Observer,
    echo: bool,
}

/// FNV-1a over the run's events.
#[derive(Clone, Copy)]
struct Digest(u64);

impl Digest {
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
}

impl Shared {
    fn record(&self, what: &str) {
        let mut d = self.digest.lock().expect("digest lock");
        d.add(what.as_bytes());
        d.add(&(self.started.elapsed().as_nanos() as u64).to_le_bytes());
        if self.echo {
            self.observer.note(format!("op: {what}"));
        }
    }

    fn fail(&self, why: String) {
        let mut v = self.violation.lock().expect("violation lock");
        if v.is_none() {
            *v = Some(why);
        }
    }

    fn count(&self, ok: bool) {
        let mut ops = self.ops.lock().expect("ops lock");
        ops.0 += 1;
        if !ok {
            ops.1 += 1;
        }
    }

    fn crash_counts(&self) -> Vec<u64> {
        self.crashes.lock().expect("crashes lock").clone()
    }

    /// The OSDs the newest record of `pg` names complete or holders, as their current run.
    fn complete_now(&self, pg: PgId) -> OsdSet {
        let records = self.records.lock().expect("records lock");
        let Some(rec) = records.get(&pg) else {
            return 0;
        };
        let incarnations = self.incarnations.lock().expect("incarnations lock");
        rec.complete
            .iter()
            .chain(&rec.holders)
            .filter(|c| incarnations.get(&c.osd) == Some(&c.incarnation))
            .fold(0, |s, c| s | (1u64 << c.osd))
    }

    /// The PG of `object` of the volume under `map`.
    fn pg_in(&self, map: &basalt_placement::ClusterMap, object: u64) -> Option<PgId> {
        let pool = map.pools.get(&self.pool)?;
        Some(basalt_placement::ClusterMap::pg_of(
            pool,
            ObjectId::new(self.head, object),
        ))
    }

    /// `osd` crashed: what it held unflushed is gone.
    fn crash(&self, osd: OsdId) {
        self.crashes.lock().expect("crashes lock")[osd as usize] += 1;
        self.model.lock().expect("model lock").crashed(osd);
    }

    /// The OSDs that hold a write of `object` acknowledged now, sent when the crash counts
    /// were `before`: its acting set in the client's map and in the newest map, that its
    /// PG's record names complete (or holders) as their current run, less those that
    /// crashed meanwhile. A replica still recovering applies the write too, but its copy of
    /// the PG is not one the cluster can rely on, and the contract does not count it.
    fn holders(&self, client: &Cluster, object: u64, before: &[u64]) -> OsdSet {
        let map = client.map();
        let seen = self
            .pg_in(&map, object)
            .and_then(|pg| map.acting(pg).ok().map(set_of))
            .unwrap_or(0);
        let newest = self
            .acting
            .lock()
            .expect("acting lock")
            .get(&object)
            .map(|(_, set)| *set)
            .unwrap_or(0);
        let complete = self
            .acting
            .lock()
            .expect("acting lock")
            .get(&object)
            .map_or(0, |(pg, _)| self.complete_now(*pg));
        let crashes = self.crash_counts();
        let mut out = seen & newest & complete;
        for (osd, (a, b)) in crashes.iter().zip(before).enumerate() {
            if a != b {
                out &= !(1u64 << osd);
            }
        }
        out
    }
}

/// A set of OSDs as bits.
fn set_of(osds: &[OsdId]) -> OsdSet {
    osds.iter().fold(0, |s, &o| s | (1u64 << o))
}

/// Follow every map the monitor publishes (from the metadata itself, so none is missed):
/// an OSD that leaves a PG's acting set stops holding that PG's unflushed writes.
async fn follow_acting(
    meta: Arc<basalt_meta::EmbeddedMeta>,
    shared: Arc<Shared>,
    pool: u32,
    bpo: u64,
) {
    use basalt_meta::{MetaStore, WatchEvent};
    let Ok(mut events) = meta.watch_prefix(basalt_meta::schema::MAP_KEY, 1).await else {
        shared.fail("cannot watch the cluster map".into());
        return;
    };
    // Bound: one iteration per map; ends when the run drops the metadata store.
    while let Some(Ok(event)) = events.recv().await {
        let WatchEvent::Put { value, .. } = event else {
            continue;
        };
        let Ok(mut map) = serde_json::from_slice::<basalt_placement::ClusterMap>(&value) else {
            shared.fail("undecodable cluster map".into());
            return;
        };
        if map.acting.is_empty() {
            map.update_acting();
        }
        if !map.pools.contains_key(&pool) {
            continue;
        }
        {
            let mut seen = shared.up.lock().expect("up lock");
            for o in map.osds.values() {
                if seen.insert(o.id, o.up) == Some(true) && !o.up {
                    let at = shared.started.elapsed().as_millis() as u64;
                    shared.downs.lock().expect("downs lock").push((o.id, at));
                }
            }
        }
        *shared.incarnations.lock().expect("incarnations lock") =
            map.osds.values().map(|o| (o.id, o.incarnation)).collect();
        let mut acting = shared.acting.lock().expect("acting lock");
        let mut model = shared.model.lock().expect("model lock");
        for object in 0..shared.objects {
            let Some(pg) = shared.pg_in(&map, object) else {
                continue;
            };
            let set = map.acting(pg).map(set_of).unwrap_or(0);
            acting.insert(object, (pg, set));
            let first = object * bpo;
            model.only_held_by(first..first + bpo, set);
        }
    }
}

/// Follow every PG record as it is written (complete copies and holders).
async fn follow_records(meta: Arc<basalt_meta::EmbeddedMeta>, shared: Arc<Shared>) {
    use basalt_meta::schema::{PgRecord, PGS_PREFIX};
    use basalt_meta::{MetaStore, WatchEvent};
    let Ok(mut events) = meta.watch_prefix(PGS_PREFIX, 1).await else {
        shared.fail("cannot watch the PG records".into());
        return;
    };
    // Bound: one iteration per record change; ends when the run drops the metadata store.
    while let Some(Ok(event)) = events.recv().await {
        let WatchEvent::Put { key, value, .. } = event else {
            continue;
        };
        let pg = key[PGS_PREFIX.len()..].split_once('.').and_then(|(p, i)| {
            Some(PgId {
                pool: p.parse().ok()?,
                index: i.parse().ok()?,
            })
        });
        let (Some(pg), Ok(rec)) = (pg, serde_json::from_slice::<PgRecord>(&value)) else {
            shared.fail(format!("undecodable PG record {key}"));
            return;
        };
        shared.records.lock().expect("records lock").insert(pg, rec);
    }
}

async fn simulate(seed: u64, config: &SimConfig, observer: &Observer) -> Result<Outcome, String> {
    let started = Instant::now();
    let mut rng = SimRng::new(seed);
    let shape = config.shape_for(seed);
    let erasure_coded = shape.ec.is_some();
    let mut cluster = SimCluster::start(shape.clone(), &mut rng).await?;
    if let Some(host) = config.local_host(seed) {
        cluster
            .client
            .set_read_policy(basalt_client::ReadPolicy::Localize { host });
    }
    wait_clean(&cluster.client, CLEAN_TIMEOUT)
        .await
        .map_err(|e| format!("the new cluster {e}"))?;
    let object_size = shape.object_size as u64;
    let size = config.volume_objects * object_size;
    cluster
        .client
        .create_volume("sim", size, cluster.pool().id)
        .await
        .map_err(|e| format!("create the volume: {e}"))?;
    let volume = Arc::new(
        cluster
            .client
            .open_volume("sim")
            .await
            .map_err(|e| format!("open the volume: {e}"))?,
    );
    let pool = cluster
        .client
        .map()
        .pools
        .get(&cluster.pool().id)
        .cloned()
        .ok_or("the pool is not in the map")?;
    let shared = Arc::new(Shared {
        model: Mutex::new(Model::new(size / BLOCK as u64)),
        violation: Mutex::new(None),
        ops: Mutex::new((0, 0)),
        crashes: Mutex::new(vec![0; shape.osds as usize]),
        durable_on_ack: erasure_coded,
        acting: Mutex::new(BTreeMap::new()),
        incarnations: Mutex::new(BTreeMap::new()),
        downs: Mutex::new(Vec::new()),
        up: Mutex::new(BTreeMap::new()),
        records: Mutex::new(BTreeMap::new()),
        head: volume.head(),
        pool: pool.id,
        objects: config.volume_objects,
        digest: Mutex::new(Digest(0xcbf2_9ce4_8422_2325)),
        started,
        observer: observer.clone(),
        echo: config.echo_log.is_some(),
    });
    let follower = tokio::spawn(follow_acting(
        cluster.meta(),
        shared.clone(),
        cluster.pool().id,
        object_size / BLOCK as u64,
    ));
    let record_follower = tokio::spawn(follow_records(cluster.meta(), shared.clone()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let writers: Vec<_> = (0..config.writers)
        .map(|w| {
            let job = Writer {
                id: w,
                count: config.writers,
                objects: config.volume_objects,
                blocks_per_object: object_size / BLOCK as u64,
                volume: volume.clone(),
                client: cluster.client.clone(),
                shared: shared.clone(),
                rng: rng.fork(),
                stop: stop_rx.clone(),
            };
            tokio::spawn(job.run())
        })
        .collect();
    let mut faults = Vec::new();
    let deadline = started + Duration::from_secs(config.run_secs);
    let changer = (config.pg_changes && !erasure_coded).then(|| {
        tokio::spawn(change_pg_count(
            cluster.client.clone(),
            cluster.pool().clone(),
            started,
            deadline,
            observer.clone(),
        ))
    });
    if config.faults {
        let mut injector = Injector::new(rng.fork(), observer.clone());
        injector.jitter_only = config.jitter_only;
        injector.run(&mut cluster, &shared, deadline).await?;
        faults = injector.done;
    } else {
        tokio::time::sleep_until(deadline).await;
    }
    // Heal first: a writer may be waiting for a PG an impaired OSD holds up.
    observer.note("sim: healing every fault".into());
    cluster.net.heal_all();
    cluster.net.set_latency_us(20, 200);
    for id in cluster.osd_ids() {
        if !cluster.is_running(id) {
            cluster.start_osd(id).await?;
        }
    }
    // A change the faults held up is made now, the writers still running.
    if let Some(changer) = changer {
        match changer.await {
            Ok(Ok(done)) => faults.extend(done),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(format!("the PG count changer failed: {e}")),
        }
    }
    let _ = stop_tx.send(true);
    for w in writers {
        match tokio::time::timeout(WRITERS_TIMEOUT, w).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("a writer task failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "a writer did not finish within {WRITERS_TIMEOUT:?}"
                ))
            }
        }
    }
    if let Some(v) = shared.violation.lock().expect("violation lock").take() {
        return Err(v);
    }
    if config.jitter_only {
        let downs = shared.downs.lock().expect("downs lock").clone();
        if let Some((osd, at)) = downs.first() {
            return Err(format!(
                "false failover: osd.{osd} marked down at {at} ms with only latency faults \
                 ({} down marks in all)",
                downs.len()
            ));
        }
    }
    wait_clean(&cluster.client, CLEAN_TIMEOUT)
        .await
        .map_err(|e| format!("after healing, the cluster {e}"))?;
    check_volume(&cluster, &volume, &shared).await?;
    match shape.ec {
        Some(ec) => check_stripes(&cluster, &volume, ec).await?,
        None => check_replicas(&cluster, &volume).await?,
    }
    follower.abort();
    record_follower.abort();
    let (ops, failed_ops) = *shared.ops.lock().expect("ops lock");
    let digest = shared.digest.lock().expect("digest lock").0;
    Ok(Outcome {
        seed,
        ops,
        failed_ops,
        faults,
        virtual_ms: started.elapsed().as_millis() as u64,
        digest,
        erasure_coded,
        local_reads: cluster.client.counters.local_reads.load(Relaxed),
        local_read_fallbacks: cluster.client.counters.local_read_fallbacks.load(Relaxed),
    })
}

/// Split the pool's PGs (double the count) a third of the way to `deadline` and merge them
/// back at two thirds, as `basalt pool set NAME pgs N` does; each change is retried every
/// 500 ms until the cluster takes it (the previous change must settle first: faults may
/// hold that up until they heal at `deadline`), for at most [`CLEAN_TIMEOUT`] past the
/// deadline. Returns the changes made.
async fn change_pg_count(
    client: Arc<Cluster>,
    pool: basalt_meta::schema::PoolRecord,
    started: Instant,
    deadline: Instant,
    observer: Observer,
) -> Result<Vec<String>, String> {
    use basalt_client::pool_change::{set_pool, PoolSetting};
    let third = deadline.saturating_duration_since(started) / 3;
    let base = pool.pg_count;
    let mut done = Vec::new();
    for (at, from, to) in [
        (started + third, base, base * 2),
        (started + third * 2, base * 2, base),
    ] {
        tokio::time::sleep_until(at).await;
        let mut maps = client.map_watch();
        // Bound: one try per 500 ms until the deadline.
        loop {
            let setting = PoolSetting::Pgs(to);
            let changed = set_pool(
                client.meta().as_ref(),
                &pool.name,
                &setting,
                false,
                &mut maps,
                None,
                &mut |_, _| {},
            )
            .await;
            match changed {
                Ok(_) => {
                    observer.note(format!("sim: pool PG count {from} -> {to}"));
                    done.push(format!("pg count {from} -> {to}"));
                    break;
                }
                Err(e) if Instant::now() < deadline + CLEAN_TIMEOUT => {
                    tracing::debug!("PG count {from} -> {to} not taken yet: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => {
                    observer.note(format!("sim: PG count {from} -> {to} never taken: {e}"));
                    done.push(format!("refused: PG count {from} -> {to}: {e}"));
                    return Ok(done);
                }
            }
        }
    }
    Ok(done)
}

/// Wait until every PG is active+clean (bounded by `timeout` of virtual time).
pub async fn wait_clean(client: &Cluster, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    // Bound: one check per 100 ms until the deadline.
    while Instant::now() < deadline {
        match basalt_client::status::pg_records(client).await {
            Ok(records) => {
                let map = client.map();
                let pgs = basalt_client::status::pg_states(&map, &records);
                let unclean: Vec<String> = pgs
                    .iter()
                    .filter(|p| p.state != "active+clean")
                    .map(|p| format!("{} {}", p.pg, p.state))
                    .collect();
                if !pgs.is_empty() && unclean.is_empty() {
                    return Ok(());
                }
                last = unclean.join(", ");
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("was not clean after {timeout:?}: {last}"))
}

/// Read the whole volume and check every block against the model.
async fn check_volume(
    cluster: &SimCluster,
    volume: &Volume,
    shared: &Shared,
) -> Result<(), String> {
    let object_size = volume.info().object_size as u64;
    let map = cluster.client.map();
    let pool = map
        .pools
        .get(&cluster.pool().id)
        .ok_or("the pool is not in the map")?;
    let place = |index: u64| {
        let pg = basalt_placement::ClusterMap::pg_of(pool, ObjectId::new(volume.head(), index));
        let acting = map.acting(pg).map(|a| a.to_vec()).unwrap_or_default();
        format!("object {index}, pg {pg}, acting {acting:?}")
    };
    let mut offset = 0;
    while offset < volume.size() {
        let data = volume
            .read(offset, object_size as u32)
            .await
            .map_err(|e| format!("final read at {offset}: {e}"))?;
        let model = shared.model.lock().expect("model lock");
        for (i, chunk) in data.chunks(BLOCK).enumerate() {
            let block = offset / BLOCK as u64 + i as u64;
            let value = decode_block(block, chunk)
                .map_err(|e| format!("final read ({}): {e}", place(offset / object_size)))?;
            model
                .check_read(block, value)
                .map_err(|e| format!("final read ({}): {e}", place(offset / object_size)))?;
        }
        offset += object_size;
    }
    Ok(())
}

/// Every copy of every object of the volume equals its primary's (version and bytes).
async fn check_replicas(cluster: &SimCluster, volume: &Volume) -> Result<(), String> {
    let map = cluster.client.map();
    let pool = map
        .pools
        .get(&cluster.pool().id)
        .ok_or("the pool is not in the map")?;
    let object_size = volume.info().object_size as usize;
    for index in 0..volume.size() / object_size as u64 {
        let obj = ObjectId::new(volume.head(), index);
        let pg = basalt_placement::ClusterMap::pg_of(pool, obj);
        let acting: Vec<OsdId> = map.acting(pg).map_err(|e| e.to_string())?.to_vec();
        let mut first: Option<(OsdId, Option<basalt_proto::Version>, Vec<u8>)> = None;
        for &osd in &acting {
            let Some(o) = cluster.osd(osd) else {
                return Err(format!("osd.{osd} of pg {pg} is not running"));
            };
            let version = o.store.version(obj);
            let mut bytes = vec![0u8; object_size];
            if version.is_some() {
                o.store
                    .read(obj, 0, &mut bytes)
                    .map_err(|e| format!("read {obj:?} on osd.{osd}: {e}"))?;
            }
            match &first {
                None => first = Some((osd, version, bytes)),
                Some((p, v, b)) => {
                    if *v != version || *b != bytes {
                        return Err(format!(
                            "pg {pg}: object {index} differs between osd.{p} ({v:?}) and \
                             osd.{osd} ({version:?}) after recovery"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every stripe of the volume is whole after recovery: each position's OSD holds its
/// committed chunk at one version (or none holds any), and the parity chunks are the
/// encoding of the data chunks.
async fn check_stripes(
    cluster: &SimCluster,
    volume: &Volume,
    ec: basalt_proto::EcProfile,
) -> Result<(), String> {
    let map = cluster.client.map();
    let pool = map
        .pools
        .get(&cluster.pool().id)
        .ok_or("the pool is not in the map")?;
    let scheme = basalt_ec::Scheme::new(ec.k, ec.m).map_err(|e| e.to_string())?;
    let chunk_bytes = cluster.shape.store_object_bytes() as usize;
    let stripe_bytes = volume.info().object_size as u64;
    for index in 0..volume.size() / stripe_bytes {
        let stripe = ObjectId::new(volume.head(), index);
        let pg = basalt_placement::ClusterMap::pg_of(pool, stripe);
        let positions = map.positions(pg).map_err(|e| e.to_string())?;
        if positions.len() != scheme.width() {
            return Err(format!(
                "pg {pg}: {} positions for a {ec} code",
                positions.len()
            ));
        }
        let mut versions = Vec::with_capacity(positions.len());
        let mut chunks = Vec::with_capacity(positions.len());
        for (pos, &osd) in positions.iter().enumerate() {
            let Some(o) = cluster.osd(osd) else {
                return Err(format!(
                    "osd.{osd} at position {pos} of pg {pg} is not running"
                ));
            };
            let key = stripe.chunk(pos, false);
            let mut bytes = vec![0u8; chunk_bytes];
            let version = o.store.version(key);
            if version.is_some() {
                o.store
                    .read(key, 0, &mut bytes)
                    .map_err(|e| format!("read {key:?} on osd.{osd}: {e}"))?;
            }
            versions.push(version);
            chunks.push(bytes);
        }
        if versions.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!(
                "pg {pg}: the chunks of stripe {index} differ in version after recovery: \
                 {versions:?} at {positions:?}"
            ));
        }
        if versions[0].is_none() {
            continue;
        }
        let data = chunks[..scheme.k()].concat();
        let fresh = scheme.encode(&data).map_err(|e| e.to_string())?;
        if let Some(pos) = (0..chunks.len()).find(|&p| fresh[p] != chunks[p]) {
            return Err(format!(
                "pg {pg}: stripe {index}'s chunk {pos} (osd.{}) is not the encoding of its \
                 data chunks after recovery",
                positions[pos]
            ));
        }
    }
    Ok(())
}

/// One writer: random writes, trims, reads and flushes on the objects it owns.
struct Writer {
    id: u64,
    count: u64,
    objects: u64,
    blocks_per_object: u64,
    volume: Arc<Volume>,
    client: Arc<Cluster>,
    shared: Arc<Shared>,
    rng: SimRng,
    stop: watch::Receiver<bool>,
}

impl Writer {
    async fn run(mut self) {
        let owned: Vec<u64> = (0..self.objects)
            .filter(|o| o % self.count == self.id)
            .collect();
        if owned.is_empty() {
            return;
        }
        // Bound: until stopped (the run's virtual duration).
        while !*self.stop.borrow() && self.shared.violation.lock().expect("lock").is_none() {
            tokio::time::sleep(Duration::from_millis(self.rng.below(20))).await;
            let object = owned[self.rng.below(owned.len() as u64) as usize];
            let bpo = self.blocks_per_object;
            let (start, len) = if self.rng.chance(10) {
                (0, bpo)
            } else {
                let start = self.rng.below(bpo);
                (start, self.rng.between(1, (bpo - start).min(4)))
            };
            let first = object * bpo + start;
            let blocks = first..first + len;
            match self.rng.below(100) {
                0..=49 => self.write(blocks, false, false).await,
                50..=59 => self.write(blocks, false, true).await,
                60..=66 => {
                    let fua = self.rng.chance(30);
                    self.write(blocks, true, fua).await
                }
                67..=91 => self.read(blocks).await,
                _ => self.flush().await,
            }
        }
    }

    async fn write(&mut self, blocks: std::ops::Range<u64>, zero: bool, fua: bool) {
        let before = self.shared.crash_counts();
        let written = self
            .shared
            .model
            .lock()
            .expect("model lock")
            .begin_write(blocks.clone(), zero);
        let offset = blocks.start * BLOCK as u64;
        let len = (blocks.end - blocks.start) * BLOCK as u64;
        let result = if zero {
            self.volume.trim(offset, len, fua).await
        } else {
            let mut data = BytesMut::with_capacity(len as usize);
            for &(b, _, v) in &written {
                let crate::model::Value::Data(seq) = v else {
                    unreachable!("a data write has data values")
                };
                data.extend_from_slice(&block_data(b, seq));
            }
            self.volume.write(offset, data.freeze(), fua).await
        };
        let ok = result.is_ok();
        if ok {
            let object = blocks.start / self.blocks_per_object;
            let holders = self.shared.holders(&self.client, object, &before);
            self.shared.model.lock().expect("model lock").acked(
                &written,
                fua || self.shared.durable_on_ack,
                holders,
            );
        }
        self.shared.count(ok);
        self.shared.record(&format!(
            "w{} {} {blocks:?} fua={fua} ok={ok}",
            self.id,
            if zero { "trim" } else { "write" }
        ));
    }

    async fn read(&mut self, blocks: std::ops::Range<u64>) {
        let offset = blocks.start * BLOCK as u64;
        let len = (blocks.end - blocks.start) as u32 * BLOCK as u32;
        let result = self.volume.read(offset, len).await;
        let ok = result.is_ok();
        if let Ok(data) = result {
            let model = self.shared.model.lock().expect("model lock");
            for (i, chunk) in data.chunks(BLOCK).enumerate() {
                let block = blocks.start + i as u64;
                let checked = decode_block(block, chunk).and_then(|v| model.check_read(block, v));
                if let Err(e) = checked {
                    self.shared.fail(format!("writer {} read: {e}", self.id));
                    break;
                }
            }
        }
        self.shared.count(ok);
        self.shared
            .record(&format!("w{} read {blocks:?} ok={ok}", self.id));
    }

    async fn flush(&mut self) {
        let positions = self
            .shared
            .model
            .lock()
            .expect("model lock")
            .acked_positions();
        let ok = self.volume.flush().await.is_ok();
        // A successful flush makes durable whatever was acknowledged before it, even if
        // OSDs crashed meanwhile: it must not succeed otherwise.
        if ok {
            self.shared
                .model
                .lock()
                .expect("model lock")
                .flushed(&positions);
        }
        self.shared.count(ok);
        self.shared.record(&format!("w{} flush ok={ok}", self.id));
    }
}

/// A fault in effect, and when it ends.
struct Impairment {
    until: Instant,
    osd: OsdId,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The process is down (killed or power cut); it restarts at the end.
    Down,
    /// Partitioned from every other node but the metadata.
    Partitioned,
    /// Cut from the metadata only (its lease expires; it must fence itself).
    MetaCut,
    /// Cut from everything.
    Isolated,
}

/// Injects seeded faults until a deadline, undoing each when its time is up.
struct Injector {
    rng: SimRng,
    observer: Observer,
    active: Vec<Impairment>,
    done: Vec<String>,
    /// Only latency and jitter (see [`SimConfig::jitter_only`]).
    jitter_only: bool,
}

impl Injector {
    fn new(rng: SimRng, observer: Observer) -> Injector {
        Injector {
            rng,
            observer,
            active: Vec::new(),
            done: Vec::new(),
            jitter_only: false,
        }
    }

    fn note(&mut self, shared: &Shared, what: String) {
        self.observer.note(format!("sim: {what}"));
        shared.record(&what);
        self.done.push(what);
    }

    async fn run(
        &mut self,
        cluster: &mut SimCluster,
        shared: &Shared,
        deadline: Instant,
    ) -> Result<(), String> {
        let mut next_fault = Instant::now() + self.pause();
        // Bound: one fault or one heal per iteration, until the deadline.
        loop {
            let next_heal = self.active.iter().map(|i| i.until).min();
            let wake = next_heal
                .map_or(next_fault, |h| h.min(next_fault))
                .min(deadline);
            tokio::time::sleep_until(wake).await;
            let now = Instant::now();
            let due: Vec<Impairment> = {
                let (due, keep) = std::mem::take(&mut self.active)
                    .into_iter()
                    .partition(|i| i.until <= now);
                self.active = keep;
                due
            };
            for i in due {
                self.heal(cluster, shared, &i).await?;
            }
            if now >= deadline {
                // The remaining impairments are healed with everything else.
                return Ok(());
            }
            if now >= next_fault {
                self.inject(cluster, shared).await?;
                next_fault = Instant::now() + self.pause();
            }
        }
    }

    fn pause(&mut self) -> Duration {
        Duration::from_millis(self.rng.between(300, 3000))
    }

    async fn heal(
        &mut self,
        cluster: &mut SimCluster,
        shared: &Shared,
        i: &Impairment,
    ) -> Result<(), String> {
        let net = cluster.net.clone();
        match i.kind {
            Kind::Down => {
                cluster.start_osd(i.osd).await?;
                self.note(shared, format!("restart osd.{}", i.osd));
            }
            Kind::Partitioned | Kind::Isolated => {
                for other in all_nodes(cluster) {
                    net.set_partition(i.osd, other, false);
                }
                if i.kind == Kind::Isolated {
                    net.set_meta_cut(i.osd, false);
                }
                self.note(shared, format!("heal osd.{}", i.osd));
            }
            Kind::MetaCut => {
                net.set_meta_cut(i.osd, false);
                self.note(shared, format!("reconnect osd.{} to the metadata", i.osd));
            }
        }
        Ok(())
    }

    async fn inject(&mut self, cluster: &mut SimCluster, shared: &Shared) -> Result<(), String> {
        if self.jitter_only {
            // Up to 200 ms each way per chunk, from a floor of up to half of that.
            let hi = self.rng.between(20_000, 200_000);
            cluster.net.set_latency_us(self.rng.below(hi / 2), hi);
            self.note(shared, format!("jitter up to {hi} us"));
            return Ok(());
        }
        let ids = cluster.osd_ids();
        let healthy: Vec<OsdId> = ids
            .iter()
            .copied()
            .filter(|id| self.active.iter().all(|i| i.osd != *id))
            .collect();
        // At most two OSDs impaired at once (four OSDs, three replicas, two needed for I/O).
        if healthy.is_empty() || self.active.len() >= 2 {
            return Ok(());
        }
        let osd = healthy[self.rng.below(healthy.len() as u64) as usize];
        let for_ = Duration::from_millis(self.rng.between(200, 25_000));
        let until = Instant::now() + for_;
        let roll = self.rng.below(100);
        let net = cluster.net.clone();
        let kind = match roll {
            0..=29 => {
                cluster.kill_osd(osd);
                shared.crash(osd);
                self.note(shared, format!("kill osd.{osd} for {for_:?}"));
                Kind::Down
            }
            30..=39 if self.active.is_empty() && cluster_is_clean(cluster).await => {
                // One machine at a time, and only once every copy is back: acknowledged
                // writes then always survive on the machines that kept power.
                let mut keep = self.rng.fork();
                cluster.power_cut_osd(osd, move |_| keep.chance(50));
                shared.crash(osd);
                self.note(shared, format!("power cut osd.{osd} for {for_:?}"));
                Kind::Down
            }
            40..=44 if self.active.is_empty() => {
                return self.whole_cluster_power_cut(cluster, shared).await;
            }
            45..=59 => {
                // From every other node, or (half the time) from the other OSDs only: the
                // client still reaches it, and the metadata too (peers report it; it must
                // stop serving before a new primary does).
                let peers_only = self.rng.chance(50);
                for other in all_nodes(cluster) {
                    if other != osd && !(peers_only && other == crate::net::CLIENT_NODE) {
                        net.set_partition(osd, other, true);
                    }
                }
                let for_ = for_.min(Duration::from_secs(8));
                let from = if peers_only { " from its peers" } else { "" };
                self.note(shared, format!("partition osd.{osd}{from} for {for_:?}"));
                self.active.push(Impairment {
                    until: Instant::now() + for_,
                    osd,
                    kind: Kind::Partitioned,
                });
                return Ok(());
            }
            60..=74 => {
                net.set_meta_cut(osd, true);
                self.note(
                    shared,
                    format!("cut osd.{osd} from the metadata for {for_:?}"),
                );
                Kind::MetaCut
            }
            75..=84 => {
                for other in all_nodes(cluster) {
                    if other != osd {
                        net.set_partition(osd, other, true);
                    }
                }
                net.set_meta_cut(osd, true);
                self.note(shared, format!("isolate osd.{osd} for {for_:?}"));
                Kind::Isolated
            }
            85..=92 => {
                net.reset_links_of(osd);
                self.note(shared, format!("reset the connections of osd.{osd}"));
                return Ok(());
            }
            _ => {
                // Mostly up to 20 ms; one time in four up to 200 ms (jitter the failure
                // detection must ride out).
                let top = if self.rng.chance(25) { 200_000 } else { 20_000 };
                let hi = self.rng.between(50, top);
                net.set_latency_us(self.rng.below(hi / 2), hi);
                self.note(shared, format!("latency up to {hi} us"));
                return Ok(());
            }
        };
        self.active.push(Impairment { until, osd, kind });
        Ok(())
    }

    /// Every OSD loses power at once, and comes back a moment later.
    async fn whole_cluster_power_cut(
        &mut self,
        cluster: &mut SimCluster,
        shared: &Shared,
    ) -> Result<(), String> {
        for id in cluster.osd_ids() {
            let mut keep = self.rng.fork();
            cluster.power_cut_osd(id, move |_| keep.chance(50));
            shared.crash(id);
        }
        self.note(shared, "power cut of every OSD".into());
        tokio::time::sleep(Duration::from_millis(self.rng.between(100, 3000))).await;
        for id in cluster.osd_ids() {
            cluster.start_osd(id).await?;
        }
        self.note(shared, "every OSD restarted".into());
        Ok(())
    }
}

/// Every node an OSD can be partitioned from: the other OSDs and the client.
fn all_nodes(cluster: &SimCluster) -> Vec<crate::net::NodeId> {
    let mut v = cluster.osd_ids();
    v.push(crate::net::CLIENT_NODE);
    v
}

/// Is every PG active+clean right now?
async fn cluster_is_clean(cluster: &SimCluster) -> bool {
    let Ok(records) = basalt_client::status::pg_records(&cluster.client).await else {
        return false;
    };
    let pgs = basalt_client::status::pg_states(&cluster.client.map(), &records);
    !pgs.is_empty() && pgs.iter().all(|p| p.state == "active+clean")
}
