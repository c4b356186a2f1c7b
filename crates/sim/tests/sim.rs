//! The simulator in the test suite: many short seeds of the real replication code under
//! injected faults, a determinism check, and (ignored) long runs.
//!
//! The default test runs 200 seeds of 10 virtual seconds, the long one 2000 of 20.
//! `BASALT_SIM_SEEDS=N` sets how many, `BASALT_SIM_FIRST=F` the first, `BASALT_SIM_SECS=S`
//! their length; `BASALT_SIM_SEED=S` runs only S (replay); `BASALT_SIM_LOG=1` (or `debug`,
//! `trace`) prints the log.

use basalt_sim::{run, SimConfig};
use std::time::Instant;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Short runs for the everyday suite, the default length for the long one;
/// `BASALT_SIM_SECS` overrides both.
fn config(run_secs: u64) -> SimConfig {
    SimConfig {
        run_secs: env_u64("BASALT_SIM_SECS").unwrap_or(run_secs),
        echo_log: match std::env::var("BASALT_SIM_LOG").as_deref() {
            Ok("debug") => Some(tracing::Level::DEBUG),
            Ok("trace") => Some(tracing::Level::TRACE),
            Ok("1") | Ok("info") => Some(tracing::Level::INFO),
            _ => None,
        },
        ..SimConfig::default()
    }
}

/// Run seeds `first..first + count` (or the one in BASALT_SIM_SEED); panic with the first
/// failure's report.
fn run_seeds(first: u64, count: u64, run_secs: u64) {
    let config = SimConfig {
        jitter_only: std::env::var("BASALT_SIM_JITTER").is_ok_and(|v| v == "1"),
        ..config(run_secs)
    };
    run_config_seeds(&config, first, count);
}

/// [`run_seeds`] with a given configuration.
fn run_config_seeds(config: &SimConfig, first: u64, count: u64) {
    let seeds: Vec<u64> = match env_u64("BASALT_SIM_SEED") {
        Some(s) => vec![s],
        None => (first..first + count).collect(),
    };
    let began = Instant::now();
    let (mut ops, mut faults, mut virtual_ms) = (0u64, 0usize, 0u64);
    let (mut local_reads, mut local_fallbacks) = (0u64, 0u64);
    let erasure_coded = seeds
        .iter()
        .filter(|&&s| config.shape_for(s).ec.is_some())
        .count();
    let mut failures = Vec::new();
    for &seed in &seeds {
        match run(seed, config) {
            Ok(o) => {
                ops += o.ops;
                faults += o.faults.len();
                virtual_ms += o.virtual_ms;
                local_reads += o.local_reads;
                local_fallbacks += o.local_read_fallbacks;
            }
            Err(f) => {
                if failures.is_empty() {
                    eprintln!("{f}");
                }
                failures.push(format!("{}: {}", f.seed, f.error));
            }
        }
    }
    eprintln!(
        "simulation: {} seeds from {} ({erasure_coded} with an erasure-coded pool), {} failed, \
         in {:.1} s: {ops} client operations ({local_reads} reads served by a local replica, \
         {local_fallbacks} declined), {faults} faults, {:.0} virtual seconds",
        seeds.len(),
        seeds[0],
        failures.len(),
        began.elapsed().as_secs_f64(),
        virtual_ms as f64 / 1000.0
    );
    assert!(
        failures.is_empty(),
        "{} seeds failed (the first one's report is above):\n{}",
        failures.len(),
        failures.join("\n")
    );
    let localized = seeds
        .iter()
        .filter(|&&s| config.local_host(s).is_some())
        .count();
    if localized >= 4 {
        // The scenario ran: replicas served reads (and the checker held them).
        assert!(
            local_reads > 0,
            "{localized} seeds read through a local replica, but no replica served a read"
        );
    }
}

/// Goal: the real OSD, monitor and client code keeps every acknowledged write and converges
/// to identical replicas (or whole stripes, for the seeds with an erasure-coded pool) under
/// kills, power cuts, partitions and metadata cuts, for many seeds.
#[test]
fn seeds_hold_every_invariant() {
    let count = env_u64("BASALT_SIM_SEEDS").unwrap_or(200);
    run_seeds(env_u64("BASALT_SIM_FIRST").unwrap_or(1), count, 10);
}

/// Goal: a seed replays exactly: two runs of one seed do the same operations with the same
/// results at the same virtual times (seed 3 runs an erasure-coded pool, 17 a replicated one).
#[test]
fn a_seed_replays_exactly() {
    assert!(
        basalt_sim::replays_exactly(),
        "built without --cfg tokio_unstable (RUSTFLAGS in the environment replaces \
         .cargo/config.toml): seeds cannot replay"
    );
    let config = config(10);
    for seed in [3, 17] {
        let a = run(seed, &config).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(a.erasure_coded, config.shape_for(seed).ec.is_some());
        let b = run(seed, &config).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(a, b, "seed {seed} ran differently twice");
    }
}

/// Goal: no false failover: under network latency and jitter of up to 200 ms each way (and
/// no other fault), no OSD is ever marked down, for many seeds (`BASALT_SIM_JITTER_SEEDS`,
/// default 20 here; `scripts/sim.sh --jitter --seeds 1000` for the thousand).
#[test]
fn jitter_never_fails_an_osd_over() {
    let count = env_u64("BASALT_SIM_JITTER_SEEDS").unwrap_or(20);
    let config = SimConfig {
        jitter_only: true,
        ..config(10)
    };
    run_config_seeds(&config, env_u64("BASALT_SIM_FIRST").unwrap_or(1), count);
}

/// Goal: PG split and merge keep every acknowledged write: replicated pools double their
/// PG count a third into the run and halve it back at two thirds while the writers run and
/// faults strike (`BASALT_SIM_SPLIT_SEEDS`, default 24; erasure-coded seeds, whose count
/// cannot change, run without it). Each seed must have made both changes.
#[test]
fn pg_split_and_merge_keep_every_write() {
    let count = env_u64("BASALT_SIM_SPLIT_SEEDS").unwrap_or(24);
    let config = SimConfig {
        pg_changes: true,
        ..config(15)
    };
    let first = env_u64("BASALT_SIM_FIRST").unwrap_or(5_000);
    let seeds: Vec<u64> = match env_u64("BASALT_SIM_SEED") {
        Some(s) => vec![s],
        None => (first..first + count).collect(),
    };
    let mut changed = 0;
    for &seed in &seeds {
        let outcome = run(seed, &config).unwrap_or_else(|f| panic!("{f}"));
        let changes = outcome
            .faults
            .iter()
            .filter(|f| f.starts_with("pg count"))
            .count();
        if !outcome.erasure_coded {
            assert_eq!(
                changes, 2,
                "seed {seed} split and merged: {:?}",
                outcome.faults
            );
            changed += 1;
        }
    }
    eprintln!(
        "PG split and merge: {changed} of {} seeds changed their PG count twice",
        seeds.len()
    );
    assert!(
        changed > 0 || seeds.len() < 2,
        "no seed ran a replicated pool"
    );
}

/// Goal: thousands of seeds (run with `scripts/sim.sh --seeds N` or `--ignored`).
#[test]
#[ignore = "long: thousands of seeds"]
fn many_seeds() {
    let count = env_u64("BASALT_SIM_SEEDS").unwrap_or(2000);
    run_seeds(env_u64("BASALT_SIM_FIRST").unwrap_or(1_000_000), count, 20);
}
