//! What security costs (issue 15): 4k random read and write IOPS at QD1 and QD32 through
//! NBD with authentication off and on, data-plane TLS off and on, and NBD TLS off and on.
//! Three `basalt up` run side by side with `--no-local-path` (so the gateway reaches its
//! OSDs and the OSDs each other over loopback TCP, where authentication and TLS apply):
//! one with the benchmark-only `--insecure-no-auth`, one as by default (authentication on,
//! NBD offering TLS to clients that ask with `nbds://`), one with `--data-tls`. Each round
//! runs every variant of a workload back to back, in an order that rotates from round to
//! round; a variant's figure is the median of its rounds.

use super::side_by_side::{self, Rounds, Variant, Workload};
use super::{Ctx, Section};
use crate::cluster::{ClusterConfig, UpProcess};
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus};
use basalt_proto::size::format_size;
use std::path::Path;
use std::process::Command;

/// Section id.
pub const ID: &str = "security";
const TITLE: &str = "Security: authentication and TLS";

const WORKLOADS: [Workload; 4] = [
    side_by_side::RANDREAD_4K_QD1,
    side_by_side::RANDREAD_4K_QD32,
    side_by_side::RANDWRITE_4K_QD1,
    side_by_side::RANDWRITE_4K_QD32,
];

/// The measured variants, in the order of [`Runs::clusters`] then NBD TLS.
const VARIANTS: [&str; 4] = ["noauth", "auth", "datatls", "nbdtls"];

/// The section: `quick` and `smoke` shorten the runs.
pub struct SecuritySection {
    pub quick: bool,
    pub smoke: bool,
}

impl SecuritySection {
    fn rounds(&self) -> Rounds {
        let (rounds, runtime_s, ramp_s, size_bytes) = if self.smoke {
            (1, 1, 0, 64 << 20)
        } else if self.quick {
            (2, 5, 1, 512 << 20)
        } else {
            (2, 15, 2, 512 << 20)
        };
        Rounds {
            rounds,
            runtime_s,
            ramp_s,
            size_bytes,
        }
    }
}

impl Section for SecuritySection {
    fn id(&self) -> &'static str {
        ID
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        let rounds = self.rounds();
        let start = 3.0 * (5.0 + rounds.size_bytes as f64 / (100u64 << 20) as f64);
        std::iter::once(start)
            .chain(side_by_side::plan(&rounds, WORKLOADS.len(), VARIANTS.len()))
            .collect()
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let mut notes = Vec::new();
        let rounds = self.rounds();
        ctx.progress.step(
            "security: start three clusters and write their volumes",
            0.0,
        );
        let figures = match self.start(ctx) {
            Ok(clusters) => {
                let variants = variants(&clusters);
                side_by_side::measure(ctx, ID, &rounds, &WORKLOADS, &variants, &mut notes)
            }
            Err(e) => side_by_side::failed(
                ctx,
                ID,
                format!("{e:#}"),
                &rounds,
                WORKLOADS.len(),
                VARIANTS.len(),
            ),
        };
        let _ = std::fs::remove_dir_all(ctx.work_dir.join(ID));
        SectionReport {
            id: ID.into(),
            title: TITLE.into(),
            intro: format!(
                "fio's nbd engine, 4k random I/O at QD1 and QD32, {} s per run \
                 ({} s ramp), {} rounds, the median round shown. Three `basalt up` (3 \
                 OSDs, 3 replicas, `--no-local-path`: gateway to OSD and OSD to OSD over \
                 loopback TCP) run side by side: authentication off (`--insecure-no-auth`, \
                 benchmark only), as by default (authentication on; NBD also offers TLS, \
                 reached with `nbds://`), and with `--data-tls`. Each row compares a \
                 variant with the one without its feature; the ratio is the share of IOPS \
                 kept. Goals: authentication costs < 2 %, TLS ≤ 15 % at QD32.",
                rounds.runtime_s, rounds.ramp_s, rounds.rounds
            ),
            baseline_name: "Without".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Comparison,
            notes,
            rows: rows(figures),
        }
    }
}

impl SecuritySection {
    /// The three clusters: authentication off, default (with NBD TLS offered), data-plane
    /// TLS.
    fn start(&self, ctx: &mut Ctx) -> anyhow::Result<Vec<UpProcess>> {
        let dir = ctx.work_dir.join(ID);
        let nbd_tls = dir.join("nbd-tls");
        make_nbd_certs(&nbd_tls)?;
        let nbd_tls = nbd_tls.display().to_string();
        let data_tls = dir.join("data-tls").display().to_string();
        let size_bytes = self.rounds().size_bytes;
        let config = ClusterConfig {
            osds: 3,
            replicas: 3,
            ec: None,
            pgs: 32,
            object_size: "128K".into(),
            osd_size: "4G".into(),
            volume_size: format_size(size_bytes),
            s3: false,
            nvmf: false,
            up_args: Vec::new(),
        };
        let clusters = [
            ("noauth", vec!["--no-local-path", "--insecure-no-auth"]),
            ("auth", vec!["--no-local-path", "--nbd-tls-cert", &nbd_tls]),
            ("datatls", vec!["--no-local-path", "--data-tls", &data_tls]),
        ];
        side_by_side::start_clusters(ctx, ID, &config, &clusters, size_bytes)
    }
}

/// The variants ([`VARIANTS`] order) on the clusters of `start`; NBD TLS is measured on the
/// default cluster.
fn variants(clusters: &[UpProcess]) -> Vec<Variant<'_>> {
    let mut out: Vec<Variant> = clusters
        .iter()
        .zip(VARIANTS)
        .map(|(c, name)| Variant {
            name,
            cluster: c,
            uri: c.uri.clone(),
        })
        .collect();
    if let Some(auth) = clusters.get(1) {
        out.push(Variant {
            name: VARIANTS[3],
            cluster: auth,
            // fio refuses URIs naming local files: the server is not verified, which
            // changes nothing to the cost of an established session.
            uri: format!(
                "{}?tls-verify-peer=false",
                auth.uri.replacen("nbd://", "nbds://", 1)
            ),
        });
    }
    out
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
