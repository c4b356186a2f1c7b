//! What security costs (issue 15): 4k random read and write IOPS at QD1 and QD32 through
//! NBD with authentication off and on, data-plane TLS off and on, and NBD TLS off and on.
//! Three `basalt up` run side by side with `--no-local-path` (so the gateway reaches its
//! OSDs and the OSDs each other over loopback TCP, where authentication and TLS apply):
//! one with the benchmark-only `--insecure-no-auth`, one as by default (authentication on,
//! NBD offering TLS to clients that ask with `nbds://`), one with `--data-tls`. Each round
//! runs every variant of a workload back to back, in an order that rotates from round to
//! round; a variant's figure is the median of its rounds.

use super::{Ctx, FioRun, Section};
use crate::cluster::{Cluster, ClusterConfig};
use crate::fio::{self, Job, Span, Target};
use crate::results::{Figure, Layout, Row, SectionReport, SectionStatus};
use crate::under_test::UnderTest;
use basalt_proto::size::format_size;
use std::path::Path;
use std::process::Command;

/// Section id.
pub const ID: &str = "security";
const TITLE: &str = "Security: authentication and TLS";

/// One measured workload.
struct Workload {
    key: &'static str,
    label: &'static str,
    rw: &'static str,
    iodepth: u32,
}

const WORKLOADS: [Workload; 4] = [
    Workload {
        key: "randread_4k_qd1",
        label: "4k random read QD1",
        rw: "randread",
        iodepth: 1,
    },
    Workload {
        key: "randread_4k_qd32",
        label: "4k random read QD32",
        rw: "randread",
        iodepth: 32,
    },
    Workload {
        key: "randwrite_4k_qd1",
        label: "4k random write QD1",
        rw: "randwrite",
        iodepth: 1,
    },
    Workload {
        key: "randwrite_4k_qd32",
        label: "4k random write QD32",
        rw: "randwrite",
        iodepth: 32,
    },
];

/// The measured variants, in the order of [`Runs::clusters`] then NBD TLS.
const VARIANTS: [&str; 4] = ["noauth", "auth", "datatls", "nbdtls"];

/// The section: `quick` and `smoke` shorten the runs.
pub struct SecuritySection {
    pub quick: bool,
    pub smoke: bool,
}

impl SecuritySection {
    fn rounds(&self) -> usize {
        if self.smoke {
            1
        } else {
            2
        }
    }

    fn span(&self) -> (u32, u32) {
        if self.smoke {
            (1, 0)
        } else if self.quick {
            (5, 1)
        } else {
            (15, 2)
        }
    }

    fn size_bytes(&self) -> u64 {
        if self.smoke {
            64 << 20
        } else {
            512 << 20
        }
    }
}

impl Section for SecuritySection {
    fn id(&self) -> &'static str {
        ID
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        let (runtime_s, ramp_s) = self.span();
        let start = 3.0 * (5.0 + self.size_bytes() as f64 / (100u64 << 20) as f64);
        let runs = self.rounds() * WORKLOADS.len() * VARIANTS.len();
        std::iter::once(start)
            .chain(std::iter::repeat_n((runtime_s + ramp_s) as f64 + 1.0, runs))
            .collect()
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let mut notes = Vec::new();
        ctx.progress.step(
            "security: start three clusters and write their volumes",
            0.0,
        );
        let figures = match self.start(ctx) {
            Ok(clusters) => self.measure(ctx, &clusters, &mut notes),
            Err(e) => {
                let msg = format!("{e:#}");
                ctx.progress.note(&format!("failed: {msg}"));
                for _ in 0..self.rounds() * WORKLOADS.len() * VARIANTS.len() {
                    ctx.progress.step("security: not measured", 0.0);
                }
                vec![vec![Figure::failed(msg, None, None); VARIANTS.len()]; WORKLOADS.len()]
            }
        };
        let _ = std::fs::remove_dir_all(ctx.work_dir.join(ID));
        let (runtime_s, ramp_s) = self.span();
        SectionReport {
            id: ID.into(),
            title: TITLE.into(),
            intro: format!(
                "fio's nbd engine, 4k random I/O at QD1 and QD32, {runtime_s} s per run \
                 ({ramp_s} s ramp), {} rounds, the median round shown. Three `basalt up` (3 \
                 OSDs, 3 replicas, `--no-local-path`: gateway to OSD and OSD to OSD over \
                 loopback TCP) run side by side: authentication off (`--insecure-no-auth`, \
                 benchmark only), as by default (authentication on; NBD also offers TLS, \
                 reached with `nbds://`), and with `--data-tls`. Each row compares a \
                 variant with the one without its feature; the ratio is the share of IOPS \
                 kept. Goals: authentication costs < 2 %, TLS ≤ 15 % at QD32.",
                self.rounds()
            ),
            baseline_name: "Without".into(),
            status: SectionStatus::Measured,
            layout: Layout::Comparison,
            notes,
            rows: rows(figures),
        }
    }
}

/// The three clusters: authentication off, default (with NBD TLS offered), data-plane TLS.
struct Runs {
    clusters: Vec<Cluster>,
}

impl SecuritySection {
    fn start(&self, ctx: &mut Ctx) -> anyhow::Result<Runs> {
        let dir = ctx.work_dir.join(ID);
        let nbd_tls = dir.join("nbd-tls");
        make_nbd_certs(&nbd_tls)?;
        let nbd_tls = nbd_tls.display().to_string();
        let data_tls = dir.join("data-tls").display().to_string();
        let config = ClusterConfig {
            osds: 3,
            replicas: 3,
            ec: None,
            pgs: 32,
            object_size: "128K".into(),
            osd_size: "4G".into(),
            volume_size: format_size(self.size_bytes()),
            s3: false,
            nvmf: false,
        };
        let exe = std::env::current_exe()?;
        let extra: [Vec<&str>; 3] = [
            vec!["--insecure-no-auth"],
            vec!["--nbd-tls-cert", &nbd_tls],
            vec!["--data-tls", &data_tls],
        ];
        let mut clusters = Vec::new();
        for (name, extra) in ["noauth", "auth", "datatls"].iter().zip(extra) {
            let mut args = vec!["--no-local-path"];
            args.extend(extra);
            let log = ctx.raw_dir.join(format!("basalt-up-{ID}-{name}.log"));
            let c = Cluster::start_exe_with(&exe, &dir.join(name), &log, &config, &args)
                .map_err(|e| anyhow::anyhow!("basalt up ({name}) did not start: {e:#}"))?;
            clusters.push(c);
        }
        for (c, name) in clusters.iter().zip(["noauth", "auth", "datatls"]) {
            let fill = FioRun {
                file: format!("{ID}-{name}-precondition"),
                job: &fio::FILL,
                target: Target::Nbd { uri: c.uri.clone() },
                size_bytes: self.size_bytes(),
                span: Span::Once,
                timeout: fio::fill_bound(self.size_bytes()),
            };
            if let Some(e) = ctx.fio(&fill, &c.cpu_sources()).error {
                anyhow::bail!("writing the {name} cluster's volume failed: {e}");
            }
        }
        Ok(Runs { clusters })
    }

    /// Figures by workload, then by variant ([`VARIANTS`] order).
    fn measure(&self, ctx: &mut Ctx, runs: &Runs, notes: &mut Vec<String>) -> Vec<Vec<Figure>> {
        let (runtime_s, ramp_s) = self.span();
        let mut all: Vec<Vec<Vec<Figure>>> =
            vec![vec![Vec::new(); VARIANTS.len()]; WORKLOADS.len()];
        for round in 0..self.rounds() {
            for (wi, w) in WORKLOADS.iter().enumerate() {
                let job = Job {
                    rw: w.rw,
                    bs: "4k",
                    iodepth: w.iodepth,
                    numjobs: 1,
                    rwmixread: None,
                };
                for k in 0..VARIANTS.len() {
                    let vi = (k + round + wi) % VARIANTS.len();
                    let v = VARIANTS[vi];
                    ctx.progress.step(
                        &format!("security: {} ({v}, round {})", w.label, round + 1),
                        (runtime_s + ramp_s) as f64,
                    );
                    // NBD TLS is measured on the default cluster.
                    let c = &runs.clusters[if v == "nbdtls" { 1 } else { vi }];
                    let uri = if v == "nbdtls" {
                        // fio refuses URIs naming local files: the server is not verified,
                        // which changes nothing to the cost of an established session.
                        format!(
                            "{}?tls-verify-peer=false",
                            c.uri.replacen("nbd://", "nbds://", 1)
                        )
                    } else {
                        c.uri.clone()
                    };
                    let run = FioRun {
                        file: format!("{ID}-{}-{v}-r{}", w.key, round + 1),
                        job: &job,
                        target: Target::Nbd { uri },
                        size_bytes: self.size_bytes(),
                        span: Span::Timed { runtime_s, ramp_s },
                        timeout: fio::timed_bound(runtime_s, ramp_s),
                    };
                    let f = ctx.fio(&run, &c.cpu_sources());
                    let value = f.fio.as_ref().map(|s| s.read_iops + s.write_iops);
                    all[wi][vi].push(Figure { value, ..f });
                }
            }
        }
        if self.rounds() > 1 {
            notes.push(format!(
                "Each figure is the median of {} rounds; the raw outputs of every round are \
                 under raw/{ID}-*.",
                self.rounds()
            ));
        }
        all.into_iter()
            .map(|by_variant| by_variant.into_iter().map(median).collect())
            .collect()
    }
}

/// The run with the median IOPS (a failed run if none succeeded).
fn median(mut figures: Vec<Figure>) -> Figure {
    let ok = figures.iter().filter(|f| f.value.is_some()).count();
    if ok == 0 {
        return figures
            .pop()
            .unwrap_or_else(|| Figure::failed("not run", None, None));
    }
    figures.retain(|f| f.value.is_some());
    figures.sort_by(|a, b| {
        a.value
            .partial_cmp(&b.value)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    figures.swap_remove((figures.len() - 1) / 2)
}

/// Per workload: authentication (vs none), data-plane TLS and NBD TLS (vs the default).
fn rows(figures: Vec<Vec<Figure>>) -> Vec<Row> {
    let mut rows = Vec::new();
    for (w, f) in WORKLOADS.iter().zip(figures) {
        let [noauth, auth, datatls, nbdtls]: [Figure; 4] = match f.try_into() {
            Ok(a) => a,
            Err(_) => continue,
        };
        let row = |what: &str, label: &str, baseline: &Figure, with: Figure| Row {
            key: format!("{what}_{}_iops", w.key),
            label: format!("{}, {label}", w.label),
            unit: "IOPS".into(),
            higher_is_better: true,
            baseline: Some(baseline.clone()),
            basalt: Some(with),
        };
        rows.push(row("auth", "authentication vs none", &noauth, auth.clone()));
        rows.push(row(
            "data_tls",
            "data-plane TLS vs plaintext",
            &auth,
            datatls,
        ));
        rows.push(row("nbd_tls", "NBD TLS vs plaintext", &auth, nbdtls));
    }
    rows
}

/// A CA and a server certificate for 127.0.0.1 in qemu's layout (`--nbd-tls-cert DIR`),
/// made with openssl(1).
fn make_nbd_certs(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let script = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -days 2 -keyout ca-key.pem -out ca-cert.pem -subj /CN=ca && \
        openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout server-key.pem -out s.csr -subj /CN=localhost && \
        printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > s.ext && \
        openssl x509 -req -in s.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial \
        -days 2 -extfile s.ext -out server-cert.pem";
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .map_err(|e| anyhow::anyhow!("run openssl to make NBD TLS certificates: {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "making NBD TLS certificates with openssl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
