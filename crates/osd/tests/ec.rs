//! Erasure-coded pools through real OSDs on loopback (2+1 on three OSDs): stripes read back
//! and decode from any k chunks, reads and writes go on with a position down, a returning
//! OSD is rebuilt, a crash between the two phases of a write is settled by peering, and a
//! damaged chunk is read around and repaired; small writes stash only what they change
//! (partial stashes and bumps) and are settled by peering the same way.

mod common;

use basalt_client::Cluster;
use basalt_ec::Scheme;
use basalt_meta::EmbeddedMeta;
use basalt_osd::{Osd, OsdConfig, OsdHandle};
use basalt_placement::{ClusterMap, FailureDomain, PoolSpec};
use basalt_proto::{EcProfile, ObjectId, PgId, Version};
use basalt_store::Store;
use bytes::Bytes;
use common::{base_map, OBJECT_SIZE};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const EC_POOL: u32 = 2;
/// A stripe: two chunks of the stores' object size.
const STRIPE: u32 = 2 * OBJECT_SIZE;
const STRIPES: u64 = 6;

/// The base map with `osds` OSDs plus pool 2, erasure coded k+m with the given min_size.
fn ec_map(osds: u32, k: u32, m: u32, min_size: u32) -> ClusterMap {
    let mut map = base_map();
    let template = map.osds[&0].clone();
    for id in 3..osds {
        map.osds.insert(
            id,
            basalt_placement::OsdInfo {
                id,
                ..template.clone()
            },
        );
    }
    map.pools.insert(
        EC_POOL,
        PoolSpec {
            id: EC_POOL,
            name: "ec".into(),
            size: k + m,
            min_size,
            pg_count: 4,
            failure_domain: FailureDomain::Osd,
            object_size: k * OBJECT_SIZE,
            ec: Some(EcProfile { k, m }),
            device_class: None,
            pg_count_since: 0,
            pg_count_before: 0,
        },
    );
    map
}

fn config(dir: &Path, id: u32) -> OsdConfig {
    common::osd_config(dir, id, 128 << 20)
}

/// Three OSDs, the published map and a client.
struct Ec {
    dir: tempfile::TempDir,
    meta: Arc<EmbeddedMeta>,
    map: ClusterMap,
    maps: watch::Sender<Arc<ClusterMap>>,
    osds: Vec<Option<OsdHandle>>,
    cluster: Arc<Cluster>,
}

impl Ec {
    /// A 2+1 pool on three OSDs.
    async fn start(min_size: u32) -> Ec {
        Self::start_with(3, 2, 1, min_size).await
    }

    async fn start_with(count: u32, k: u32, m: u32, min_size: u32) -> Ec {
        let dir = tempfile::tempdir().expect("temporary directory");
        let meta = Arc::new(EmbeddedMeta::in_memory());
        let mut map = ec_map(count, k, m, min_size);
        let (maps, rx) = watch::channel(Arc::new(map.clone()));
        let mut osds = Vec::new();
        for id in 0..count {
            let h = Osd::start(config(dir.path(), id), rx.clone(), meta.clone())
                .await
                .expect("start an OSD");
            let info = map.osds.get_mut(&id).expect("in the map");
            info.addr = h.addr.to_string();
            info.incarnation = h.osd.incarnation;
            osds.push(Some(h));
        }
        map.recompute();
        maps.send_replace(Arc::new(map.clone()));
        let cluster = Cluster::new(meta.clone(), maps.subscribe());
        Ec {
            dir,
            meta,
            map,
            maps,
            osds,
            cluster,
        }
    }

    /// Restart OSD `id` with a map of its own that stays the current one (where it is down,
    /// an old run) until the returned sender moves it on; the cluster's map shows it back.
    async fn restart_with_stale_map(&mut self, id: u32) -> watch::Sender<Arc<ClusterMap>> {
        let stale = self.maps.borrow().clone();
        let (lagging, lagging_rx) = watch::channel(stale);
        let h = Osd::start(config(self.dir.path(), id), lagging_rx, self.meta.clone())
            .await
            .expect("restart the OSD");
        self.adopt(id, h);
        lagging
    }

    fn publish(&mut self) {
        self.map.update_acting();
        let previous = (**self.maps.borrow()).clone();
        self.map.epoch = previous.epoch + 1;
        self.map.carry_intervals(&previous);
        self.maps.send_replace(Arc::new(self.map.clone()));
    }

    /// Stop osd `id` cleanly and mark it down.
    async fn stop(&mut self, id: u32) {
        let h = self.osds[id as usize].take().expect("running");
        h.shutdown().await.expect("shutdown");
        self.map.osds.get_mut(&id).expect("in the map").up = false;
        self.publish();
    }

    /// A volume "e" of STRIPES stripes in the EC pool, opened, with a zeroed model of it.
    async fn volume(&self) -> (basalt_client::VolumeInfo, basalt_client::Volume, Vec<u8>) {
        let size = STRIPES * STRIPE as u64;
        let info = self
            .cluster
            .create_volume("e", size, EC_POOL)
            .await
            .expect("create the EC volume");
        let volume = self.cluster.open_volume("e").await.expect("open it");
        (info, volume, vec![0u8; size as usize])
    }

    /// Start osd `id` again (a new incarnation) and mark it up.
    async fn restart(&mut self, id: u32) {
        // Tasks of the stopped run (a peering retry asleep) may hold its store for a moment;
        // its file lock goes with the last of them.
        let deadline = Instant::now() + Duration::from_secs(10);
        let h = loop {
            let rx = self.maps.subscribe();
            match Osd::start(config(self.dir.path(), id), rx, self.meta.clone()).await {
                Ok(h) => break h,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!("restart osd.{id}: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("restart osd.{id}: {e}"),
            }
        };
        self.adopt(id, h);
    }

    /// Osd `id`'s new run `h` joins: the map shows it up at its address and incarnation.
    fn adopt(&mut self, id: u32, h: OsdHandle) {
        let info = self.map.osds.get_mut(&id).expect("in the map");
        info.addr = h.addr.to_string();
        info.incarnation = h.osd.incarnation;
        info.up = true;
        self.osds[id as usize] = Some(h);
        self.publish();
    }

    fn store(&self, id: u32) -> &Arc<Store> {
        &self.osds[id as usize].as_ref().expect("running").osd.store
    }

    /// Wait until every EC PG's primary is active with no position behind.
    async fn wait_clean(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let map = self.maps.borrow().clone();
            let clean = (0..4).all(|index| {
                let pg = PgId {
                    pool: EC_POOL,
                    index,
                };
                let Some(&primary) = map.acting(pg).expect("pg in the map").first() else {
                    return false;
                };
                let Some(h) = self.osds[primary as usize].as_ref() else {
                    return false;
                };
                let e = h.osd.pgs.get(pg);
                e.interval == map.interval(pg)
                    && e.phase == basalt_osd::pg::PgPhase::Active
                    && e.ec_behind == 0
            });
            if clean {
                return;
            }
            if Instant::now() >= deadline {
                let states: Vec<String> = (0..4)
                    .map(|index| {
                        let pg = PgId {
                            pool: EC_POOL,
                            index,
                        };
                        let primary = map.acting(pg).expect("pg in the map").first().copied();
                        let e = primary
                            .and_then(|p| self.osds[p as usize].as_ref())
                            .map(|h| h.osd.pgs.get(pg));
                        format!(
                            "{pg} primary {primary:?} interval {}: {e:?}",
                            map.interval(pg)
                        )
                    })
                    .collect();
                panic!("EC PGs not clean in 30 s: {states:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait until the promotes that follow the writes' acknowledgements are done: every
    /// stripe of `inode` has no stash left and one committed version on every running OSD.
    async fn wait_promoted(&self, inode: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let settled = |index: u64| {
            let stripe = ObjectId::new(inode, index);
            let pg = ClusterMap::pg_of(&self.map.pools[&EC_POOL], stripe);
            let positions = self.map.placement(pg).expect("pg in the map");
            // Per running OSD: None while a stash is left, else its committed version.
            let versions: Vec<Option<Option<Version>>> = positions
                .iter()
                .enumerate()
                .filter_map(|(pos, &osd)| {
                    let store = &self.osds[osd as usize].as_ref()?.osd.store;
                    let stash = store
                        .version(stripe.chunk(pos, true))
                        .or(store.version(stripe.partial_stash(pos)));
                    Some(
                        stash
                            .is_none()
                            .then(|| store.version(stripe.chunk(pos, false))),
                    )
                })
                .collect();
            versions.iter().all(Option::is_some) && versions.windows(2).all(|w| w[0] == w[1])
        };
        while !(0..STRIPES).all(settled) {
            assert!(Instant::now() < deadline, "promotes done in 30 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every stripe's chunks on the running OSDs: all at one version, and any k of the
    /// three decode to the same stripe, which equals `want`.
    fn check_stripes(&self, inode: u64, want: &[u8]) {
        let scheme = Scheme::new(2, 1).expect("2+1");
        for index in 0..STRIPES {
            let stripe = ObjectId::new(inode, index);
            let pg = ClusterMap::pg_of(&self.map.pools[&EC_POOL], stripe);
            let positions = self.map.placement(pg).expect("pg in the map").to_vec();
            let mut chunks: Vec<Option<(Option<Version>, Vec<u8>)>> = Vec::new();
            for (pos, &osd) in positions.iter().enumerate() {
                let Some(h) = self.osds[osd as usize].as_ref() else {
                    chunks.push(None);
                    continue;
                };
                let key = stripe.chunk(pos, false);
                assert_eq!(
                    h.osd.store.version(stripe.chunk(pos, true)),
                    None,
                    "stripe {index} position {pos}: a stash was left behind"
                );
                assert_eq!(
                    h.osd.store.version(stripe.partial_stash(pos)),
                    None,
                    "stripe {index} position {pos}: a partial stash was left behind"
                );
                let mut buf = vec![0; OBJECT_SIZE as usize];
                h.osd.store.read(key, 0, &mut buf).expect("chunk read");
                chunks.push(Some((h.osd.store.version(key), buf)));
            }
            let versions: Vec<_> = chunks.iter().flatten().map(|c| c.0).collect();
            assert!(
                versions.windows(2).all(|w| w[0] == w[1]),
                "stripe {index}: chunk versions differ: {versions:?}"
            );
            let expect =
                &want[(index * STRIPE as u64) as usize..((index + 1) * STRIPE as u64) as usize];
            if versions.first().copied().flatten().is_none() {
                assert!(
                    expect.iter().all(|&b| b == 0),
                    "stripe {index} absent but written"
                );
                continue;
            }
            for skip in 0..3 {
                if chunks[skip].is_none() && chunks.iter().flatten().count() < 3 {
                    continue;
                }
                let view: Vec<Option<&[u8]>> = chunks
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        if i == skip {
                            None
                        } else {
                            c.as_ref().map(|c| &c.1[..])
                        }
                    })
                    .collect();
                let decoded = scheme.decode(&view).expect("any two chunks decode");
                assert!(
                    decoded == expect,
                    "stripe {index} decoded without chunk {skip} differs"
                );
            }
        }
    }
}

/// Open a stopped OSD's store: tasks of the stopped run may hold it for a moment (its file
/// lock goes with the last of them).
fn open_store(path: &Path) -> Store {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Store::open_sparse(path, &basalt_store::IoOptions::default()) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("open {}: {e}", path.display());
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("open {}: {e}", path.display()),
        }
    }
}

/// Overwrite every stripe whole, stripe i with the byte `base + i`, in the volume and the
/// model.
async fn fill_stripes(volume: &basalt_client::Volume, model: &mut [u8], base: u8) {
    for index in 0..STRIPES {
        let byte = base + index as u8;
        let s = (index * STRIPE as u64) as usize;
        model[s..s + STRIPE as usize].fill(byte);
        volume
            .write(
                index * STRIPE as u64,
                Bytes::from(vec![byte; STRIPE as usize]),
                false,
            )
            .await
            .expect("whole-stripe write");
    }
}

/// Deterministic pseudo-random writes of every shape (partial, unaligned, whole stripes,
/// spanning stripes) applied to the volume and to `model`.
async fn write_pattern(volume: &basalt_client::Volume, model: &mut [u8], seed: u64, count: usize) {
    let mut x = seed;
    for i in 0..count {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let total = model.len() as u64;
        let (offset, len) = match i % 4 {
            0 => ((x >> 33) % STRIPES * STRIPE as u64, STRIPE as u64),
            1 => {
                let o = (x >> 20) % (total - 70_000);
                (o, 1 + (x >> 45) % 70_000)
            }
            2 => ((x >> 30) % (total / 4096) * 4096, 4096),
            _ => {
                let o = (x >> 22) % (total - 300);
                (o, 1 + (x >> 50) % 300)
            }
        };
        let data: Vec<u8> = (0..len).map(|j| (x >> 56) as u8 ^ j as u8).collect();
        model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        volume
            .write(offset, Bytes::from(data), false)
            .await
            .expect("EC write");
    }
}

/// Goal: partial, unaligned, whole-stripe and spanning writes to a 2+1 pool read back as
/// written; every stripe's three chunks share one version and any two decode to it; after
/// every OSD restarts, nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_writes_read_back_and_decode_from_any_two_chunks() {
    let mut ec = Ec::start(3).await;
    let (info, volume, mut model) = ec.volume().await;
    write_pattern(&volume, &mut model, 7, 40).await;
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(
        back[..] == model[..],
        "EC volume reads back what was written"
    );
    ec.check_stripes(info.id, &model);

    drop(volume);
    for id in 0..3 {
        ec.stop(id).await;
    }
    for id in 0..3 {
        ec.restart(id).await;
    }
    ec.wait_clean().await;
    let volume = ec.cluster.open_volume("e").await.unwrap();
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(
        back[..] == model[..],
        "EC data survives a restart of every OSD"
    );
    ec.check_stripes(info.id, &model);
}

/// Goal (regression, simulator seed 1000083): at min_size = k a write is acknowledged on
/// exactly k positions. With osd.1 down, writes land on osd.0 and osd.2 only; then osd.2
/// goes and osd.1 returns with its old chunks. Only one of the last interval's two members
/// answers, so peering must not settle (it would take the writes' chunks on osd.0 for cut
/// writes, or serve osd.1's old bytes): the PGs stay incomplete. When osd.2 is back they
/// activate, rebuild osd.1, and every stripe holds what was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_min_size_k_waits_for_the_last_intervals_members() {
    let mut ec = Ec::start(2).await;
    let (info, volume, mut model) = ec.volume().await;
    write_pattern(&volume, &mut model, 5, 8).await;
    ec.wait_promoted(info.id).await;
    ec.stop(1).await;
    fill_stripes(&volume, &mut model, 0x70).await;
    ec.stop(2).await;
    ec.restart(1).await;
    // Every PG's last interval wrote on {osd.0, osd.2}; osd.0 alone answers of them.
    let map = ec.maps.borrow().clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let phases: Vec<_> = (0..4)
            .map(|index| {
                let pg = PgId {
                    pool: EC_POOL,
                    index,
                };
                let primary = map.acting(pg).expect("pg in the map")[0];
                let e = ec.osds[primary as usize].as_ref().unwrap().osd.pgs.get(pg);
                (e.interval == map.interval(pg), e.phase)
            })
            .collect();
        if phases
            .iter()
            .all(|&(current, phase)| current && phase == basalt_osd::pg::PgPhase::Incomplete)
        {
            break;
        }
        assert!(
            phases
                .iter()
                .all(|&(_, phase)| phase != basalt_osd::pg::PgPhase::Active),
            "a PG activated without k of its last interval's members: {phases:?}"
        );
        assert!(
            Instant::now() < deadline,
            "PGs incomplete in 30 s: {phases:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ec.restart(2).await;
    ec.wait_clean().await;
    ec.check_stripes(info.id, &model);
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "every acknowledged write reads back");
}

/// Goal: with one of three OSDs down (min_size 2, so the PGs stay active) reads decode
/// from the two chunks left and writes go on; when the OSD returns, recovery rebuilds its
/// chunks (stale and missing ones) and every stripe is whole again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_degraded_reads_writes_and_rebuild() {
    let mut ec = Ec::start(2).await;
    let (info, volume, mut model) = ec.volume().await;
    write_pattern(&volume, &mut model, 11, 24).await;
    ec.stop(1).await;
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "degraded reads decode");
    write_pattern(&volume, &mut model, 12, 24).await;
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "degraded writes read back");
    ec.restart(1).await;
    ec.wait_clean().await;
    ec.check_stripes(info.id, &model);
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "reads after the rebuild");
}

/// Goal (regression, seen once in `ec_kill_primary_under_write_load`): a returning OSD
/// whose own map still lacks its new run refuses pushes (it takes no writes until the
/// cluster knows it), while it already answers the new primary's LIST and reads. The
/// rebuild must not count such a position rebuilt: until every chunk is really there, the
/// position stays behind, so reads decode instead of taking its missing chunk for a stripe
/// never written. Once its map arrives, the rebuild finishes and everything verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_rebuild_waits_for_a_returning_osd_that_refuses_pushes() {
    let mut ec = Ec::start(2).await;
    let (info, volume, mut model) = ec.volume().await;
    write_pattern(&volume, &mut model, 21, 24).await;
    // A promote still on its way to osd.1 when it stops would leave it a stash, which its
    // return must drop before the PG activates: a DROP it refuses while its map lags.
    ec.wait_promoted(info.id).await;
    ec.stop(1).await;
    // Written while osd.1 is down: every stripe changes, so osd.1 misses all of them.
    fill_stripes(&volume, &mut model, 0x50).await;
    // osd.1 comes back, but its own map stays the one where it is down (old run).
    let lagging = ec.restart_with_stale_map(1).await;
    // Wait for the PGs osd.1 is a member (not the primary) of to activate, then give their
    // rebuild a few rounds against the refusing member.
    let map = ec.maps.borrow().clone();
    let watched: Vec<(PgId, u32, usize)> = (0..4)
        .filter_map(|index| {
            let pg = PgId {
                pool: EC_POOL,
                index,
            };
            let positions = map.placement(pg).unwrap();
            let pos = positions.iter().position(|&o| o == 1)?;
            (positions[0] != 1).then_some((pg, positions[0], pos))
        })
        .collect();
    assert!(
        !watched.is_empty(),
        "osd.1 is a member of some PG it is not primary of"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !watched.iter().all(|&(pg, primary, _)| {
        let e = ec.osds[primary as usize].as_ref().unwrap().osd.pgs.get(pg);
        e.interval == map.interval(pg) && e.phase == basalt_osd::pg::PgPhase::Active
    }) {
        assert!(Instant::now() < deadline, "PGs active in 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Every position counted current holds every stripe's chunk at the stripe's version.
    let mut behind_seen = 0;
    for index in 0..STRIPES {
        let stripe = ObjectId::new(info.id, index);
        let pg = ClusterMap::pg_of(&map.pools[&EC_POOL], stripe);
        let Some(&(_, primary, pos)) = watched.iter().find(|w| w.0 == pg) else {
            continue;
        };
        let behind = ec.osds[primary as usize]
            .as_ref()
            .unwrap()
            .osd
            .pgs
            .get(pg)
            .ec_behind;
        let held = ec.store(1).version(stripe.chunk(pos, false));
        let want = ec.store(primary).version(stripe.chunk(0, false));
        // Reads of it are right meanwhile (those of PGs osd.1 is primary of wait for it).
        let at = index * STRIPE as u64;
        let back = volume.read(at, STRIPE).await.unwrap();
        assert!(
            back[..] == model[at as usize..(at + STRIPE as u64) as usize],
            "stripe {index} reads right while the rebuild waits"
        );
        if behind & (1 << pos) != 0 {
            behind_seen += 1;
        } else {
            assert_eq!(
                held, want,
                "stripe {index}: osd.1 counted current at position {pos} without the chunk"
            );
        }
    }
    assert!(
        behind_seen > 0,
        "osd.1 refused every push, so some position is still behind"
    );
    // Its map arrives: it takes the pushes, the rebuild finishes.
    lagging.send_replace(ec.maps.borrow().clone());
    ec.wait_clean().await;
    ec.check_stripes(info.id, &model);
    // The chunks rebuilt are counted as recovery pushes on the primaries.
    let rebuilt: u64 = ec
        .osds
        .iter()
        .flatten()
        .map(|h| {
            h.osd
                .counters
                .pushes(basalt_osd::recovery::PushKind::Recovery)
                .0
        })
        .sum();
    assert!(rebuilt >= behind_seen, "rebuilt chunks counted: {rebuilt}");
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "reads after the rebuild");
}

/// Goal: a write cut between its two phases is settled by peering: a stash that reached
/// only one position is dropped (the stripe keeps its old contents), one that reached two
/// is rolled forward on all three; a promote lost on one position is redone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_crash_between_phases_is_settled_by_peering() {
    let mut ec = Ec::start(3).await;
    let (info, volume, mut model) = ec.volume().await;
    write_pattern(&volume, &mut model, 3, 12).await;
    for index in 0..3u64 {
        let s = (index * STRIPE as u64) as usize;
        model[s..s + STRIPE as usize].fill(index as u8 + 1);
        volume
            .write(
                index * STRIPE as u64,
                Bytes::from(vec![index as u8 + 1; STRIPE as usize]),
                false,
            )
            .await
            .unwrap();
    }
    volume.flush().await.unwrap();
    drop(volume);
    // The "crash": every OSD stops, then a write v' of stripe i is planted as it would be
    // found after dying part-way: stripe 0 stashed on one position, stripe 1 stashed on two,
    // stripe 2 stashed everywhere and promoted on one.
    let scheme = Scheme::new(2, 1).unwrap();
    let paths: Vec<_> = (0..3)
        .map(|id| ec.dir.path().join(format!("osd{id}.dat")))
        .collect();
    // Above every version assigned so far, below every one the next intervals assign.
    let planted = Version::new(ec.map.epoch as u64, 1 << 40);
    for id in 0..3 {
        ec.stop(id).await;
    }
    let new_bytes = |i: u64| vec![0xa0 + i as u8; STRIPE as usize];
    for index in 0..3u64 {
        let stripe = ObjectId::new(info.id, index);
        let pg = ClusterMap::pg_of(&ec.map.pools[&EC_POOL], stripe);
        let positions = ec.map.placement(pg).unwrap().to_vec();
        let chunks = scheme.encode(&new_bytes(index)).unwrap();
        let reach = index as usize + 1;
        for (pos, &osd) in positions.iter().enumerate().take(reach) {
            let store = open_store(&paths[osd as usize]);
            store
                .write(stripe.chunk(pos, true), 0, &chunks[pos], planted)
                .unwrap();
            if index == 2 && pos == 0 {
                store
                    .promote(stripe.chunk(pos, true), stripe.chunk(pos, false))
                    .unwrap();
            }
            store.close().unwrap();
        }
        if index >= 1 {
            let s = (index * STRIPE as u64) as usize;
            model[s..s + STRIPE as usize].copy_from_slice(&new_bytes(index));
        }
    }
    for id in 0..3 {
        ec.restart(id).await;
    }
    ec.wait_clean().await;
    ec.check_stripes(info.id, &model);
    let volume = ec.cluster.open_volume("e").await.unwrap();
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(
        back[..] == model[..],
        "reads after peering settled the cut writes"
    );
}

/// Goal: a chunk damaged on disk (its crc32c fails) is treated as missing: the read still
/// returns the right data, and the chunk is rewritten so it reads cleanly afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_damaged_chunk_is_read_around_and_repaired() {
    let ec = Ec::start(3).await;
    let info = ec
        .cluster
        .create_volume("e", STRIPES * STRIPE as u64, EC_POOL)
        .await
        .unwrap();
    let volume = ec.cluster.open_volume("e").await.unwrap();
    let data: Vec<u8> = (0..STRIPE).map(|i| (i % 251) as u8).collect();
    volume
        .write(0, Bytes::from(data.clone()), false)
        .await
        .unwrap();
    volume.flush().await.unwrap();
    let stripe = ObjectId::new(info.id, 0);
    let pg = ClusterMap::pg_of(&ec.map.pools[&EC_POOL], stripe);
    let positions = ec.map.placement(pg).unwrap().to_vec();
    // Damage data chunk 0 where it lives.
    let (pos, osd) = (0usize, positions[0]);
    let key = stripe.chunk(pos, false);
    let offset = ec.store(osd).object_offset(key).expect("chunk stored");
    let path = ec.dir.path().join(format!("osd{osd}.dat"));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0x5a; 64], offset + 100).unwrap();
        f.sync_all().expect("sync the store file");
    }
    let mut probe = vec![0; 4096];
    assert!(
        ec.store(osd).read(key, 0, &mut probe).is_err(),
        "the damaged chunk fails its checksum"
    );
    let back = volume.read(0, STRIPE).await.unwrap();
    assert!(
        back[..] == data[..],
        "the read decodes around the damaged chunk"
    );
    let mut whole = vec![0; OBJECT_SIZE as usize];
    ec.store(osd)
        .read(key, 0, &mut whole)
        .expect("the chunk was repaired");
    assert!(
        whole[..] == data[..OBJECT_SIZE as usize],
        "repaired chunk holds the data"
    );
}

/// Goal: when a placement change moves positions to other OSDs (here positions 0 and 1 of
/// every PG swap holders, so each holds the other's chunks), peering finds the chunks on
/// their earlier holders: nothing is unfound, a write cut before its promotes is rolled
/// forward from stashes left there, the moved positions are rebuilt, and the misplaced
/// chunks are removed once the PG is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_positions_moved_to_other_osds_are_rebuilt_from_earlier_holders() {
    let mut ec = Ec::start(3).await;
    let (info, volume, mut model) = ec.volume().await;
    write_pattern(&volume, &mut model, 5, 24).await;
    volume.flush().await.unwrap();
    drop(volume);
    let planted = Version::new(ec.map.epoch as u64, 1 << 40);
    for id in 0..3 {
        ec.stop(id).await;
    }
    // A write of stripe 0 cut after its stashes reached positions 1 and 2.
    let scheme = Scheme::new(2, 1).unwrap();
    let stripe = ObjectId::new(info.id, 0);
    let pg = ClusterMap::pg_of(&ec.map.pools[&EC_POOL], stripe);
    let positions = ec.map.placement(pg).unwrap().to_vec();
    let new = vec![0x77u8; STRIPE as usize];
    let chunks = scheme.encode(&new).unwrap();
    for pos in 1..3 {
        let path = ec.dir.path().join(format!("osd{}.dat", positions[pos]));
        let store = open_store(&path);
        store
            .write(stripe.chunk(pos, true), 0, &chunks[pos], planted)
            .unwrap();
        store.close().unwrap();
    }
    model[..STRIPE as usize].copy_from_slice(&new);
    for table in ec.map.pgs.get_mut(&EC_POOL).unwrap() {
        table.swap(0, 1);
    }
    for id in 0..3 {
        ec.restart(id).await;
    }
    ec.wait_clean().await;
    ec.check_stripes(info.id, &model);
    let volume = ec.cluster.open_volume("e").await.unwrap();
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "reads after the positions moved");
    // Every OSD holds only chunks of its own positions now.
    for id in 0..3u32 {
        for (key, _) in ec.store(id).objects() {
            let Some((pos, stash)) = key.chunk_position() else {
                continue;
            };
            let pg = ClusterMap::pg_of(&ec.map.pools[&EC_POOL], key);
            let holder = ec.map.placement(pg).unwrap()[pos];
            assert!(
                holder == id && !stash,
                "osd.{id} still holds {key} (position {pos} of {pg}, held by osd.{holder})"
            );
        }
    }
}

/// Damage 64 bytes of chunk key `key` in osd `id`'s store file, below its checksums.
fn damage_chunk(ec: &Ec, id: u32, key: ObjectId) {
    use std::os::unix::fs::FileExt;
    let offset = ec.store(id).object_offset(key).expect("chunk stored");
    let path = ec.dir.path().join(format!("osd{id}.dat"));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open the store file");
    f.write_all_at(&[0x5a; 64], offset + 4096)
        .expect("damage the chunk");
    f.sync_all().expect("sync the store file");
}

/// Goal: on a 2+1 pool, scrub rebuilds a chunk damaged on disk, and detects (without
/// guessing which one) a chunk that silently disagrees with the parity: with m = 1 the
/// wrong chunk cannot be told apart, so it is reported, not repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_scrub_repairs_damage_and_reports_what_m1_cannot_locate() {
    let ec = Ec::start(3).await;
    let (info, volume, mut model) = ec.volume().await;
    write_pattern(&volume, &mut model, 9, 16).await;
    volume.flush().await.unwrap();
    let clean = ec.cluster.scrub(Some(EC_POOL), &|_, _| {}).await.unwrap();
    assert_eq!(clean.inconsistent, 0, "{clean:?}");
    let written = clean.objects;
    assert!(written > 0);

    let placed = |index: u64| {
        let stripe = ObjectId::new(info.id, index);
        let pg = ClusterMap::pg_of(&ec.map.pools[&EC_POOL], stripe);
        (stripe, ec.map.placement(pg).unwrap().to_vec())
    };
    // Stripe 0: the parity chunk damaged on disk.
    let (s0, p0) = placed(0);
    damage_chunk(&ec, p0[2], s0.chunk(2, false));
    let report = ec.cluster.scrub(Some(EC_POOL), &|_, _| {}).await.unwrap();
    assert_eq!(
        (report.objects, report.inconsistent, report.repaired),
        (written, 1, 1),
        "{report:?}"
    );
    let mut buf = vec![0u8; OBJECT_SIZE as usize];
    ec.store(p0[2])
        .read(s0.chunk(2, false), 0, &mut buf)
        .expect("the parity chunk was rebuilt");
    ec.check_stripes(info.id, &model);

    // Stripe 1: data chunk 1 rewritten behind the primary's back at the same version.
    let (s1, p1) = placed(1);
    let key = s1.chunk(1, false);
    let v = ec.store(p1[1]).version(key).unwrap();
    ec.store(p1[1])
        .write(key, 0, &vec![0x42; OBJECT_SIZE as usize], v)
        .unwrap();
    let report = ec.cluster.scrub(Some(EC_POOL), &|_, _| {}).await.unwrap();
    assert_eq!((report.inconsistent, report.repaired), (1, 0), "{report:?}");
}

/// Goal: on a 4+2 pool (six OSDs), scrub locates a chunk that silently disagrees with the
/// others (every chunk reads cleanly, the parity does not match) and rewrites it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_scrub_locates_a_wrong_chunk_with_two_parities() {
    let ec = Ec::start_with(6, 4, 2, 5).await;
    let stripe_bytes = 4 * OBJECT_SIZE as u64;
    let info = ec
        .cluster
        .create_volume("e", 4 * stripe_bytes, EC_POOL)
        .await
        .unwrap();
    let volume = ec.cluster.open_volume("e").await.unwrap();
    let data: Vec<u8> = (0..4 * stripe_bytes).map(|i| (i % 253) as u8).collect();
    volume
        .write(0, Bytes::from(data.clone()), false)
        .await
        .unwrap();
    volume.flush().await.unwrap();
    let stripe = ObjectId::new(info.id, 2);
    let pg = ClusterMap::pg_of(&ec.map.pools[&EC_POOL], stripe);
    let holder = ec.map.placement(pg).unwrap()[3];
    let key = stripe.chunk(3, false);
    let v = ec.store(holder).version(key).unwrap();
    ec.store(holder)
        .write(key, 0, &vec![0x99; OBJECT_SIZE as usize], v)
        .unwrap();
    let report = ec.cluster.scrub(None, &|_, _| {}).await.unwrap();
    assert_eq!(
        (report.objects, report.inconsistent, report.repaired),
        (4, 1, 1),
        "{report:?}"
    );
    let back = volume.read(0, data.len() as u32).await.unwrap();
    assert!(back[..] == data[..], "the wrong chunk was rewritten");
    let again = ec.cluster.scrub(None, &|_, _| {}).await.unwrap();
    assert_eq!(again.inconsistent, 0, "{again:?}");
}

/// Goal: layers work on an erasure-coded pool: a snapshot keeps what was written before it
/// while the head moves on; a clone reads through to the snapshot and its partial writes
/// copy the whole stripe up; flatten and snapshot removal keep every layer's data; an image
/// imported into the pool is cloned and the clone reads the image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_snapshots_clones_and_images() {
    let ec = Ec::start(3).await;
    let c = &ec.cluster;
    let size = STRIPES * STRIPE as u64;
    c.create_volume("v", size, EC_POOL).await.unwrap();
    let v = c.open_volume("v").await.unwrap();
    let mut before = vec![0u8; size as usize];
    write_pattern(&v, &mut before, 21, 16).await;
    c.snapshot_volume("v", "s1").await.unwrap();
    let v = c.open_volume("v").await.unwrap();
    let mut head = before.clone();
    write_pattern(&v, &mut head, 22, 12).await;
    let snap = c.open_snapshot("v", "s1").await.unwrap();
    assert!(
        snap.read(0, size as u32).await.unwrap()[..] == before[..],
        "snapshot"
    );
    assert!(
        v.read(0, size as u32).await.unwrap()[..] == head[..],
        "head"
    );

    c.clone_snapshot("v", "s1", "cl").await.unwrap();
    let cl = c.open_volume("cl").await.unwrap();
    assert!(
        cl.read(0, size as u32).await.unwrap()[..] == before[..],
        "clone reads its parent"
    );
    let mut clone = before.clone();
    write_pattern(&cl, &mut clone, 23, 8).await;
    assert!(
        cl.read(0, size as u32).await.unwrap()[..] == clone[..],
        "clone after copy-ups"
    );
    assert!(
        snap.read(0, size as u32).await.unwrap()[..] == before[..],
        "snapshot unchanged"
    );

    c.flatten_volume("cl", &|_, _| {}).await.unwrap();
    let cl = c.open_volume("cl").await.unwrap();
    assert!(
        cl.read(0, size as u32).await.unwrap()[..] == clone[..],
        "flattened clone"
    );
    c.remove_snapshot("v", "s1", &|_, _| {}).await.unwrap();
    let v = c.open_volume("v").await.unwrap();
    assert!(
        v.read(0, size as u32).await.unwrap()[..] == head[..],
        "head after snapshot rm"
    );

    let image: Vec<u8> = (0..size).map(|i| (i % 241) as u8).collect();
    c.begin_image("img", size, EC_POOL, "test").await.unwrap();
    let w = c.open_image_for_import("img").await.unwrap();
    w.write(0, Bytes::from(image.clone()), false).await.unwrap();
    c.finish_image("img").await.unwrap();
    c.clone_image("img", "vm").await.unwrap();
    let vm = c.open_volume("vm").await.unwrap();
    assert!(
        vm.read(0, size as u32).await.unwrap()[..] == image[..],
        "clone of the image"
    );
    // A clone reads through to the image: no range of it may be reported as a hole
    // (sparse-aware copies would skip the image's data).
    let extents = vm.allocation(0, size).await.unwrap();
    assert!(extents.iter().all(|e| e.allocated), "{extents:?}");
    vm.write(5, Bytes::from_static(b"boot"), false)
        .await
        .unwrap();
    let mut want = image.clone();
    want[5..9].copy_from_slice(b"boot");
    assert!(
        vm.read(0, size as u32).await.unwrap()[..] == want[..],
        "written clone"
    );
    let img = c.open_image("img").await.unwrap();
    assert!(
        img.read(0, size as u32).await.unwrap()[..] == image[..],
        "image unchanged"
    );
}

/// Where each position's committed chunk of every stripe of `inode` lives in its store
/// (None: absent or the OSD stopped). A whole-stripe write moves a stash into place (a new
/// slot); a partial write merges blocks into the chunk where it is.
fn chunk_slots(ec: &Ec, inode: u64) -> Vec<Vec<Option<u64>>> {
    (0..STRIPES)
        .map(|index| {
            let stripe = ObjectId::new(inode, index);
            let pg = ClusterMap::pg_of(&ec.map.pools[&EC_POOL], stripe);
            let positions = ec.map.placement(pg).expect("pg in the map").to_vec();
            positions
                .iter()
                .enumerate()
                .map(|(pos, &osd)| {
                    let h = ec.osds[osd as usize].as_ref()?;
                    h.osd.store.object_offset(stripe.chunk(pos, false))
                })
                .collect()
        })
        .collect()
}

/// Goal: small writes to a 2+1 pool whose positions are all healthy take the partial path —
/// every chunk stays in its slot (merged in place, none rewritten whole) while its version
/// moves on — and read back, with every stripe's chunks at one version and any two
/// decoding to it; a write too large for the partial path still rewrites the stripe whole;
/// with a position down, reads after partial writes decode and writes go on (whole), and
/// the returning OSD is rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_partial_writes_merge_in_place_and_read_back() {
    let mut ec = Ec::start(2).await;
    let (info, volume, mut model) = ec.volume().await;
    fill_stripes(&volume, &mut model, 1).await;
    ec.wait_promoted(info.id).await;
    let before = chunk_slots(&ec, info.id);
    let mut x = 5u64;
    for i in 0..48u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // 4 KiB aligned, or a few unaligned bytes inside one block.
        let (offset, len) = match i % 2 {
            0 => ((x >> 30) % (model.len() as u64 / 4096) * 4096, 4096u64),
            _ => {
                let block = (x >> 30) % (model.len() as u64 / 4096) * 4096;
                (block + (x >> 50) % 3000, 1 + (x >> 20) % 1000)
            }
        };
        let data: Vec<u8> = (0..len).map(|j| (x >> 56) as u8 ^ j as u8).collect();
        model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        volume
            .write(offset, Bytes::from(data), false)
            .await
            .expect("small EC write");
    }
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "small writes read back");
    ec.wait_promoted(info.id).await;
    ec.check_stripes(info.id, &model);
    assert_eq!(
        chunk_slots(&ec, info.id),
        before,
        "partial writes merge in place"
    );
    // Half a stripe at once is no partial write: that stripe is rewritten whole.
    let half = vec![0x5a; STRIPE as usize / 2];
    model[..half.len()].copy_from_slice(&half);
    volume.write(0, Bytes::from(half), false).await.unwrap();
    ec.wait_promoted(info.id).await;
    let after = chunk_slots(&ec, info.id);
    assert!(
        (0..3).all(|pos| after[0][pos] != before[0][pos]),
        "a large write moves stashes into place: {:?} then {:?}",
        before[0],
        after[0]
    );
    ec.check_stripes(info.id, &model);

    // Degraded: reads decode around the missing chunks the partial writes left.
    ec.stop(2).await;
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "degraded reads after partial writes");
    write_pattern(&volume, &mut model, 21, 16).await;
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "degraded writes read back");
    ec.restart(2).await;
    ec.wait_clean().await;
    write_pattern(&volume, &mut model, 22, 16).await;
    ec.wait_promoted(info.id).await;
    ec.check_stripes(info.id, &model);
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(
        back[..] == model[..],
        "reads after the rebuild and more small writes"
    );
}

/// A partial stash as a STASH carries it: the header block (docs/design.md,
/// "Partial-stripe writes"), then the blocks.
fn partial_stash(base: Version, first_block: u32, blocks: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    b[0..4].copy_from_slice(b"BECP");
    b[4..6].copy_from_slice(&1u16.to_le_bytes());
    b[8..16].copy_from_slice(&base.epoch.to_le_bytes());
    b[16..24].copy_from_slice(&base.counter.to_le_bytes());
    b[24..28].copy_from_slice(&first_block.to_le_bytes());
    b[28..32].copy_from_slice(&((blocks.len() / 4096) as u32).to_le_bytes());
    let crc = crc32c::crc32c(&b[..32]);
    b[32..36].copy_from_slice(&crc.to_le_bytes());
    b.extend_from_slice(blocks);
    b
}

/// Goal: a partial write cut between its two phases is settled by peering, and a partial
/// stash counts only over its base. Planted after a stop of every OSD: stripe 0's write
/// stashed on one position only (rolled back); stripe 1's on the touched data position and
/// parity, not the bump (rolled forward: both merged, the third position rebuilt); stripe
/// 2's on all three and merged on one (rolled forward); stripe 3's on two positions whose
/// chunks are not at the stashes' base (never merged: the stripe keeps its contents).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_partial_write_cut_between_phases_is_settled_by_peering() {
    let mut ec = Ec::start(3).await;
    let (info, volume, mut model) = ec.volume().await;
    fill_stripes(&volume, &mut model, 1).await;
    volume.flush().await.unwrap();
    ec.wait_promoted(info.id).await;
    drop(volume);
    let scheme = Scheme::new(2, 1).unwrap();
    let paths: Vec<_> = (0..3)
        .map(|id| ec.dir.path().join(format!("osd{id}.dat")))
        .collect();
    let planted = Version::new(ec.map.epoch as u64, 1 << 40);
    let mut positions = Vec::new();
    let mut bases = Vec::new();
    for index in 0..4u64 {
        let stripe = ObjectId::new(info.id, index);
        let pg = ClusterMap::pg_of(&ec.map.pools[&EC_POOL], stripe);
        positions.push(ec.map.placement(pg).unwrap().to_vec());
        let osd = positions[index as usize][0];
        bases.push(
            ec.store(osd)
                .version(stripe.chunk(0, false))
                .expect("written"),
        );
    }
    for id in 0..3 {
        ec.stop(id).await;
    }
    let block = 3usize; // chunk-local block 3 of data chunk 0
    for index in 0..4u64 {
        let stripe = ObjectId::new(info.id, index);
        let s = (index * STRIPE as u64) as usize;
        let old = model[s..s + STRIPE as usize].to_vec();
        let mut new = old.clone();
        new[block * 4096..(block + 1) * 4096].fill(0xc0 + index as u8);
        let chunks = scheme.encode(&new).unwrap();
        // Stripe 3's stashes name a base its chunks are not at.
        let base = match index {
            3 => Version::new(bases[3].epoch, bases[3].counter + 1),
            _ => bases[index as usize],
        };
        let stashes = [
            partial_stash(
                base,
                block as u32,
                &chunks[0][block * 4096..(block + 1) * 4096],
            ),
            partial_stash(base, 0, &[]),
            partial_stash(
                base,
                block as u32,
                &chunks[2][block * 4096..(block + 1) * 4096],
            ),
        ];
        let reach: &[usize] = match index {
            0 => &[2],
            1 => &[0, 2],
            2 => &[0, 1, 2],
            _ => &[0, 2],
        };
        for &pos in reach {
            let osd = positions[index as usize][pos];
            let store = open_store(&paths[osd as usize]);
            let key = stripe.partial_stash(pos);
            store.write(key, 0, &stashes[pos], planted).unwrap();
            if index == 2 && pos == 1 {
                let n = (stashes[pos].len() / 4096 - 1) as u32;
                assert!(store.merge(key, 1, stripe.chunk(pos, false), 0, n).unwrap());
            }
            store.close().unwrap();
        }
        if index == 1 || index == 2 {
            model[s..s + STRIPE as usize].copy_from_slice(&new);
        }
    }
    for id in 0..3 {
        ec.restart(id).await;
    }
    ec.wait_clean().await;
    ec.check_stripes(info.id, &model);
    let volume = ec.cluster.open_volume("e").await.unwrap();
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(
        back[..] == model[..],
        "reads after peering settled the cut partial writes"
    );
    // And the stripes take partial writes again.
    write_pattern(&volume, &mut model, 31, 12).await;
    ec.wait_promoted(info.id).await;
    ec.check_stripes(info.id, &model);
}

/// Every stripe written while one OSD was down left unfound: osd.1 stops and every stripe
/// is overwritten on the two others; osd.1 returns with a map that lags (it refuses the
/// rebuild's pushes, so its chunks stay old, as a slow rebuild would leave them); then
/// `victim`, another holder of the new chunks, stops. Once every EC PG is active (its
/// stripes unfound) or incomplete (a PG osd.1 leads: of the last interval that activated,
/// without osd.1, only one member answers), returns the victim and the unfound stripes.
async fn leave_stripes_unfound(
    ec: &mut Ec,
    info: &basalt_client::VolumeInfo,
    volume: &basalt_client::Volume,
    model: &mut [u8],
) -> (u32, Vec<ObjectId>) {
    write_pattern(volume, model, 31, 16).await;
    ec.wait_promoted(info.id).await;
    ec.stop(1).await;
    fill_stripes(volume, model, 0x60).await;
    let lagging = ec.restart_with_stale_map(1).await;
    // Wait until the PGs osd.1 does not lead are active with it back (and behind).
    let map = ec.maps.borrow().clone();
    let led_by_others: Vec<(PgId, u32)> = (0..4)
        .map(|index| PgId {
            pool: EC_POOL,
            index,
        })
        .map(|pg| (pg, map.acting(pg).expect("pg in the map")[0]))
        .filter(|&(_, p)| p != 1)
        .collect();
    let victim = match led_by_others.first() {
        Some(&(_, p)) => 2 - p, // the OSD that is neither osd.1 nor that primary
        None => panic!("osd.1 leads every PG"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !led_by_others.iter().all(|&(pg, primary)| {
        let e = ec.osds[primary as usize]
            .as_ref()
            .expect("primary running")
            .osd
            .pgs
            .get(pg);
        e.interval == map.interval(pg) && e.phase == basalt_osd::pg::PgPhase::Active
    }) {
        assert!(
            Instant::now() < deadline,
            "PGs active with osd.1 back in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ec.stop(victim).await;
    // osd.1 now learns its run, and every map from then on: it serves, and takes pushes
    // (none of the unfound stripes).
    let mut maps = ec.maps.subscribe();
    tokio::spawn(async move {
        // Bound: ends with the test's map sender.
        loop {
            lagging.send_replace(maps.borrow_and_update().clone());
            if maps.changed().await.is_err() {
                return;
            }
        }
    });
    let map = ec.maps.borrow().clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        use basalt_osd::pg::PgPhase;
        let entries: Vec<_> = (0..4)
            .filter_map(|index| {
                let pg = PgId {
                    pool: EC_POOL,
                    index,
                };
                let primary = map.acting(pg).expect("pg in the map")[0];
                let e = ec.osds[primary as usize].as_ref()?.osd.pgs.get(pg);
                (e.interval == map.interval(pg)).then_some(e)
            })
            .collect();
        let settled = entries.len() == 4
            && entries
                .iter()
                .all(|e| matches!(e.phase, PgPhase::Active | PgPhase::Incomplete));
        let unfound: Vec<ObjectId> = entries
            .iter()
            .filter(|e| e.phase == PgPhase::Active)
            .flat_map(|e| e.ec_unfound.iter().copied())
            .collect();
        if settled && !unfound.is_empty() {
            // Every stripe of an active PG is unfound: each was overwritten meanwhile.
            let active_stripes = (0..STRIPES)
                .map(|i| ObjectId::new(info.id, i))
                .filter(|&s| {
                    let pg = ClusterMap::pg_of(&map.pools[&EC_POOL], s);
                    entries
                        .iter()
                        .zip(0..)
                        .any(|(e, index)| index == pg.index && e.phase == PgPhase::Active)
                })
                .count();
            assert_eq!(unfound.len(), active_stripes, "{unfound:?}");
            return (victim, unfound);
        }
        assert!(
            Instant::now() < deadline,
            "PGs active with unfound stripes in 30 s: {entries:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The status of every EC PG from the records (unfound count and the OSDs waited for).
async fn ec_pg_states(ec: &Ec) -> Vec<basalt_client::status::PgStatus> {
    let records = basalt_client::status::pg_records(&ec.cluster)
        .await
        .expect("PG records");
    let map = ec.maps.borrow().clone();
    basalt_client::status::pg_states(&map, &records)
        .into_iter()
        .filter(|p| p.pg.starts_with(&format!("{EC_POOL}.")))
        .collect()
}

/// Goal (issue 30, item 4): a stripe whose newest write is on an OSD that is down but
/// will return is unavailable, not lost. With 2+1 at min_size 2, stripes written while
/// osd.1 was down, not yet rebuilt on it when another holder stops, are unfound: reads
/// and writes of them wait (Unavailable, retried; here the client gives up after its
/// timeout) instead of failing with EIO, the PG records them with the OSD they wait for,
/// and once that OSD returns everything reads as acknowledged and the PGs are clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_unfound_stripes_wait_for_their_osd_instead_of_failing() {
    let mut ec = Ec::start(2).await;
    let (info, volume, mut model) = ec.volume().await;
    let (victim, unfound) = leave_stripes_unfound(&mut ec, &info, &volume, &mut model).await;
    let states = ec_pg_states(&ec).await;
    assert_eq!(
        states.iter().map(|p| p.unfound_objects).sum::<u64>(),
        unfound.len() as u64,
        "{states:?}"
    );
    for p in states.iter().filter(|p| p.unfound_objects > 0) {
        assert_eq!(p.unfound_waiting, vec![victim], "{p:?}");
    }
    let at = unfound[0].index * STRIPE as u64;
    ec.cluster.set_io_timeout(Some(Duration::from_millis(1500)));
    let read = volume.read(at, STRIPE).await;
    assert!(
        matches!(
            read,
            Err(basalt_client::ClientError::Status {
                status: basalt_proto::Status::Unavailable
            })
        ),
        "a read of an unfound stripe waits (Unavailable), never EIO: {read:?}"
    );
    let write = volume
        .write(at, Bytes::from(vec![9u8; STRIPE as usize]), false)
        .await;
    assert!(
        matches!(
            write,
            Err(basalt_client::ClientError::Status {
                status: basalt_proto::Status::Unavailable
            })
        ),
        "even a whole-stripe write of an unfound stripe waits: {write:?}"
    );
    ec.cluster.set_io_timeout(None);
    // A read waiting meanwhile completes once the OSD is back.
    let waiting = {
        let volume = ec.cluster.open_volume("e").await.expect("open it again");
        tokio::spawn(async move { volume.read(at, STRIPE).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    ec.restart(victim).await;
    let back = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiting read completes once the OSD is back")
        .expect("read task")
        .expect("the waiting read");
    let at = at as usize;
    assert!(
        back[..] == model[at..at + STRIPE as usize],
        "it reads the newest write"
    );
    ec.wait_clean().await;
    ec.check_stripes(info.id, &model);
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "every acknowledged write reads back");
    let states = ec_pg_states(&ec).await;
    assert!(states.iter().all(|p| p.unfound_objects == 0), "{states:?}");
}

/// Goal (issue 30, item 4): an operator gives unfound stripes up with MARK_UNFOUND_LOST:
/// refused while a PG has none; each unfound stripe is then rewritten at a new version with
/// the newest contents that still decode (none here: 2+1 whose older chunks were
/// overwritten, so zeros), its I/O resumes, the PG records none left, and when the OSD
/// holding the lost writes returns, its chunks are superseded: nothing becomes unfound
/// again and the stripes keep what the give-up wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_unfound_stripes_given_up_stay_given_up() {
    let mut ec = Ec::start(2).await;
    let (info, volume, mut model) = ec.volume().await;
    let pg0 = PgId {
        pool: EC_POOL,
        index: 0,
    };
    let refused = ec.cluster.mark_unfound_lost(pg0).await;
    assert!(
        matches!(&refused, Err(basalt_client::ClientError::Invalid { reason }) if reason.contains("no unfound stripes")),
        "refused while nothing is unfound: {refused:?}"
    );
    let refused = ec
        .cluster
        .mark_unfound_lost(PgId { pool: 1, index: 0 })
        .await;
    assert!(
        matches!(refused, Err(basalt_client::ClientError::Invalid { .. })),
        "refused on a replicated pool: {refused:?}"
    );
    let (victim, unfound) = leave_stripes_unfound(&mut ec, &info, &volume, &mut model).await;
    let mut pgs: Vec<PgId> = unfound
        .iter()
        .map(|&s| ClusterMap::pg_of(&ec.map.pools[&EC_POOL], s))
        .collect();
    pgs.dedup();
    let mut given = 0;
    for pg in pgs {
        let report = ec.cluster.mark_unfound_lost(pg).await.expect("give up");
        assert_eq!(report.still_unfound, 0, "{report:?}");
        for g in &report.stripes {
            assert_eq!(
                (g.outcome, g.kept),
                (basalt_proto::unfound::Outcome::Zeros, None),
                "no older version decodes in a 2+1 whose other chunks were overwritten: {g:?}"
            );
            assert!(g.lost > Version::ZERO, "{g:?}");
            let at = (g.stripe.index * STRIPE as u64) as usize;
            model[at..at + STRIPE as usize].fill(0);
            given += 1;
        }
        let again = ec.cluster.mark_unfound_lost(pg).await;
        assert!(
            matches!(again, Err(basalt_client::ClientError::Invalid { .. })),
            "nothing left to give up: {again:?}"
        );
    }
    assert_eq!(given, unfound.len(), "every unfound stripe given up");
    let states = ec_pg_states(&ec).await;
    assert!(states.iter().all(|p| p.unfound_objects == 0), "{states:?}");
    // Their I/O resumes at once (the victim is still down).
    for s in &unfound {
        let at = s.index * STRIPE as u64;
        let back = volume.read(at, STRIPE).await.unwrap();
        assert!(
            back.iter().all(|&b| b == 0),
            "given-up stripe {s} reads as zeros"
        );
        volume
            .write(at + 4096, Bytes::from(vec![0x5a; 4096]), false)
            .await
            .expect("a write of a given-up stripe");
        model[at as usize + 4096..at as usize + 8192].fill(0x5a);
    }
    // The OSD holding the lost writes returns: its chunks are older than the give-up's.
    ec.restart(victim).await;
    ec.wait_clean().await;
    let states = ec_pg_states(&ec).await;
    assert!(
        states.iter().all(|p| p.unfound_objects == 0),
        "the lost writes' chunks do not make anything unfound again: {states:?}"
    );
    ec.check_stripes(info.id, &model);
    let back = volume.read(0, model.len() as u32).await.unwrap();
    assert!(back[..] == model[..], "the given-up contents stay");
}
