//! NVMe/TCP (issue 17) against NBD, both through the Linux kernel's own initiators. This
//! host's kernel has neither an nvme-tcp nor an nbd module, so the comparison runs inside a
//! QEMU guest (the NVMe/TCP guest of `scripts/build-guest-image.sh`, TCG): the guest
//! attaches a volume of the `basalt up` under test over NVMe/TCP and the same volume over
//! its kernel NBD client, and runs 4 KiB random writes then reads at QD16 on each, in
//! alternating rounds, same VM, same run. A TCG vCPU is the bottleneck of both paths, so
//! the figure is their ratio, not either protocol's speed.

use super::{Ctx, Section};
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Section id.
pub const ID: &str = "nvmf";
/// The volume the guest attaches (made for the section, removed after it).
const VOLUME: &str = "nvmf-bench";
/// Rounds of each (protocol, direction), alternating (the guest's /init runs two).
const ROUNDS: usize = 2;
/// Longest guest run: boot, attach, pattern, trim, fio verify, then the timed rounds.
const VM_BASE_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest `basalt volume` call.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// The goal: NVMe/TCP IOPS at least this multiple of the kernel NBD client's.
const GOAL: f64 = 1.5;

/// The section.
pub struct NvmfSection {
    /// Seconds of each timed fio run in the guest.
    pub fio_s: u32,
    /// Directory of the guest built by `scripts/build-guest-image.sh` (None: not measured).
    pub guest_dir: Option<PathBuf>,
}

/// IOPS of every round the guest printed, by (protocol, direction).
#[derive(Debug, Default, PartialEq)]
struct GuestIops {
    nvmf_write: Vec<f64>,
    nbd_write: Vec<f64>,
    nvmf_read: Vec<f64>,
    nbd_read: Vec<f64>,
}

impl GuestIops {
    /// The `basalt-guest: fio PROTO DIRECTION iops=N` lines of a console.
    fn parse(console: &str) -> GuestIops {
        let mut out = GuestIops::default();
        for line in console.lines() {
            let Some(rest) = line.trim().strip_prefix("basalt-guest: fio ") else {
                continue;
            };
            let mut words = rest.split_whitespace();
            let (Some(proto), Some(rw), Some(iops)) = (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let Some(v) = iops.strip_prefix("iops=").and_then(|v| v.parse().ok()) else {
                continue;
            };
            match (proto, rw) {
                ("nvmf", "randwrite") => out.nvmf_write.push(v),
                ("nbd", "randwrite") => out.nbd_write.push(v),
                ("nvmf", "randread") => out.nvmf_read.push(v),
                ("nbd", "randread") => out.nbd_read.push(v),
                _ => {}
            }
        }
        out
    }

    fn complete(&self) -> bool {
        [
            &self.nvmf_write,
            &self.nbd_write,
            &self.nvmf_read,
            &self.nbd_read,
        ]
        .iter()
        .all(|v| v.len() == ROUNDS && v.iter().all(|x| *x > 0.0))
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Runs `basalt volume ARGS --control CONTROL`, bounded; its stderr is the error.
fn volume(control: &str, args: &[&str]) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("find the basalt executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("volume").args(args).args(["--control", control]);
    super::run_ok(&mut cmd, CLI_TIMEOUT).map(drop)
}

/// Boots the guest against the target at `nvmf_port` and the NBD server at `nbd_port`
/// (both on the host, 10.0.2.2 to the guest), bounded; its console is kept in `console`.
fn guest_run(
    guest: &Path,
    nvmf_port: u16,
    nbd_port: u16,
    fio_s: u32,
    console: &Path,
) -> anyhow::Result<GuestIops> {
    let params = format!(
        "basalt.port={nvmf_port} basalt.vol={VOLUME} basalt.fio={fio_s} basalt.nbd={nbd_port}"
    );
    let (mut child, rx) =
        crate::guest::spawn_with_console(&mut crate::guest::nvmf_command(guest, &params))?;
    // The timed rounds: 2 protocols × 2 directions × ROUNDS runs of fio_s seconds.
    let deadline = Instant::now() + VM_BASE_TIMEOUT + Duration::from_secs(8 * u64::from(fio_s));
    let mut log = String::new();
    let mut done = false;
    // Bound: the deadline.
    while Instant::now() < deadline && !done {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((_, line)) => {
                done = line.contains("basalt-guest: done") || line.contains("FAILED");
                log.push_str(&line);
                log.push('\n');
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::write(console, &log);
    if let Some(failed) = log.lines().find(|l| l.contains("FAILED")) {
        bail!(
            "the guest {} (console: {})",
            failed.trim(),
            console.display()
        );
    }
    let iops = GuestIops::parse(&log);
    if !done || !iops.complete() {
        bail!(
            "the guest did not finish its runs in time (console: {})",
            console.display()
        );
    }
    Ok(iops)
}

impl Section for NvmfSection {
    fn id(&self) -> &'static str {
        ID
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        // Boot and the functional steps take about 80 s under TCG.
        vec![80.0 + 8.0 * f64::from(self.fio_s)]
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let mut report = SectionReport {
            id: ID.into(),
            title: "NVMe/TCP beside NBD, through the Linux kernel's initiators".into(),
            intro: format!(
                "A QEMU guest (TCG, one vCPU, Linux 6.1) attaches the volume `{VOLUME}` of \
                 the `basalt up` under test over NVMe/TCP (the kernel's nvme-tcp, no \
                 digests) and over its kernel NBD client (nbd-client), and runs fio 4 KiB \
                 random writes then reads at QD16 (libaio, O_DIRECT, 64 MiB) for {} s on \
                 each, alternating, {ROUNDS} rounds; figures are the means. This host's \
                 kernel has no nvme-tcp module, so there is no host-side run. The TCG vCPU \
                 limits both paths: read the ratio (the issue's goal: NVMe/TCP ≥ {GOAL}× \
                 the kernel NBD client at 4k QD16).",
                self.fio_s
            ),
            baseline_name: "kernel NBD client".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Comparison,
            notes: Vec::new(),
            rows: Vec::new(),
        };
        let not_measured = |mut report: SectionReport, reason: String| {
            report.status = SectionStatus::NotMeasured { reason };
            report
        };
        let Some(guest) = self.guest_dir.clone() else {
            return not_measured(
                report,
                "no guest image (scripts/build-guest-image.sh target/guest, then \
                 --guest-dir target/guest)"
                    .into(),
            );
        };
        if !guest.join("nvmf-initrd.cpio").exists() {
            return not_measured(
                report,
                format!(
                    "{} has no nvmf-initrd.cpio (rebuild it with scripts/build-guest-image.sh)",
                    guest.display()
                ),
            );
        }
        let (control, nvmf, uri) = match &ctx.cluster {
            Ok(c) => (c.control(), c.nvmf(), c.uri().to_string()),
            Err(e) => return not_measured(report, e.clone()),
        };
        let (Some(control), Some(nvmf)) = (control, nvmf) else {
            return not_measured(
                report,
                "needs a local `basalt up` serving NVMe/TCP (--nvmf-listen)".into(),
            );
        };
        let nbd_port = uri
            .strip_prefix("nbd://")
            .and_then(|r| r.split('/').next())
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .map(|a| a.port());
        let Some(nbd_port) = nbd_port else {
            return not_measured(report, format!("no NBD TCP port in {uri}"));
        };
        ctx.progress
            .step("NVMe/TCP and NBD from a Linux guest", self.plan(ctx)[0]);
        let console = ctx.raw_dir.join("nvmf-guest.console");
        let raw = console
            .strip_prefix(&ctx.out_dir)
            .ok()
            .map(|p| p.display().to_string());
        let outcome = volume(&control, &["create", VOLUME, "--size", "1G"]).and_then(|()| {
            let run = guest_run(&guest, nvmf.port(), nbd_port, self.fio_s, &console);
            let removed = volume(&control, &["rm", VOLUME, "--force"]);
            let iops = run?;
            removed?;
            Ok(iops)
        });
        if let Err(e) = &outcome {
            ctx.progress.note(&format!("failed: {e:#}"));
        }
        let command = format!(
            "fio in the guest: --bs=4k --iodepth=16 --ioengine=libaio --direct=1 \
             --runtime={} (scripts/guest-nvmf-init.sh)",
            self.fio_s
        );
        let figure = |side: &str, pick: fn(&GuestIops) -> &Vec<f64>| match &outcome {
            Ok(iops) => Figure {
                value: Some(mean(pick(iops))),
                command: Some(format!("{command}, {side}")),
                raw: raw.clone(),
                ..Figure::default()
            },
            Err(e) => Figure::failed(format!("{e:#}"), Some(command.clone()), raw.clone()),
        };
        for (key, label, nvmf_side, nbd_side) in [
            (
                "randwrite_4k_qd16_iops",
                "4k random write QD16, from the guest",
                (|i: &GuestIops| &i.nvmf_write) as fn(&GuestIops) -> &Vec<f64>,
                (|i: &GuestIops| &i.nbd_write) as fn(&GuestIops) -> &Vec<f64>,
            ),
            (
                "randread_4k_qd16_iops",
                "4k random read QD16, from the guest",
                |i: &GuestIops| &i.nvmf_read,
                |i: &GuestIops| &i.nbd_read,
            ),
        ] {
            report.rows.push(Row {
                key: key.into(),
                label: label.into(),
                unit: "IOPS".into(),
                higher_is_better: true,
                baseline: Some(figure("kernel NBD client (/dev/nbd0)", nbd_side)),
                basalt: Some(figure("kernel NVMe/TCP (nvme-tcp)", nvmf_side)),
            });
        }
        if let Ok(iops) = &outcome {
            for (what, nvmf, nbd) in [
                ("writes", &iops.nvmf_write, &iops.nbd_write),
                ("reads", &iops.nvmf_read, &iops.nbd_read),
            ] {
                let ratio = mean(nvmf) / mean(nbd);
                report.notes.push(format!(
                    "{what}: NVMe/TCP {ratio:.2}× the kernel NBD client (rounds: NVMe/TCP \
                     {nvmf:.0?}, NBD {nbd:.0?} IOPS); goal ≥ {GOAL}×: {}.",
                    if ratio >= GOAL { "met" } else { "not met" }
                ));
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the guest's fio lines are read by protocol and direction; other lines and
    /// malformed ones are ignored; a run is complete only with every round non-zero.
    #[test]
    fn guest_console_lines() {
        let console = "basalt-guest: init\n\
            basalt-guest: fio nvmf randwrite iops=1200.5\n\
            basalt-guest: fio nvmf randread iops=2000\n\
            basalt-guest: fio nbd randwrite iops=1000\n\
            basalt-guest: fio nbd randread iops=garbage\n\
            basalt-guest: fio nbd randread iops=1500\n\
            basalt-guest: fio verify ok\n";
        let once = GuestIops::parse(console);
        assert_eq!(once.nvmf_write, [1200.5]);
        assert_eq!(once.nbd_read, [1500.0]);
        assert!(!once.complete(), "one round of two");
        let twice = GuestIops::parse(&format!("{console}{console}"));
        assert!(twice.complete());
        assert_eq!(mean(&twice.nvmf_read), 2000.0);
    }
}
