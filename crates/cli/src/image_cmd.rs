//! `basalt image ...`: import VM images (raw or qcow2) and manage them.
//!
//! An import streams the file into the image's layer over NBD: `qemu-img convert` for
//! files (it reads qcow2 and raw, skips unallocated and zero ranges, and checks the file
//! as it goes) and `nbdcopy` for raw data on stdin. Against `basalt up` the data goes to
//! its NBD socket; with --meta this process serves the image on a private socket.

use crate::control::Request;
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

/// Run the copy into `uri`; stdout/stderr pass through (progress when a terminal).
async fn copy_in(file: &str, format: &str, uri: &str) -> anyhow::Result<()> {
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut cmd = if file == "-" {
        let mut cmd = tokio::process::Command::new("nbdcopy");
        cmd.args(["--target-is-zero", "--flush"]);
        if progress {
            cmd.arg("--progress");
        }
        cmd.args(["-", uri]).stdin(Stdio::inherit());
        cmd
    } else {
        let mut cmd = tokio::process::Command::new("qemu-img");
        // -W -m 16: 16 requests in flight, written out of order (the target is a fresh
        // image, flushed before it is used): 1.5x the default's throughput here.
        cmd.args([
            "convert",
            "-n",
            "--target-is-zero",
            "-W",
            "-m",
            "16",
            "-f",
            format,
            "-O",
            "raw",
        ]);
        if progress {
            cmd.arg("-p");
        }
        cmd.arg(file).arg(uri).stdin(Stdio::null());
        cmd
    };
    let tool = if file == "-" { "nbdcopy" } else { "qemu-img" };
    let out = cmd
        .stdout(if progress {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .output()
        .await
        .with_context(|| format!("run {tool}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{tool} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
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
    if let Err(e) = copy_in(&file, &format, &uri).await {
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
