//! A FLUSH whose unflushed holders are all down but running: an acknowledged write W lives
//! only in the memory of its PG's acting set; every member is cut from its peers (not from
//! the client nor the metadata) until the monitor marks it down on their reports; a FLUSH
//! that then returns OK must have made W durable, so W survives a power cut of them all.
//! Run: `cargo test -p basalt-sim --test flush_down` (`BASALT_SIM_LOG=1` prints
//! the cluster's log).

use basalt_placement::ClusterMap;
use basalt_proto::{ObjectId, OsdId};
use basalt_sim::model::{block_data, decode_block, Value, BLOCK};
use basalt_sim::observer::Observer;
use basalt_sim::rng::SimRng;
use basalt_sim::run::{seeded_runtime, wait_clean};
use basalt_sim::{ClusterShape, SimCluster};
use std::time::Duration;
use tokio::time::{timeout, Instant};

const SEED: u64 = 1;
/// Longest virtual wait of each step (clean, holders shown down, flush, read).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// Between two looks at the client's map.
const POLL: Duration = Duration::from_millis(100);

/// Goal: a FLUSH sent while every OSD holding W unflushed is down but running (the client
/// still reaches them) succeeds, and W is durable: it survives a power cut of them all.
#[test]
fn flush_with_every_holder_down_but_running_keeps_the_write() {
    run(Cut::PeersOnly);
}

/// Goal: the same when the client cannot reach them either (only the metadata can): the
/// FLUSH waits until each says, through its liveness record, that it flushed its store.
#[test]
fn flush_waits_for_unreachable_holders_down_but_running_to_flush() {
    run(Cut::PeersAndClient);
}

/// What the holders are cut from (never from the metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    PeersOnly,
    PeersAndClient,
}

fn run(cut: Cut) {
    let runtime = seeded_runtime(SEED).expect("build the runtime");
    let echo = std::env::var_os("BASALT_SIM_LOG").is_some();
    let observer = Observer::new(tracing::Level::INFO, echo);
    runtime.block_on(async {
        let _log = tracing::subscriber::set_default(observer.with_start(Instant::now()));
        scenario(cut).await
    });
}

async fn scenario(cut: Cut) {
    // Five OSDs, three replicas: three holders cut from every other OSD are each reported
    // by at least the two others (the monitor's default min_down_reporters), while each of
    // the others is reported only by holders, whose reports stop counting once they are down.
    // OSDs ping only those they share a PG with: enough PGs that every pair shares one.
    let shape = ClusterShape {
        osds: 5,
        pgs: 32,
        out_after_secs: 600,
        ..ClusterShape::default()
    };
    let mut cluster = SimCluster::start(shape, &mut SimRng::new(SEED))
        .await
        .expect("start the cluster");
    wait_clean(&cluster.client, STEP_TIMEOUT)
        .await
        .expect("new cluster clean");
    let object_size = cluster.shape.object_size as u64;
    let client = cluster.client.clone();
    client
        .create_volume("w", object_size, cluster.pool().id)
        .await
        .expect("create the volume");
    let volume = client.open_volume("w").await.expect("open the volume");
    let map = client.map();
    let pool = &map.pools[&cluster.pool().id];
    let pg = ClusterMap::pg_of(pool, ObjectId::new(volume.head(), 0));
    let holders: Vec<OsdId> = map.acting(pg).expect("W's acting set").to_vec();
    assert_eq!(holders.len(), 3, "pg {pg} is not served by three OSDs");

    // W is the first write of a fresh object: no slot is freed, so the background flusher
    // leaves it in memory.
    let w = Value::Data(1);
    timeout(STEP_TIMEOUT, volume.write(0, block_data(0, 1), false))
        .await
        .expect("write W in time")
        .expect("write W");
    for &h in &holders {
        let unflushed = cluster.osd(h).expect("holder runs").store.unflushed_bytes();
        assert!(unflushed > 0, "osd.{h} holds W flushed already");
    }

    cut_until_down(&cluster, &holders, cut).await;

    timeout(STEP_TIMEOUT, volume.flush())
        .await
        .expect("the flush ends in time")
        .expect("the flush succeeds");
    for &h in &holders {
        cluster.power_cut_osd(h, |_| false);
    }
    cluster.net.heal_all();
    for &h in &holders {
        cluster.start_osd(h).await.expect("restart a holder");
    }
    wait_clean(&cluster.client, STEP_TIMEOUT)
        .await
        .expect("clean after the restart");
    let data = timeout(STEP_TIMEOUT, volume.read(0, BLOCK as u32))
        .await
        .expect("read W in time")
        .expect("read W");
    let read = decode_block(0, &data).expect("read a value written");
    assert_eq!(
        read, w,
        "W lost after a successful FLUSH: its holders {holders:?} were down but running \
         when the flush was sent, and lost power after it"
    );
}

/// Partition each of `holders` from every other OSD (and from the client with
/// [`Cut::PeersAndClient`]; the metadata still reaches them) and wait until the client's
/// map shows them all down while they still run.
async fn cut_until_down(cluster: &SimCluster, holders: &[OsdId], cut: Cut) {
    for &h in holders {
        for other in cluster.osd_ids() {
            if other != h {
                cluster.net.set_partition(h, other, true);
            }
        }
        if cut == Cut::PeersAndClient {
            cluster
                .net
                .set_partition(h, basalt_sim::net::CLIENT_NODE, true);
        }
    }
    let shown_down = |c: &SimCluster| {
        let map = c.client.map();
        holders.iter().all(|h| !map.osds[h].up && c.is_running(*h))
    };
    let deadline = Instant::now() + STEP_TIMEOUT;
    // Bound: one look per POLL until the deadline.
    while !shown_down(cluster) && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    assert!(
        shown_down(cluster),
        "holders {holders:?} not shown down (and running) within {STEP_TIMEOUT:?}"
    );
}
