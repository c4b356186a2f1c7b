//! The PlasmaVMC profile: what VM disks built on snapshots, clones and images cost. Image
//! import beside `qemu-img convert` to the local disk; first and second clone of a 2 GiB
//! and a 200 GiB image; a VM booted from a clone beside one booted from a flat copy (time to
//! its root file system, guest fio); host fio through a 10-deep snapshot chain beside a
//! flat volume. Needs a local `basalt up` (it makes volumes and images of its own).

use super::{run_ok, Ctx, FioRun, Section};
use crate::fio::{self, FioTarget, Job, Span};
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus};
use anyhow::{bail, Context};
use basalt_proto::size::format_size;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Section id.
pub const ID: &str = "plasmavmc";
/// Longest a CLI command of the section may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(900);
/// Longest a guest may run.
const VM_TIMEOUT: Duration = Duration::from_secs(300);
/// Snapshots between the chain volume's head and its data.
const CHAIN_DEPTH: u32 = 10;

const RANDREAD: Job = Job {
    rw: "randread",
    bs: "4k",
    iodepth: 32,
    numjobs: 1,
    rwmixread: None,
};
const RANDWRITE: Job = Job {
    rw: "randwrite",
    bs: "4k",
    iodepth: 32,
    numjobs: 1,
    rwmixread: None,
};

/// The PlasmaVMC section.
pub struct PlasmaVmcSection {
    /// Bytes of random data in the synthetic 2 GiB image.
    pub image_data_bytes: u64,
    /// Seconds of each guest fio run (randwrite, then randread); at least 1 (0 would skip
    /// fio in the guest and leave its rows empty).
    pub guest_fio_s: u32,
    /// Directory of the guest built by `scripts/build-guest-image.sh` (None: no VM rows).
    pub guest_dir: Option<PathBuf>,
}

impl PlasmaVmcSection {
    /// Where `scripts/build-guest-image.sh` puts the guest by default, seen from the
    /// running executable (`target/{debug,release}/basalt` → `target/guest`).
    pub fn default_guest_dir() -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let dir = exe.parent()?.parent()?.join("guest");
        dir.join("disk.qcow2").exists().then_some(dir)
    }
}

/// Run `basalt GROUP --control ADDR ARGS...` and return its stdout.
fn cli(control: &str, group: &str, args: &[&str]) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("find the basalt executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg(group).args(["--control", control]).args(args);
    run_ok(&mut cmd, CLI_TIMEOUT)
}

/// The "in X ms" a clone or snapshot command prints.
fn printed_ms(out: &str) -> anyhow::Result<f64> {
    let at = out.rfind(" in ").context("no duration in the output")?;
    let rest = &out[at + 4..];
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    if !rest[num.len()..].trim_start().starts_with("ms") {
        bail!("no duration in ms in {out:?}");
    }
    Ok(num.parse()?)
}

/// Seconds `cmd` took; it must succeed.
fn timed(cmd: &mut Command) -> anyhow::Result<f64> {
    let started = Instant::now();
    run_ok(cmd, CLI_TIMEOUT)?;
    Ok(started.elapsed().as_secs_f64())
}

/// Bytes of data `qemu-img map` finds in an image.
fn data_bytes(image: &Path) -> anyhow::Result<u64> {
    let out = run_ok(
        Command::new("qemu-img")
            .args(["map", "--output=json"])
            .arg(image),
        CLI_TIMEOUT,
    )?;
    let map: serde_json::Value = serde_json::from_str(&out)?;
    Ok(map
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["data"].as_bool() == Some(true) && e["zero"].as_bool() != Some(true))
                .filter_map(|e| e["length"].as_u64())
                .sum()
        })
        .unwrap_or(0))
}

/// A raw file of `size` bytes holding `data` bytes of random data in 1 MiB pieces spread
/// over it, then the same as qcow2; returns the qcow2.
fn synthetic_image(dir: &Path, size: u64, data: u64) -> anyhow::Result<PathBuf> {
    use std::io::{Seek, SeekFrom, Write};
    let raw = dir.join("synthetic.raw");
    let mut f = std::fs::File::create(&raw)?;
    f.set_len(size)?;
    let pieces = (data >> 20).max(1);
    let stride = size / pieces;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut chunk = vec![0u8; 1 << 20];
    for i in 0..pieces {
        for b in chunk.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            b.copy_from_slice(&state.to_le_bytes());
        }
        f.seek(SeekFrom::Start(i * stride))?;
        f.write_all(&chunk)?;
    }
    drop(f);
    let qcow = dir.join("synthetic.qcow2");
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "qcow2"])
            .arg(&raw)
            .arg(&qcow),
        CLI_TIMEOUT,
    )?;
    std::fs::remove_file(&raw)?;
    Ok(qcow)
}

/// What one guest run showed.
struct VmRun {
    /// Seconds from starting QEMU to the guest's root image mounted.
    root_s: f64,
    randwrite_iops: f64,
    randread_iops: f64,
}

/// Boot the guest from `uri`, bounded; its console goes to `console`.
fn boot(guest: &Path, uri: &str, name: &str, fio_s: u32, console: &Path) -> anyhow::Result<VmRun> {
    let started = Instant::now();
    let (mut child, rx) =
        crate::guest::spawn_with_console(&mut crate::guest::qemu_command(guest, uri, name, fio_s))?;
    let mut log = String::new();
    let mut run = VmRun {
        root_s: f64::NAN,
        randwrite_iops: f64::NAN,
        randread_iops: f64::NAN,
    };
    let deadline = started + VM_TIMEOUT;
    let mut done = false;
    // Bound: VM_TIMEOUT.
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((at, line)) => {
                log.push_str(&line);
                log.push('\n');
                let iops = |l: &str| l.rsplit('=').next().and_then(|v| v.trim().parse().ok());
                if line.contains("basalt-guest: root image") {
                    run.root_s = (at - started).as_secs_f64();
                } else if line.contains("basalt-guest: fio randwrite iops=") {
                    run.randwrite_iops = iops(&line).unwrap_or(f64::NAN);
                } else if line.contains("basalt-guest: fio randread iops=") {
                    run.randread_iops = iops(&line).unwrap_or(f64::NAN);
                } else if line.contains("basalt-guest: done") {
                    done = true;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::write(console, &log);
    if !done || log.contains("FAILED") {
        bail!(
            "the guest booted from {uri} did not finish its test (console: {})",
            console.display()
        );
    }
    Ok(run)
}

fn value(v: anyhow::Result<f64>, command: &str, raw: Option<&str>) -> Figure {
    match v {
        Ok(v) if v.is_finite() => Figure {
            value: Some(v),
            command: Some(command.into()),
            raw: raw.map(String::from),
            ..Figure::default()
        },
        Ok(_) => Figure::failed("not reported", Some(command.into()), raw.map(String::from)),
        Err(e) => Figure::failed(
            format!("{e:#}"),
            Some(command.into()),
            raw.map(String::from),
        ),
    }
}

fn row(
    key: &str,
    label: String,
    unit: &str,
    higher: bool,
    base: Option<Figure>,
    basalt: Figure,
) -> Row {
    Row {
        key: key.into(),
        label,
        unit: unit.into(),
        higher_is_better: higher,
        baseline: base,
        basalt: Some(basalt),
    }
}

impl PlasmaVmcSection {
    /// Image import (synthetic 2 GiB qcow2) beside qemu-img convert to the local disk.
    fn import_rows(&self, ctx: &mut Ctx, control: &str, rows: &mut Vec<Row>) {
        let data_mib = self.image_data_bytes >> 20;
        let made = synthetic_image(&ctx.work_dir, 2 << 30, self.image_data_bytes);
        let (qcow, data) = match made.and_then(|q| Ok((data_bytes(&q)?, q))) {
            Ok((d, q)) => (q, d),
            Err(e) => {
                let f = Figure::failed(format!("make the test image: {e:#}"), None, None);
                rows.push(row(
                    "import_mib_s",
                    format!("2 GiB qcow2 image ({data_mib} MiB of data) import"),
                    "MiB/s",
                    true,
                    Some(f.clone()),
                    f,
                ));
                return;
            }
        };
        let mib = data as f64 / (1 << 20) as f64;
        let local = ctx.work_dir.join("converted.raw");
        let base_cmd = format!(
            "qemu-img convert -f qcow2 -O raw synthetic.qcow2 {}",
            local.display()
        );
        let base = timed(
            Command::new("qemu-img")
                .args(["convert", "-f", "qcow2", "-O", "raw"])
                .arg(&qcow)
                .arg(&local),
        )
        .map(|s| mib / s);
        let _ = std::fs::remove_file(&local);
        let cmd = "basalt image import synthetic.qcow2 synthetic";
        let started = Instant::now();
        let basalt = cli(
            control,
            "image",
            &["import", qcow.to_str().unwrap_or(""), "synthetic"],
        )
        .map(|_| mib / started.elapsed().as_secs_f64());
        rows.push(row(
            "import_mib_s",
            format!("2 GiB qcow2 image ({data_mib} MiB of data) import"),
            "MiB/s",
            true,
            Some(value(base, &base_cmd, None)),
            value(basalt, cmd, None),
        ));
    }

    /// First and second clone of the 2 GiB image and of a 200 GiB one.
    fn clone_rows(&self, control: &str, work: &Path, rows: &mut Vec<Row>) {
        let big = work.join("big.raw");
        let made = std::fs::File::create(&big)
            .and_then(|f| f.set_len(200 << 30))
            .map_err(anyhow::Error::from)
            .and_then(|_| {
                cli(
                    control,
                    "image",
                    &["import", big.to_str().unwrap_or(""), "big"],
                )
            });
        for (image, label, ok) in [
            ("synthetic", "2 GiB", true),
            ("big", "200 GiB", made.is_ok()),
        ] {
            for (n, nth) in [(1, "first"), (2, "second")] {
                let name = format!("clone-{image}-{n}");
                let cmd = format!("basalt volume create {name} --from-image {image}");
                let v = if ok {
                    cli(control, "volume", &["create", &name, "--from-image", image])
                        .and_then(|out| printed_ms(&out))
                } else {
                    Err(anyhow::anyhow!(
                        "import of the 200 GiB image failed: {:#}",
                        made.as_ref()
                            .err()
                            .map(|e| e.to_string())
                            .unwrap_or_default()
                    ))
                };
                rows.push(row(
                    &format!(
                        "clone_{nth}_{}",
                        image.replace("synthetic", "2g").replace("big", "200g")
                    ),
                    format!("{nth} volume from a {label} image"),
                    "ms",
                    false,
                    None,
                    value(v, &cmd, None),
                ));
            }
        }
        let _ = std::fs::remove_file(&big);
    }

    /// Host fio through a 10-deep chain beside a flat volume, interleaved.
    fn chain_rows(&self, ctx: &mut Ctx, control: &str, base_uri: &str, rows: &mut Vec<Row>) {
        let size = ctx.settings.size_bytes;
        let size_arg = format_size(size);
        let made: anyhow::Result<()> = (|| {
            for v in ["chain", "flat"] {
                cli(control, "volume", &["create", v, "--size", &size_arg])?;
                let run = FioRun {
                    file: format!("plasmavmc-fill-{v}"),
                    job: &fio::FILL,
                    target: FioTarget::Nbd {
                        uri: export(base_uri, v),
                    },
                    size_bytes: size,
                    span: Span::Once,
                    timeout: fio::fill_bound(size),
                };
                if let Some(e) = ctx.fio(&run, &[]).error {
                    bail!("fill {v}: {e}");
                }
            }
            for i in 0..CHAIN_DEPTH {
                cli(control, "volume", &["snapshot", &format!("chain@s{i}")])?;
            }
            Ok(())
        })();
        for (key, job, label) in [
            (
                "chain10_randread_4k_qd32_iops",
                &RANDREAD,
                "4k random read QD32, head of a 10-deep chain vs flat",
            ),
            (
                "chain10_randwrite_4k_qd32_iops",
                &RANDWRITE,
                "4k random write QD32 (first writes copy up), 10-deep chain vs flat",
            ),
        ] {
            let mut figures = Vec::new();
            for v in ["flat", "chain"] {
                let f = match &made {
                    Err(e) => Figure::failed(format!("{e:#}"), None, None),
                    Ok(()) => {
                        let sources = ctx
                            .cluster
                            .as_ref()
                            .map(|c| c.cpu_sources())
                            .unwrap_or_default();
                        let run = FioRun {
                            file: format!("plasmavmc-{key}-{v}"),
                            job,
                            target: FioTarget::Nbd {
                                uri: export(base_uri, v),
                            },
                            size_bytes: size,
                            span: Span::Timed {
                                runtime_s: ctx.settings.runtime_s,
                                ramp_s: ctx.settings.ramp_s,
                            },
                            timeout: fio::timed_bound(ctx.settings.runtime_s, ctx.settings.ramp_s),
                        };
                        let mut f = ctx.fio(&run, &sources);
                        f.value = f.fio.as_ref().map(|s| s.read_iops + s.write_iops);
                        f
                    }
                };
                figures.push(f);
            }
            let chain = figures.pop().expect("two figures");
            let flat = figures.pop().expect("two figures");
            rows.push(Row {
                key: key.into(),
                label: label.into(),
                unit: "IOPS".into(),
                higher_is_better: true,
                baseline: Some(flat),
                basalt: Some(chain),
            });
        }
    }

    /// Boot the guest from a flat copy of its image, then from a clone.
    fn vm_rows(&self, ctx: &mut Ctx, control: &str, base_uri: &str, rows: &mut Vec<Row>) {
        let Some(guest) = &self.guest_dir else {
            return;
        };
        let qcow = guest.join("disk.qcow2");
        let prepared: anyhow::Result<()> = (|| {
            cli(
                control,
                "image",
                &["import", qcow.to_str().unwrap_or(""), "guest"],
            )?;
            cli(
                control,
                "volume",
                &["create", "vm-clone", "--from-image", "guest"],
            )?;
            let size = std::fs::metadata(guest.join("disk.raw"))?.len();
            cli(
                control,
                "volume",
                &["create", "vm-flat", "--size", &format_size(size)],
            )?;
            run_ok(
                Command::new("qemu-img")
                    .args(["convert", "-n", "-f", "qcow2", "-O", "raw"])
                    .arg(&qcow)
                    .arg(export(base_uri, "vm-flat")),
                CLI_TIMEOUT,
            )?;
            Ok(())
        })();
        let mut runs = Vec::new();
        for v in ["vm-flat", "vm-clone"] {
            let console = ctx.raw_dir.join(format!("plasmavmc-{v}.console"));
            runs.push(match &prepared {
                Ok(()) => boot(guest, &export(base_uri, v), v, self.guest_fio_s, &console),
                Err(e) => Err(anyhow::anyhow!("{e:#}")),
            });
        }
        let cmd = format!(
            "qemu-system-x86_64 -accel tcg -m 512 -kernel vmlinux -initrd initrd.cpio \
             -drive file=nbd://.../VOLUME,if=virtio,cache=none (basalt.fio={})",
            self.guest_fio_s
        );
        let pick = |r: &anyhow::Result<VmRun>, f: fn(&VmRun) -> f64, v: &str| {
            let raw = format!("raw/plasmavmc-{v}.console");
            value(
                r.as_ref().map(f).map_err(|e| anyhow::anyhow!("{e:#}")),
                &cmd,
                Some(&raw),
            )
        };
        for (key, label, unit, higher, f) in [
            (
                "vm_root_s",
                "VM start to its root file system mounted (TCG), clone vs flat volume",
                "s",
                false,
                (|r: &VmRun| r.root_s) as fn(&VmRun) -> f64,
            ),
            (
                "guest_randwrite_4k_qd16_iops",
                "guest fio 4k random write QD16, clone vs flat",
                "IOPS",
                true,
                |r: &VmRun| r.randwrite_iops,
            ),
            (
                "guest_randread_4k_qd16_iops",
                "guest fio 4k random read QD16, clone vs flat",
                "IOPS",
                true,
                |r: &VmRun| r.randread_iops,
            ),
        ] {
            rows.push(row(
                key,
                label.into(),
                unit,
                higher,
                Some(pick(&runs[0], f, "vm-flat")),
                pick(&runs[1], f, "vm-clone"),
            ));
        }
    }
}

/// The NBD URI of export `name` on the server of `bench_uri` (`nbd://HOST:PORT/bench`).
fn export(bench_uri: &str, name: &str) -> String {
    match bench_uri.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => format!("{bench_uri}/{name}"),
    }
}

impl Section for PlasmaVmcSection {
    fn id(&self) -> &'static str {
        ID
    }

    fn plan(&self, ctx: &Ctx) -> Vec<f64> {
        let fio_s = (ctx.settings.runtime_s + ctx.settings.ramp_s) as f64;
        let mut plan = vec![
            10.0 + (self.image_data_bytes >> 20) as f64 / 50.0,
            5.0,
            ctx.settings.size_bytes as f64 / (100u64 << 20) as f64 + 4.0 * fio_s + 5.0,
        ];
        if self.guest_dir.is_some() {
            plan.push(40.0 + 4.0 * self.guest_fio_s as f64);
        }
        plan
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let mut report = SectionReport {
            id: ID.into(),
            title: "VM images, clones and snapshots (PlasmaVMC profile)".into(),
            intro: format!(
                "Image import: a 2 GiB qcow2 image holding {} MiB of random data, imported \
                 with `basalt image import` (qemu-img convert into the image's NBD export, \
                 holes skipped) beside `qemu-img convert` of the same file to a raw file on \
                 the local disk; MiB/s of data. Clones: `basalt volume create --from-image`, \
                 the time the command reports (control API round trip and metadata updates), \
                 for a 2 GiB and a 200 GiB image. VMs: the test guest \
                 (scripts/build-guest-image.sh) booted under QEMU TCG from a clone of its \
                 image and from a flat volume holding a full copy, one after the other; time \
                 to its root file system, then fio inside the guest ({} s each). \
                 Chain: a volume filled once, then {CHAIN_DEPTH} snapshots, so its head \
                 reads every object through {CHAIN_DEPTH} layers, beside a flat volume \
                 filled the same way; host fio through NBD, flat then chain. TCG guest \
                 figures are bound by emulated CPU, not by storage.",
                self.image_data_bytes >> 20,
                self.guest_fio_s
            ),
            baseline_name: "Local disk / flat volume".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Comparison,
            notes: Vec::new(),
            rows: Vec::new(),
        };
        let plan = self.plan(ctx);
        let (Some(control), Ok(base_uri)) = (
            ctx.cluster.as_ref().ok().and_then(|c| c.control()),
            ctx.cluster.as_ref().map(|c| c.uri().to_string()),
        ) else {
            report.status = SectionStatus::NotMeasured {
                reason: "needs a local `basalt up` started by the benchmark (it makes \
                         images and volumes of its own); not measured on an existing cluster"
                    .into(),
            };
            return report;
        };
        let mut rows = Vec::new();
        ctx.progress.step("PlasmaVMC: image import", plan[0]);
        self.import_rows(ctx, &control, &mut rows);
        ctx.progress
            .step("PlasmaVMC: clones of 2 GiB and 200 GiB images", plan[1]);
        self.clone_rows(&control, &ctx.work_dir.clone(), &mut rows);
        ctx.progress
            .step("PlasmaVMC: fio through a 10-deep snapshot chain", plan[2]);
        self.chain_rows(ctx, &control, &base_uri, &mut rows);
        if self.guest_dir.is_some() {
            ctx.progress.step(
                "PlasmaVMC: boot VMs from a clone and a flat volume",
                plan[3],
            );
            self.vm_rows(ctx, &control, &base_uri, &mut rows);
        } else {
            report.notes.push(
                "No guest image: the VM rows were not measured (build it with \
                 scripts/build-guest-image.sh, or pass --guest-dir)."
                    .into(),
            );
        }
        for r in &rows {
            if let Some(e) = r.basalt.as_ref().and_then(|f| f.error.as_ref()) {
                ctx.progress.note(&format!("{}: {e}", r.key));
            }
        }
        report.rows = rows;
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the durations the CLI prints are read back, and other outputs are refused.
    #[test]
    fn printed_durations() {
        assert_eq!(
            printed_ms("created volume \"c\" (2G) as a clone of image x in 8.4 ms\n").unwrap(),
            8.4
        );
        assert!(printed_ms("imported image in 0.9 s").is_err());
        assert!(printed_ms("nothing").is_err());
        assert_eq!(
            export("nbd://127.0.0.1:5/bench", "vm1"),
            "nbd://127.0.0.1:5/vm1"
        );
    }
}
