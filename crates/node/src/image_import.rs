//! `basalt image import`: a VM image file (raw or qcow2), or raw data on stdin, streamed
//! into a new image of the cluster.
//!
//! The file is checked and measured first ([`ImportSource::resolve`]: `qemu-img info`,
//! `check`, `map`); then [`import_into`] begins the image through the control requests,
//! streams the data into its layer over NBD (`qemu-img convert` for files: it reads qcow2
//! and raw, skips unallocated and zero ranges, and checks the file as it goes; `nbdcopy`
//! for stdin), and finishes it, or removes what was written when the copy fails. Against
//! `basalt up` the data goes to its NBD socket; with `--meta` the tool serves the image on
//! a private socket ([`ImportGateway`]).

use anyhow::Context;
use basalt_client::{Cluster, ImageInfo};
use basalt_control::{Request, Response};
use basalt_nbd::VolumeExports;
use basalt_proto::size::parse_size;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

/// What an import reads, checked and measured.
#[derive(Clone, Debug)]
pub struct ImportSource {
    /// The file, or "-" for raw data on stdin.
    pub file: String,
    /// "raw" or "qcow2".
    pub format: String,
    /// The image's size, rounded up to 4 KiB.
    pub size: u64,
    /// Bytes of data the file holds (allocated and not zero: what the import moves);
    /// None for stdin.
    pub data_bytes: Option<u64>,
    /// What the image records as its source ("qcow2 file disk.qcow2", "raw from stdin").
    pub description: String,
}

impl ImportSource {
    /// Check `file` (with `format`, None: detected) or stdin ("-", raw, of `size`, e.g.
    /// "20G") and measure what it holds.
    pub async fn resolve(
        file: &str,
        format: Option<&str>,
        size: Option<&str>,
    ) -> anyhow::Result<Self> {
        let (format, size, data_bytes, description) = if file == "-" {
            if format.is_some_and(|f| f != "raw") {
                anyhow::bail!("stdin is read as raw data; convert other formats from a file");
            }
            let size = size.context("importing from stdin needs --size (e.g. --size 20G)")?;
            let size = parse_size(size)?;
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
            let p = probe(Path::new(file), format).await?;
            let description = format!("{} file {}", p.format, file);
            (p.format, p.virtual_size, Some(p.data_bytes), description)
        };
        Ok(Self {
            file: file.to_string(),
            format,
            size: size.div_ceil(4096) * 4096,
            data_bytes,
            description,
        })
    }
}

/// What qemu-img says of a file.
struct ImageProbe {
    format: String,
    virtual_size: u64,
    /// Bytes of data qemu-img maps as allocated and not zero (what an import moves).
    data_bytes: u64,
}

/// `qemu-img info` of `file`: a raw or qcow2 image (a qcow2 one also checked), and how much
/// data it holds.
async fn probe(file: &Path, format: Option<&str>) -> anyhow::Result<ImageProbe> {
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
        check_qcow2(file).await?;
    }
    let virtual_size = info["virtual-size"]
        .as_u64()
        .context("qemu-img info gave no virtual size")?;
    Ok(ImageProbe {
        data_bytes: data_bytes(file, &format).await?,
        format,
        virtual_size,
    })
}

/// Refuse a damaged qcow2 file: qemu-img reads clusters past a truncated file's end as
/// zeros; only a check of the metadata notices. Exit 0: clean; 3: leaked clusters only
/// (harmless for reading).
async fn check_qcow2(file: &Path) -> anyhow::Result<()> {
    let out = tokio::process::Command::new("qemu-img")
        .args(["check", "-f", "qcow2"])
        .arg(file)
        .output()
        .await
        .context("run qemu-img check")?;
    if matches!(out.status.code(), Some(0) | Some(3)) {
        return Ok(());
    }
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
    )
}

/// Bytes `qemu-img map` shows as data and not zero in `file`.
async fn data_bytes(file: &Path, format: &str) -> anyhow::Result<u64> {
    let out = tokio::process::Command::new("qemu-img")
        .args(["map", "--output=json", "-f", format])
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
    Ok(map
        .as_array()
        .map(|extents| {
            extents
                .iter()
                .filter(|e| e["data"].as_bool() == Some(true) && e["zero"].as_bool() != Some(true))
                .filter_map(|e| e["length"].as_u64())
                .sum()
        })
        .unwrap_or(0))
}

/// A private NBD gateway of this process on a unix socket (imports with --meta), serving
/// every volume and image of `cluster`; it stops when dropped.
pub struct ImportGateway {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl ImportGateway {
    /// Serve `cluster` on a socket in a new temporary directory.
    pub async fn start(cluster: Arc<Cluster>) -> anyhow::Result<Self> {
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

impl Drop for ImportGateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Import `source` as image `name`: begin it with `call` (the control API, or its handlers
/// run here), copy the data in through `private` (with --meta) or the NBD address the
/// cluster gives, reporting `progress(done, total)` in bytes, and finish it. A failed copy
/// removes what was written. Returns the finished image.
pub async fn import_into<C, F>(
    source: &ImportSource,
    name: &str,
    call: C,
    private: Option<ImportGateway>,
    progress: impl Fn(u64, u64) + Send + Sync + 'static,
) -> anyhow::Result<ImageInfo>
where
    C: Fn(Request) -> F,
    F: Future<Output = anyhow::Result<Response>>,
{
    let resp = call(Request::ImageBegin {
        name: name.to_string(),
        size: source.size,
        source: source.description.clone(),
    })
    .await?;
    let uri = match (&private, resp.nbd_uri) {
        (Some(gw), _) => format!("nbd+unix:///image:{name}?socket={}", gw.socket.display()),
        (None, Some(uri)) => uri,
        (None, None) => anyhow::bail!("the cluster gave no address to write the image to"),
    };
    let total = source.data_bytes.unwrap_or(source.size);
    if let Err(e) = copy_in(&source.file, &source.format, &uri, progress, total).await {
        // Nothing half-imported stays behind.
        let cleanup = call(Request::ImageRm {
            name: name.to_string(),
        })
        .await;
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
    let resp = call(Request::ImageFinish {
        name: name.to_string(),
    })
    .await?;
    resp.image.context("image_finish returns the image")
}

/// Run the copy into `uri`, reporting `progress`: a file's from qemu-img's percentages of
/// its `total_bytes` of data, stdin's by counting the bytes passed on to nbdcopy.
async fn copy_in(
    file: &str,
    format: &str,
    uri: &str,
    progress: impl Fn(u64, u64) + Send + Sync + 'static,
    total_bytes: u64,
) -> anyhow::Result<()> {
    let from_stdin = file == "-";
    let (mut cmd, tool) = if from_stdin {
        (nbdcopy_from_stdin(uri), "nbdcopy")
    } else {
        (qemu_img_convert(file, format, uri), "qemu-img")
    };
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
            std::thread::spawn(move || fed_tx.send(feed_stdin(fd, progress, total_bytes)));
        }
        (None, Some(stdout)) => {
            tokio::spawn(async move {
                // Progress that cannot be read is no failure of the import.
                let _ = qemu_img_progress(stdout, progress, total_bytes).await;
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

/// nbdcopy writing its stdin to `uri`.
fn nbdcopy_from_stdin(uri: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("nbdcopy");
    cmd.args(["--target-is-zero", "--flush", "-", uri])
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    cmd
}

/// qemu-img converting `file` (of `format`) to raw at `uri`, its progress on stdout.
fn qemu_img_convert(file: &str, format: &str, uri: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("qemu-img");
    // -W -m 16: 16 requests in flight, written out of order (the target is a fresh image,
    // flushed before it is used): 1.5x the default's throughput here. -p: its percentages
    // on stdout, read by `qemu_img_progress`.
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
}

/// Copy this process's stdin into `to` (nbdcopy's), reporting the bytes passed on.
/// Blocking: runs on a thread of its own.
fn feed_stdin(
    to: std::os::fd::OwnedFd,
    progress: impl Fn(u64, u64),
    total_bytes: u64,
) -> anyhow::Result<()> {
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
        progress(done, total_bytes);
    }
    // Dropping `to` closes nbdcopy's stdin: its end of input.
    Ok(())
}

/// Read qemu-img -p's `(12.50/100%)` updates from `out` into `progress`, as that share of
/// `total_bytes`.
async fn qemu_img_progress(
    mut out: tokio::process::ChildStdout,
    progress: impl Fn(u64, u64),
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
            progress(done.min(total_bytes), total_bytes);
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
