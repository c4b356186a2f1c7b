//! 4 KiB PUT and GET rates from a lean Rust S3 client, beside boto3's. boto3 spends about
//! 2 ms of CPU a request and takes most of a 2-core machine with 16 processes, so its rates
//! measure the client. Here every client is a task on one thread with its own keep-alive
//! HTTP/1.1 connection ([`basalt_s3client`]), PUT sends no Content-MD5 (the signed SHA-256
//! already covers the body), and the CPU of this process and of the cluster is read around
//! every phase, so the report says what the client cost.

use crate::cpu::{self, CpuSource};
use crate::procstat;
use crate::results::{Figure, Row};
use crate::under_test::S3Endpoint;
use anyhow::{bail, Context};
use basalt_s3client::{
    delete_objects, delete_versions, enable_versioning, Connection, Signer, EMPTY_SHA256,
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::io::Read;
use std::time::{Duration, Instant, SystemTime};

/// Bytes of every object.
const BODY_BYTES: usize = 4096;
/// Concurrent clients of each PUT and GET phase pair, as the issue asks.
pub const CLIENT_COUNTS: [usize; 2] = [1, 16];
/// Most keys one PUT phase writes, shared evenly by its clients. Their random bodies (120 MiB)
/// are generated before the clock; a client that reaches its share stops early, and the
/// phase's note says so (its rate is then a lower bound).
const MAX_KEYS_PER_PHASE: usize = 30_000;
/// Keys per second of phase below that cap: phases shorter than 2 s (the smoke test's) read
/// and hold fewer random bodies.
const MAX_KEYS_PER_S: f64 = 15_000.0;
/// The region requests are signed for.
const REGION: &str = "us-east-1";
/// The versioning comparison: 16-client PUT rounds into an unversioned (false) and a
/// versioned (true) bucket, in this order, so both have the same mean place in the run.
pub const VERSIONING_ROUNDS: [bool; 8] = [false, true, true, false, false, true, true, false];
/// Clients of the versioning rounds.
const VERSIONING_CLIENTS: usize = 16;
/// Where the phases' figures go, relative to the output directory.
pub const RAW: &str = "raw/s3-rust.json";

/// PUT or GET.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Put,
    Get,
}

/// One client of a PUT and GET phase pair: its connection, the bodies of its keys, and how
/// far it got.
struct Client {
    /// Its number in the pair (0..clients).
    index: usize,
    conn: Connection,
    /// `/BUCKET/rsNc/INDEX/`: key n is at this path followed by n.
    base: String,
    /// Key n's body is bytes n × 4 KiB.. of this.
    bodies: Vec<u8>,
    /// Keys PUT (answered 200).
    put: usize,
    /// Keys a PUT was sent for: `put`, or one more when the last PUT failed (it may exist).
    sent: usize,
    /// GETs answered and checked.
    got: usize,
    /// The version ids the PUTs were answered with, in order (a versioned bucket's).
    versions: Vec<String>,
}

impl Client {
    async fn run(mut self, op: Op, deadline: Instant) -> (Client, anyhow::Result<()>) {
        let outcome = match op {
            Op::Put => self.put_until(deadline).await,
            Op::Get => self.get_until(deadline).await,
        };
        (self, outcome)
    }

    /// PUT fresh keys until `deadline` or until every body is used.
    async fn put_until(&mut self, deadline: Instant) -> anyhow::Result<()> {
        let keys = self.bodies.len() / BODY_BYTES;
        let mut path = String::with_capacity(self.base.len() + 8);
        while self.put < keys && Instant::now() < deadline {
            let n = self.put;
            path.clear();
            let _ = write!(path, "{}{n}", self.base);
            let body = &self.bodies[n * BODY_BYTES..(n + 1) * BODY_BYTES];
            let sha256 = hex::encode(Sha256::digest(body));
            self.sent = n + 1;
            let status = self
                .conn
                .send("PUT", &path, "", &[], body, &sha256)
                .await
                .with_context(|| format!("PUT {path}"))?;
            if status != 200 {
                bail!("PUT {path} answered {status}: {}", self.conn.body_excerpt());
            }
            if let Some(v) = self.conn.header("x-amz-version-id") {
                self.versions.push(v.to_string());
            }
            self.put += 1;
        }
        Ok(())
    }

    /// GET the keys PUT, in turn, until `deadline`, comparing every body with what was PUT.
    async fn get_until(&mut self, deadline: Instant) -> anyhow::Result<()> {
        let mut path = String::with_capacity(self.base.len() + 8);
        while self.put > 0 && Instant::now() < deadline {
            let n = self.got % self.put;
            path.clear();
            let _ = write!(path, "{}{n}", self.base);
            let status = self
                .conn
                .send("GET", &path, "", &[], &[], EMPTY_SHA256)
                .await
                .with_context(|| format!("GET {path}"))?;
            if status != 200 {
                bail!("GET {path} answered {status}: {}", self.conn.body_excerpt());
            }
            if *self.conn.body() != self.bodies[n * BODY_BYTES..(n + 1) * BODY_BYTES] {
                bail!(
                    "GET {path} returned {} bytes that differ from the {BODY_BYTES} PUT",
                    self.conn.body().len()
                );
            }
            self.got += 1;
        }
        Ok(())
    }
}

/// What one timed phase measured.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// `PUT` or `GET`.
    pub op: &'static str,
    /// Concurrent clients.
    pub clients: usize,
    /// Requests answered (and, for GET, checked).
    pub ops: u64,
    /// From the common start to the last client's last answer.
    pub seconds: f64,
    /// `ops / seconds`.
    pub ops_s: f64,
    /// Whether a client used all its bodies before the time was up (the rate is then a
    /// lower bound).
    pub capped: bool,
    /// Connections opened during the phase beyond one per client (the gateway closed some).
    pub reconnects: u64,
    /// CPU seconds of this process (the load generator) during the phase.
    pub client_cpu_s: Option<f64>,
    /// CPU seconds of the cluster's daemons (`basalt up`) during the phase.
    pub basalt_cpu_s: Option<f64>,
    /// CPU seconds the whole machine was busy during the phase, all cores together.
    pub machine_busy_s: Option<f64>,
    /// Unix time of the phase's start and end, to line it up with outside samples.
    pub start_unix_s: f64,
    pub end_unix_s: f64,
}

/// What the load generator measured, and why it stopped early if it did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadOutcome {
    /// The phases measured, in run order.
    pub phases: Vec<Phase>,
    /// The versioning comparison's rounds, in run order (op `PUT unversioned` or
    /// `PUT versioned`).
    pub versioning: Vec<Phase>,
    /// The failure that ended the run early.
    pub error: Option<String>,
    /// What clean-up could not delete.
    pub cleanup_error: Option<String>,
}

/// Run PUT then GET phases of `seconds` with 1 and with 16 clients against `endpoint`,
/// charging CPU to this process and to `cluster` (the cluster's daemons); every key and the
/// bucket are deleted at the end, failed or not.
pub fn measure(endpoint: &S3Endpoint, cluster: &[CpuSource], seconds: f64) -> LoadOutcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(rt) => rt.block_on(measure_on(endpoint, cluster, seconds)),
        Err(e) => LoadOutcome {
            error: Some(format!("start the load generator's runtime: {e}")),
            ..LoadOutcome::default()
        },
    }
}

async fn measure_on(endpoint: &S3Endpoint, cluster: &[CpuSource], seconds: f64) -> LoadOutcome {
    let mut outcome = LoadOutcome::default();
    let Some(addr) = endpoint.url.strip_prefix("http://") else {
        outcome.error = Some(format!("{} is not an http:// endpoint", endpoint.url));
        return outcome;
    };
    let addr = addr.trim_end_matches('/');
    let signer = Signer::new(&endpoint.access_key, &endpoint.secret_key, REGION);
    let mut sources = vec![CpuSource::Process {
        name: "load generator".into(),
        pid: std::process::id(),
    }];
    sources.extend_from_slice(cluster);
    let bucket = format!("bench-rs-{}", std::process::id());
    let mut admin = Connection::new(addr, &signer);
    let bucket_path = format!("/{bucket}");
    match admin
        .send("PUT", &bucket_path, "", &[], &[], EMPTY_SHA256)
        .await
    {
        Ok(200) => {}
        Ok(status) => {
            outcome.error = Some(format!(
                "CreateBucket {bucket} answered {status}: {}",
                admin.body_excerpt()
            ));
            return outcome;
        }
        Err(e) => {
            outcome.error = Some(format!("CreateBucket {bucket}: {e:#}"));
            return outcome;
        }
    }
    // Keys written and not yet deleted: what clean-up deletes after a failure.
    let mut written = Vec::new();
    let run = Run {
        addr,
        signer: &signer,
        bucket: &bucket,
        seconds,
        sources: &sources,
    };
    for clients in CLIENT_COUNTS {
        let pair = run.pair(clients, &mut written, &mut outcome.phases).await;
        // Untimed: the next pair starts with an empty bucket.
        let deleted = delete_objects(&mut admin, &bucket, &written).await;
        if let Err(e) = pair {
            outcome.error = Some(format!("{e:#}"));
        }
        match deleted {
            Ok(()) => written.clear(),
            Err(e) => outcome.cleanup_error = Some(format!("{e:#}")),
        }
        if outcome.error.is_some() || outcome.cleanup_error.is_some() {
            break;
        }
    }
    if outcome.error.is_none() && outcome.cleanup_error.is_none() {
        if let Err(e) = versioning_rounds(&run, &mut admin, &mut outcome).await {
            outcome.error = Some(format!("{e:#}"));
        }
    }
    match admin
        .send("DELETE", &bucket_path, "", &[], &[], EMPTY_SHA256)
        .await
    {
        Ok(200 | 204) => {}
        Ok(status) => {
            let e = format!(
                "DeleteBucket {bucket} answered {status}: {}",
                admin.body_excerpt()
            );
            outcome.cleanup_error = Some(match outcome.cleanup_error.take() {
                Some(first) => format!("{first}; {e}"),
                None => e,
            });
        }
        Err(e) => {
            let e = format!("DeleteBucket {bucket}: {e:#}");
            outcome.cleanup_error = Some(match outcome.cleanup_error.take() {
                Some(first) => format!("{first}; {e}"),
                None => e,
            });
        }
    }
    outcome
}

/// The versioning comparison: [`VERSIONING_ROUNDS`] of 16-client PUTs into `run`'s bucket
/// and into a versioned one made for it; every version written is deleted by id, then the
/// versioned bucket (clean-up failures go to `outcome.cleanup_error`).
async fn versioning_rounds(
    run: &Run<'_>,
    admin: &mut Connection,
    outcome: &mut LoadOutcome,
) -> anyhow::Result<()> {
    let vbucket = format!("{}-v", run.bucket);
    let vpath = format!("/{vbucket}");
    let status = admin
        .send("PUT", &vpath, "", &[], &[], EMPTY_SHA256)
        .await
        .with_context(|| format!("CreateBucket {vbucket}"))?;
    if status != 200 {
        bail!(
            "CreateBucket {vbucket} answered {status}: {}",
            admin.body_excerpt()
        );
    }
    let versioned = Run {
        bucket: &vbucket,
        ..*run
    };
    let mut plain_keys = Vec::new();
    let mut versions = Vec::new();
    let mut result = enable_versioning(admin, &vbucket)
        .await
        .map_err(anyhow::Error::from);
    for (r, &is_versioned) in VERSIONING_ROUNDS.iter().enumerate() {
        if result.is_err() {
            break;
        }
        let tag = format!("round{r}");
        let round = if is_versioned {
            versioned
                .put_round(VERSIONING_CLIENTS, &tag, &mut versions)
                .await
        } else {
            run.put_round(VERSIONING_CLIENTS, &tag, &mut plain_keys)
                .await
        };
        match round {
            Ok(mut p) => {
                p.op = if is_versioned {
                    "PUT versioned"
                } else {
                    "PUT unversioned"
                };
                outcome.versioning.push(p);
            }
            Err(e) => result = Err(e),
        }
        // Untimed: each round's objects go before the next (every small object takes a
        // store slot per copy; eight rounds of them would fill the bench's cluster).
        let deleted = delete_round(admin, run.bucket, &vbucket, &mut plain_keys, &mut versions);
        if let Err(e) = deleted.await {
            outcome.cleanup_error = Some(format!("{e}"));
            break;
        }
    }
    // Clean-up: what a failed round left, every version by id, the versioned bucket.
    let cleaned = async {
        delete_round(admin, run.bucket, &vbucket, &mut plain_keys, &mut versions).await?;
        let status = admin
            .send("DELETE", &vpath, "", &[], &[], EMPTY_SHA256)
            .await?;
        if !matches!(status, 200 | 204) {
            basalt_s3client::bail_status(status, &format!("DeleteBucket {vbucket}"))?;
        }
        Ok::<(), basalt_s3client::Error>(())
    }
    .await;
    if let Err(e) = cleaned {
        outcome.cleanup_error = Some(format!("{e}"));
    }
    result
}

/// Delete a round's objects: the unversioned bucket's keys, the versioned bucket's
/// versions by id (a plain delete would only add delete markers).
async fn delete_round(
    admin: &mut Connection,
    bucket: &str,
    vbucket: &str,
    plain: &mut Vec<(String, Option<String>)>,
    versions: &mut Vec<(String, Option<String>)>,
) -> Result<(), basalt_s3client::Error> {
    let keys: Vec<String> = plain.drain(..).map(|(k, _)| k).collect();
    delete_objects(admin, bucket, &keys).await?;
    let objects: Vec<(&str, Option<&str>)> = versions
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    delete_versions(admin, vbucket, &objects).await?;
    versions.clear();
    Ok(())
}

/// What every phase of a run shares.
#[derive(Clone, Copy)]
struct Run<'a> {
    addr: &'a str,
    signer: &'a Signer,
    bucket: &'a str,
    seconds: f64,
    /// This process first, then the cluster's daemons.
    sources: &'a [CpuSource],
}

impl Run<'_> {
    /// Most keys one PUT phase of this run writes ([`MAX_KEYS_PER_PHASE`], [`MAX_KEYS_PER_S`]).
    fn max_keys(&self) -> usize {
        MAX_KEYS_PER_PHASE.min((self.seconds * MAX_KEYS_PER_S).ceil() as usize)
    }

    /// A PUT phase then a GET phase with `clients` clients; the keys PUT are added to
    /// `written` (also after a failure) and the phases to `phases`.
    async fn pair(
        &self,
        clients: usize,
        written: &mut Vec<String>,
        phases: &mut Vec<Phase>,
    ) -> anyhow::Result<()> {
        if crate::interrupt::requested() {
            bail!(crate::interrupt::MESSAGE);
        }
        let per_client = self.max_keys() / clients;
        let list = self.clients(clients, &format!("rs{clients}c")).await?;
        let (list, put) = self.phase(list, clients, Op::Put).await;
        let strip = format!("/{}/", self.bucket);
        let mut returned = vec![false; clients];
        for c in &list {
            returned[c.index] = true;
            let prefix = c.base.strip_prefix(&strip).unwrap_or(&c.base);
            written.extend((0..c.sent).map(|n| format!("{prefix}{n}")));
        }
        // A client whose task failed took its count with it: every key it could have PUT.
        for index in (0..clients).filter(|i| !returned[*i]) {
            written.extend((0..per_client).map(|n| format!("rs{clients}c/{index}/{n}")));
        }
        phases.push(put?);
        let (_, get) = self.phase(list, clients, Op::Get).await;
        phases.push(get?);
        Ok(())
    }

    /// `count` clients, each connected (one signed request sent before any clock starts)
    /// and holding random bodies for its keys `/BUCKET/TAG/INDEX/N`.
    async fn clients(&self, count: usize, tag: &str) -> anyhow::Result<Vec<Client>> {
        let per_client = self.max_keys() / count;
        let mut urandom = std::fs::File::open("/dev/urandom").context("open /dev/urandom")?;
        let mut list = Vec::with_capacity(count);
        for index in 0..count {
            let mut bodies = vec![0; per_client * BODY_BYTES];
            urandom
                .read_exact(&mut bodies)
                .context("read /dev/urandom")?;
            let mut conn = Connection::new(self.addr, self.signer);
            let bucket_path = format!("/{}", self.bucket);
            let status = conn
                .send("HEAD", &bucket_path, "", &[], &[], EMPTY_SHA256)
                .await
                .with_context(|| format!("HEAD {bucket_path}"))?;
            if status != 200 {
                bail!("HEAD {bucket_path} answered {status}");
            }
            list.push(Client {
                index,
                conn,
                base: format!("/{}/{tag}/{index}/", self.bucket),
                bodies,
                put: 0,
                sent: 0,
                got: 0,
                versions: Vec::new(),
            });
        }
        Ok(list)
    }

    /// One PUT round of `count` clients under `tag`; every key (with its version id, when
    /// the bucket answered one) a PUT was sent for goes to `written`, also after a failure.
    async fn put_round(
        &self,
        count: usize,
        tag: &str,
        written: &mut Vec<(String, Option<String>)>,
    ) -> anyhow::Result<Phase> {
        if crate::interrupt::requested() {
            bail!(crate::interrupt::MESSAGE);
        }
        let list = self.clients(count, tag).await?;
        let (list, phase) = self.phase(list, count, Op::Put).await;
        let strip = format!("/{}/", self.bucket);
        for c in &list {
            let prefix = c.base.strip_prefix(&strip).unwrap_or(&c.base);
            for n in 0..c.sent {
                written.push((format!("{prefix}{n}"), c.versions.get(n).cloned()));
            }
        }
        phase
    }

    /// Run `op` on every client from one common start for the run's time; returns the
    /// clients that came back and the phase's figures, or every client's failure.
    async fn phase(
        &self,
        clients: Vec<Client>,
        count: usize,
        op: Op,
    ) -> (Vec<Client>, anyhow::Result<Phase>) {
        let connects: u64 = clients.iter().map(|c| c.conn.connects()).sum();
        let counted = |c: &Client| match op {
            Op::Put => c.put,
            Op::Get => c.got,
        };
        let ops_before: usize = clients.iter().map(counted).sum();
        let before = cpu::sample(self.sources);
        let busy_before = procstat::machine_busy_seconds().ok();
        let start_unix = SystemTime::now();
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(self.seconds);
        let mut tasks = tokio::task::JoinSet::new();
        for c in clients {
            tasks.spawn(c.run(op, deadline));
        }
        let mut back = Vec::with_capacity(count);
        let mut errors = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((c, outcome)) => {
                    if let Err(e) = outcome {
                        errors.push(format!("client {}: {e:#}", c.index));
                    }
                    back.push(c);
                }
                Err(e) => errors.push(format!("a client's task failed: {e}")),
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        let after = cpu::sample(self.sources);
        let busy_after = procstat::machine_busy_seconds().ok();
        back.sort_unstable_by_key(|c| c.index);
        if !errors.is_empty() {
            let what = match op {
                Op::Put => "PUT",
                Op::Get => "GET",
            };
            let e = anyhow::anyhow!("{count}-client 4 KiB {what} phase: {}", errors.join("; "));
            return (back, Err(e));
        }
        let ops = (back.iter().map(counted).sum::<usize>() - ops_before) as u64;
        let capped = op == Op::Put && back.iter().any(|c| c.put * BODY_BYTES == c.bodies.len());
        let spent = |range: std::ops::Range<usize>| {
            let (b, a) = (before.get(range.clone())?, after.get(range)?);
            Some(cpu::cost(b, a, 0, 0)?.cpu_seconds)
        };
        let unix = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        };
        let phase = Phase {
            op: match op {
                Op::Put => "PUT",
                Op::Get => "GET",
            },
            clients: count,
            ops,
            seconds,
            ops_s: ops as f64 / seconds,
            capped,
            reconnects: back.iter().map(|c| c.conn.connects()).sum::<u64>() - connects,
            client_cpu_s: spent(0..1),
            basalt_cpu_s: spent(1..self.sources.len()),
            machine_busy_s: busy_before.zip(busy_after).map(|(b, a)| a - b),
            start_unix_s: unix(start_unix),
            end_unix_s: unix(start_unix) + seconds,
        };
        (back, Ok(phase))
    }
}

/// The rows PUT and GET by 1 and by 16 clients, each its phase's rate or why it is missing.
pub fn rows(outcome: &LoadOutcome, command: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for clients in CLIENT_COUNTS {
        for op in ["PUT", "GET"] {
            let phase = outcome
                .phases
                .iter()
                .find(|p| p.clients == clients && p.op == op);
            let basalt = figure(outcome, command, phase.map(|p| p.ops_s));
            rows.push(Row {
                key: format!("{}_4k_{clients}c_rust_ops", op.to_lowercase()),
                label: format!(
                    "4 KiB {op}, {clients} client{} (Rust)",
                    if clients == 1 { "" } else { "s" }
                ),
                unit: "ops/s".into(),
                higher_is_better: true,
                baseline: None,
                basalt: Some(basalt),
            });
        }
    }
    rows.extend(versioning_rows(outcome, command));
    rows
}

/// A row's figure: `value`, or the run's failure when it was not measured.
fn figure(outcome: &LoadOutcome, command: &str, value: Option<f64>) -> Figure {
    match value {
        Some(v) => Figure {
            value: Some(v),
            command: Some(command.into()),
            raw: Some(RAW.into()),
            ..Figure::default()
        },
        None => Figure::failed(
            outcome.error.as_deref().unwrap_or("not measured"),
            Some(command.into()),
            Some(RAW.into()),
        ),
    }
}

/// A bucket's PUT rate over its versioning rounds: its PUTs over its rounds' time.
fn versioning_rate(outcome: &LoadOutcome, op: &str) -> Option<f64> {
    let rounds: Vec<&Phase> = outcome.versioning.iter().filter(|p| p.op == op).collect();
    let seconds: f64 = rounds.iter().map(|p| p.seconds).sum();
    (!rounds.is_empty() && seconds > 0.0)
        .then(|| rounds.iter().map(|p| p.ops).sum::<u64>() as f64 / seconds)
}

/// The versioning comparison's rows: each bucket's PUT rate, and versioned as % of
/// unversioned.
fn versioning_rows(outcome: &LoadOutcome, command: &str) -> Vec<Row> {
    let unversioned = versioning_rate(outcome, "PUT unversioned");
    let versioned = versioning_rate(outcome, "PUT versioned");
    let ratio = unversioned
        .zip(versioned)
        .map(|(u, v)| 100.0 * v / u.max(1e-9));
    let row = |key: &str, label: &str, unit: &str, value| Row {
        key: key.into(),
        label: label.into(),
        unit: unit.into(),
        higher_is_better: true,
        baseline: None,
        basalt: Some(figure(outcome, command, value)),
    };
    vec![
        row(
            "put_4k_16c_unversioned_rust_ops",
            "4 KiB PUT, 16 clients, unversioned bucket rounds (Rust)",
            "ops/s",
            unversioned,
        ),
        row(
            "put_4k_16c_versioned_rust_ops",
            "4 KiB PUT, 16 clients, versioned bucket rounds (Rust)",
            "ops/s",
            versioned,
        ),
        row(
            "versioned_put_ratio_rust_pct",
            "versioned / unversioned PUT rate (Rust)",
            "%",
            ratio,
        ),
    ]
}

/// One note per phase with what the client and the cluster spent per request, then the
/// failure and the clean-up failure, if any.
pub fn notes(outcome: &LoadOutcome) -> Vec<String> {
    let mut notes: Vec<String> = outcome
        .phases
        .iter()
        .chain(&outcome.versioning)
        .map(phase_note)
        .collect();
    if let Some(e) = &outcome.error {
        notes.push(format!("The Rust load generator failed: {e}"));
    }
    if let Some(e) = &outcome.cleanup_error {
        notes.push(format!(
            "The Rust load generator's clean-up failed (keys or its bucket are left): {e}"
        ));
    }
    notes
}

fn phase_note(p: &Phase) -> String {
    let per_op = |cpu: Option<f64>| match cpu {
        Some(s) if p.ops > 0 => format!(
            "{s:.2} s ({:.2} core, {:.0} µs a request)",
            s / p.seconds,
            s / p.ops as f64 * 1e6
        ),
        Some(s) => format!("{s:.2} s"),
        None => "not read".into(),
    };
    let other = match (p.machine_busy_s, p.client_cpu_s, p.basalt_cpu_s) {
        (Some(m), Some(c), Some(b)) => format!(
            "; other processes {:.2} core",
            ((m - c - b) / p.seconds).max(0.0)
        ),
        _ => String::new(),
    };
    format!(
        "Rust client, 4 KiB {} by {} client{}: {} requests in {:.1} s{}; CPU of the load \
         generator {}, of the cluster {}{other}.",
        p.op,
        p.clients,
        if p.clients == 1 { "" } else { "s" },
        p.ops,
        p.seconds,
        if p.capped {
            " (a client used all its keys before the time was up: a lower bound)"
        } else {
            ""
        },
        per_op(p.client_cpu_s),
        per_op(p.basalt_cpu_s),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioning_rounds_give_each_bucket_its_rate_and_the_ratio() {
        // Goal: a bucket's rate is its PUTs over its rounds' time (not a mean of rates),
        // and the ratio is versioned over unversioned in percent.
        let round = |op, ops, seconds| Phase {
            op,
            clients: 16,
            ops,
            seconds,
            ops_s: ops as f64 / seconds,
            capped: false,
            reconnects: 0,
            client_cpu_s: None,
            basalt_cpu_s: None,
            machine_busy_s: None,
            start_unix_s: 0.0,
            end_unix_s: seconds,
        };
        let outcome = LoadOutcome {
            versioning: vec![
                round("PUT unversioned", 3000, 3.0),
                round("PUT versioned", 2700, 3.0),
                round("PUT versioned", 2900, 4.0),
                round("PUT unversioned", 2000, 2.0),
            ],
            ..LoadOutcome::default()
        };
        let rows = versioning_rows(&outcome, "load");
        let value = |i: usize| rows[i].basalt.clone().unwrap().value.unwrap();
        assert_eq!(value(0), 1000.0);
        assert!((value(1) - 800.0).abs() < 1e-9);
        assert!((value(2) - 80.0).abs() < 1e-9);
        assert_eq!(notes(&outcome).len(), 4, "a note per round");
    }

    #[test]
    fn rows_are_the_four_rates_or_the_failure() {
        // Goal: the section gets PUT and GET rows for 1 and 16 clients with distinct keys,
        // measured phases carry their rate and the others the failure; notes give each
        // phase's CPU per request and name a failed clean-up.
        let phase = |op, clients| Phase {
            op,
            clients,
            ops: 5000,
            seconds: 5.0,
            ops_s: 1000.0,
            capped: false,
            reconnects: 0,
            client_cpu_s: Some(0.25),
            basalt_cpu_s: Some(4.0),
            machine_busy_s: Some(4.5),
            start_unix_s: 0.0,
            end_unix_s: 5.0,
        };
        let outcome = LoadOutcome {
            phases: vec![phase("PUT", 1), phase("GET", 1), phase("PUT", 16)],
            versioning: Vec::new(),
            error: Some("16-client 4 KiB GET phase: client 3: GET /b/k answered 500".into()),
            cleanup_error: Some("DeleteBucket answered 409".into()),
        };
        let rows = rows(&outcome, "load");
        let labels: Vec<_> = rows.iter().take(4).map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "4 KiB PUT, 1 client (Rust)",
                "4 KiB GET, 1 client (Rust)",
                "4 KiB PUT, 16 clients (Rust)",
                "4 KiB GET, 16 clients (Rust)",
            ]
        );
        assert_eq!(rows[2].key, "put_4k_16c_rust_ops");
        assert!(rows
            .iter()
            .take(6)
            .all(|r| r.unit == "ops/s" && r.baseline.is_none()));
        assert_eq!(rows.len(), 7);
        assert_eq!(rows[6].unit, "%");
        assert_eq!(
            rows[6].basalt.clone().unwrap().value,
            None,
            "no rounds measured"
        );
        let get16 = rows[3].basalt.clone().unwrap();
        assert_eq!(get16.value, None);
        assert!(get16.error.unwrap().contains("answered 500"));
        assert_eq!(rows[0].basalt.clone().unwrap().value, Some(1000.0));
        let notes = notes(&outcome);
        assert_eq!(notes.len(), 5);
        assert!(
            notes[0].contains("0.25 s (0.05 core, 50 µs a request)"),
            "{}",
            notes[0]
        );
        assert!(
            notes[0].contains("4.00 s (0.80 core, 800 µs a request)"),
            "{}",
            notes[0]
        );
        assert!(
            notes[0].contains("other processes 0.05 core"),
            "{}",
            notes[0]
        );
        assert!(notes[4].contains("DeleteBucket answered 409"));
    }
}
