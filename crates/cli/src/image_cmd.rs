//! `basalt image ...`: import VM images (raw or qcow2) and manage them.
//!
//! An import streams the file into the image's layer over NBD: `qemu-img convert` for
//! files (it reads qcow2 and raw, skips unallocated and zero ranges, and checks the file
//! as it goes) and `nbdcopy` for raw data on stdin. Against `basalt up` the data goes to
//! its NBD socket; with --meta this process serves the image on a private socket.

use crate::control::Request;
use crate::progress::{Meter, Unit};
use crate::volume_cmd::Target;
use anyhow::Context;
use basalt_bench::environment::utc_from_unix;
use basalt_client::{ImageInfo, ImageState};
use basalt_nbd::VolumeExports;
use basalt_proto::size::{human_bytes, parse_size};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

#[derive(Subcommand)]
pub enum ImageCommand {
    /// Import a raw or qcow2 file (or raw data from stdin, FILE = -) as image NAME.
    ///
    /// Unallocated and zero ranges are skipped, so a sparse 20 GiB image holding 1 GiB of
    /// data moves 1 GiB. Volumes are then made from it in O(1).
    ///
    /// Examples:
    ///
    ///   basalt image import debian-12.qcow2 debian-12
    ///
    ///   basalt volume create vm1-disk --from-image debian-12
    ///
    ///   xzcat disk.raw.xz | basalt image import - disk --size 20G
    #[command(verbatim_doc_comment)]
    Import {
        /// The file, or - for raw data on stdin (then --size is needed).
        file: String,
        /// Name of the image.
        name: String,
        /// Format of the file: raw or qcow2 [default: what qemu-img detects].
        #[arg(long)]
        format: Option<String>,
        /// Size of the image (stdin only; rounded up to 4 KiB).
        #[arg(long)]
        size: Option<String>,
    },
    /// List images.
    Ls,
    /// Show one image.
    Info { name: String },
    /// Remove an image and its data; refused while volumes are clones of it. Also removes
    /// an import that failed or was interrupted.
    Rm { name: String },
}

/// What qemu-img says of a file.
struct Probe {
    format: String,
    virtual_size: u64,
    /// Bytes of data qemu-img maps as allocated and not zero (what an import moves).
    data_bytes: u64,
}

async fn probe(file: &Path, format: Option<&str>) -> anyhow::Result<Probe> {
    let mut cmd = tokio::process::Command::new("qemu-img");
    cmd.args(["info", "--output=json"]);
    if let Some(f) = format {
        cmd.args(["-f", f]);
    }
    let out = cmd
        .arg(file)
        .output()
        .await
        .context("run qemu-img (install qemu-utils)")?;
    if !out.status.success() {
        anyhow::bail!(
            "{} is not a readable image: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let info: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parse qemu-img info")?;
    let format = info["format"].as_str().unwrap_or("").to_string();
    if format != "raw" && format != "qcow2" {
        anyhow::bail!(
            "{} is a {format} image; Basalt imports raw and qcow2 (convert it with qemu-img \
             convert -O qcow2 first)",
            file.display()
        );
    }
    if format == "qcow2" {
        // qemu-img reads clusters past a truncated file's end as zeros; only a check of the
        // metadata notices. Exit 0: clean; 3: leaked clusters only (harmless for reading).
        let out = tokio::process::Command::new("qemu-img")
            .args(["check", "-f", "qcow2"])
            .arg(file)
            .output()
            .await
            .context("run qemu-img check")?;
        if !matches!(out.status.code(), Some(0) | Some(3)) {
            let errors: Vec<String> = String::from_utf8_lossy(&out.stderr)
                .lines()
                .chain(String::from_utf8_lossy(&out.stdout).lines())
                .filter(|l| l.contains("ERROR") || l.contains("rror"))
                .take(3)
                .map(str::to_string)
                .collect();
            anyhow::bail!(
                "{} is a damaged qcow2 image (qemu-img check: {}); nothing was imported",
                file.display(),
                errors.join("; ")
            );
        }
    }
    let virtual_size = info["virtual-size"]
        .as_u64()
        .context("qemu-img info gave no virtual size")?;
    let out = tokio::process::Command::new("qemu-img")
        .args(["map", "--output=json", "-f", &format])
        .arg(file)
        .output()
        .await
        .context("run qemu-img map")?;
    if !out.status.success() {
        anyhow::bail!(
            "{} cannot be read: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let map: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parse qemu-img map")?;
    let data_bytes = map
        .as_array()
        .map(|extents| {
            extents
                .iter()
                .filter(|e| e["data"].as_bool() == Some(true) && e["zero"].as_bool() != Some(true))
                .filter_map(|e| e["length"].as_u64())
                .sum()
        })
        .unwrap_or(0);
    Ok(Probe {
        format,
        virtual_size,
        data_bytes,
    })
}

/// A private NBD gateway of this process on a unix socket (imports with --meta).
struct PrivateGateway {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl PrivateGateway {
    async fn start(cluster: Arc<basalt_client::Cluster>) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("basalt-import")
            .tempdir()
            .context("make a directory for the import socket")?;
        let socket = dir.path().join("nbd.sock");
        let listener = tokio::net::UnixListener::bind(&socket)
            .with_context(|| format!("listen for NBD on {}", socket.display()))?;
        let server = basalt_nbd::Server::new(Arc::new(VolumeExports::new(cluster, None)));
        let task = tokio::spawn(server.serve_unix(listener));
        Ok(Self {
            _dir: dir,
            socket,
            task,
        })
    }
}

impl Drop for PrivateGateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Run the copy into `uri`, with progress on stderr (see [`crate::progress`]): a file's
/// from qemu-img's percentages of its `total_bytes` of data, stdin's by counting the bytes
/// passed on to nbdcopy.
async fn copy_in(
    file: &str,
    format: &str,
    uri: &str,
    meter: Meter,
    total_bytes: u64,
) -> anyhow::Result<()> {
    let from_stdin = file == "-";
    let mut cmd = if from_stdin {
        let mut cmd = tokio::process::Command::new("nbdcopy");
        cmd.args(["--target-is-zero", "--flush", "-", uri])
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        cmd
    } else {
        let mut cmd = tokio::process::Command::new("qemu-img");
        // -W -m 16: 16 requests in flight, written out of order (the target is a fresh
        // image, flushed before it is used): 1.5x the default's throughput here. -p: its
        // percentages on stdout, read by `qemu_img_progress`.
        cmd.args([
            "convert",
            "-n",
            "--target-is-zero",
            "-W",
            "-m",
            "16",
            "-p",
            "-f",
            format,
            "-O",
            "raw",
        ]);
        cmd.arg(file)
            .arg(uri)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        cmd
    };
    let tool = if from_stdin { "nbdcopy" } else { "qemu-img" };
    let mut child = cmd
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("run {tool}"))?;
    // stdin is fed from a thread of its own, not a blocking task of the runtime: when the
    // tool fails while stdin stays open and silent, the command still ends.
    let (fed_tx, fed_rx) = tokio::sync::oneshot::channel();
    match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), _) => {
            let fd = stdin.into_owned_fd().context("take nbdcopy's stdin")?;
            std::thread::spawn(move || fed_tx.send(feed_stdin(fd, meter, total_bytes)));
        }
        (None, Some(stdout)) => {
            tokio::spawn(async move {
                // Progress that cannot be read is no failure of the import.
                let _ = qemu_img_progress(stdout, meter, total_bytes).await;
                let _ = fed_tx.send(Ok(()));
            });
        }
        (None, None) => anyhow::bail!("{tool} was started without its pipes"),
    };
    let out = child
        .wait_with_output()
        .await
        .with_context(|| format!("run {tool}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{tool} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // A read error on stdin closes nbdcopy's input early, which it takes for the end.
    fed_rx
        .await
        .context("the progress task ended without a word")?
        .with_context(|| format!("pass the input on to {tool}"))
}

/// Copy this process's stdin into `to` (nbdcopy's), counting the bytes on `meter`. Blocking:
/// runs on a blocking thread.
fn feed_stdin(to: std::os::fd::OwnedFd, meter: Meter, total_bytes: u64) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut to = std::fs::File::from(to);
    let mut from = std::io::stdin().lock();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("read stdin"),
        };
        to.write_all(&buf[..n]).context("write to nbdcopy")?;
        done += n as u64;
        meter.update(done, total_bytes);
    }
    // Dropping `to` closes nbdcopy's stdin: its end of input.
    Ok(())
}

/// Read qemu-img -p's `(12.50/100%)` updates from `out` into `meter`, as that share of
/// `total_bytes`.
async fn qemu_img_progress(
    mut out: tokio::process::ChildStdout,
    meter: Meter,
    total_bytes: u64,
) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut pending = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let n = out
            .read(&mut buf)
            .await
            .context("read qemu-img's progress")?;
        if n == 0 {
            return Ok(());
        }
        pending.extend_from_slice(&buf[..n]);
        // Updates end in '\r'; the part after the last one is not complete yet.
        let Some(end) = pending.iter().rposition(|&b| b == b'\r' || b == b'\n') else {
            continue;
        };
        let text = String::from_utf8_lossy(&pending[..end]).into_owned();
        pending.drain(..=end);
        let last = text
            .split(['\r', '\n'])
            .filter_map(parse_percent)
            .next_back();
        if let (Some(percent), true) = (last, total_bytes > 0) {
            let done = (total_bytes as f64 * percent / 100.0).round() as u64;
            meter.update(done.min(total_bytes), total_bytes);
        }
    }
}

/// The percentage of one qemu-img -p update, `    (12.50/100%)`.
fn parse_percent(update: &str) -> Option<f64> {
    let p: f64 = update
        .trim()
        .strip_prefix('(')?
        .strip_suffix("/100%)")?
        .parse()
        .ok()?;
    (0.0..=100.0).contains(&p).then_some(p)
}

async fn import(
    target: &Target,
    file: String,
    name: String,
    format: Option<String>,
    size: Option<String>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let (format, size, data_bytes, source) = if file == "-" {
        if format.as_deref().is_some_and(|f| f != "raw") {
            anyhow::bail!("stdin is read as raw data; convert other formats from a file");
        }
        let size = size.context("importing from stdin needs --size (e.g. --size 20G)")?;
        let size = parse_size(&size)?;
        (
            String::from("raw"),
            size,
            None,
            String::from("raw from stdin"),
        )
    } else {
        if size.is_some() {
            anyhow::bail!("--size is for stdin; a file's image has the file's virtual size");
        }
        let p = probe(Path::new(&file), format.as_deref()).await?;
        let source = format!("{} file {}", p.format, file);
        (p.format, p.virtual_size, Some(p.data_bytes), source)
    };
    let size = size.div_ceil(4096) * 4096;
    // With --meta this process serves the image to the copy tool itself.
    let private = match target.meta.meta {
        Some(_) => {
            Some(PrivateGateway::start(crate::admin::open_cluster(&target.meta).await?).await?)
        }
        None => None,
    };
    let resp = target
        .call(Request::ImageBegin {
            name: name.clone(),
            size,
            source,
        })
        .await?;
    let uri = match (&private, resp.nbd_uri) {
        (Some(gw), _) => format!("nbd+unix:///image:{name}?socket={}", gw.socket.display()),
        (None, Some(uri)) => uri,
        (None, None) => anyhow::bail!("the cluster gave no address to write the image to"),
    };
    let meter = Meter::new(&format!("importing image \"{name}\""), Unit::Bytes);
    if let Err(e) = copy_in(&file, &format, &uri, meter, data_bytes.unwrap_or(size)).await {
        // Nothing half-imported stays behind.
        let cleanup = target.call(Request::ImageRm { name: name.clone() }).await;
        return Err(match cleanup {
            Ok(_) => e.context(format!(
                "import of image \"{name}\" failed; nothing was kept"
            )),
            Err(c) => e.context(format!(
                "import of image \"{name}\" failed, and removing what was written failed too \
                 ({c:#}): run `basalt image rm {name}`"
            )),
        });
    }
    drop(private);
    let resp = target
        .call(Request::ImageFinish { name: name.clone() })
        .await?;
    let image = resp.image.context("image_finish returns the image")?;
    if target.json {
        println!("{}", serde_json::to_string_pretty(&image)?);
        return Ok(());
    }
    let secs = started.elapsed().as_secs_f64();
    let moved = match data_bytes {
        Some(d) => format!(
            ", {} of data ({:.0} MiB/s)",
            human_bytes(d),
            d as f64 / (1 << 20) as f64 / secs.max(1e-6)
        ),
        None => String::new(),
    };
    println!(
        "imported image \"{}\" ({}, {format}) in {secs:.1} s{moved}",
        image.name,
        human_bytes(image.size)
    );
    Ok(())
}

fn print_image(i: &ImageInfo, pool: &str) {
    println!("name:        {}", i.name);
    println!("layer:       {:#x}", i.inode);
    println!("size:        {} ({} bytes)", human_bytes(i.size), i.size);
    println!("pool:        {pool} (id {})", i.pool);
    println!("object size: {}", human_bytes(i.object_size as u64));
    println!("created:     {} (UTC)", utc_from_unix(i.created));
    println!("source:      {}", i.source);
    println!("state:       {}", state(i));
}

fn state(i: &ImageInfo) -> &'static str {
    match (i.removing, i.state) {
        (true, _) => "being removed",
        (false, ImageState::Importing) => "importing (or interrupted: basalt image rm)",
        (false, ImageState::Ready) => "ready",
    }
}

pub async fn run(target: Target, command: ImageCommand) -> anyhow::Result<()> {
    match command {
        ImageCommand::Import {
            file,
            name,
            format,
            size,
        } => import(&target, file, name, format, size).await?,
        ImageCommand::Ls => {
            let json = target.json;
            let resp = target.call(Request::ImageLs).await?;
            let images = resp.images.unwrap_or_default();
            let bytes = resp.image_bytes.unwrap_or_default();
            if json {
                let rows: Vec<serde_json::Value> = images
                    .iter()
                    .enumerate()
                    .map(|(n, i)| {
                        let mut row = serde_json::to_value(i).expect("image serialises");
                        row["used_bytes"] = serde_json::json!(bytes.get(n));
                        row
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:<32} {:>10} {:>10}  {:<20}  STATE",
                    "NAME", "SIZE", "USED", "CREATED (UTC)"
                );
                for (n, i) in images.iter().enumerate() {
                    println!(
                        "{:<32} {:>10} {:>10}  {:<20}  {}",
                        i.name,
                        human_bytes(i.size),
                        bytes.get(n).map(|b| human_bytes(*b)).unwrap_or_default(),
                        utc_from_unix(i.created),
                        state(i)
                    );
                }
            }
        }
        ImageCommand::Info { name } => {
            let json = target.json;
            let resp = target.call(Request::ImageInfo { name }).await?;
            let image = resp.image.context("image_info returns the image")?;
            let pools = target.pool_names().await?;
            let pool = pools.get(&image.pool).cloned().unwrap_or_default();
            crate::volume_cmd::print_json_or(json, &image, |i| print_image(i, &pool))?;
        }
        ImageCommand::Rm { name } => {
            target.call(Request::ImageRm { name: name.clone() }).await?;
            if target.json {
                println!("{}", serde_json::json!({ "removed": name }));
            } else {
                println!("removed image \"{name}\"");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_qemu_img_percentages() {
        // Goal: qemu-img -p's updates give their percentage; anything else gives none.
        assert_eq!(parse_percent("    (12.50/100%)"), Some(12.5));
        assert_eq!(parse_percent("(100.00/100%)"), Some(100.0));
        for bad in ["", "(x/100%)", "(12.5/50%)", "(150.00/100%)", "12.50/100%)"] {
            assert_eq!(parse_percent(bad), None, "{bad:?}");
        }
    }
}
