//! `basalt objvol ...`: object-backed read-only volumes — an S3 bucket served as an EROFS
//! filesystem over NBD, its data fetched from the bucket as it is read.

use crate::control::Request;
use crate::progress::{Meter, Unit};
use crate::volume_cmd::{print_json_or, VolumeApi};
use anyhow::Context;
use basalt_bench::environment::utc_from_unix;
use basalt_objvol::{ObjvolInfo, ObjvolState};
use basalt_proto::size::human_bytes;
use clap::Subcommand;
use std::time::Instant;

#[derive(Subcommand, Debug)]
pub enum ObjvolCommand {
    /// Build an objvol from a bucket: list it, write an EROFS index of its keys (nothing
    /// of the objects is copied), store the index in the cluster.
    ///
    /// The volume is then exported over NBD, read-only, as `objvol:NAME`; mount it with
    /// the kernel's EROFS (`mount -t erofs -o ro`). Reading a file fetches that object's
    /// bytes; an object changed since the build reads as an I/O error until `refresh`.
    /// Keys that cannot be paths (`a//b`, components over 255 bytes, `.`/`..`) are
    /// skipped and reported.
    ///
    /// Examples:
    ///
    ///   basalt objvol create photos --bucket photos
    ///
    ///   basalt objvol create models --bucket ml --prefix models/v3/
    ///
    ///   basalt objvol create ext --bucket data --endpoint http://10.0.0.5:9000 --credentials ~/.minio-key
    ///
    ///   nbdfuse -r /mnt/nbd/photos nbd://localhost/objvol:photos &
    ///   losetup -r -f --show /mnt/nbd/photos/nbd && mount -t erofs -o ro /dev/loop0 /mnt/photos
    #[command(verbatim_doc_comment)]
    Create {
        /// Name of the objvol.
        name: String,
        /// The bucket.
        #[arg(long)]
        bucket: String,
        /// Only keys under this prefix, which becomes the filesystem's root.
        #[arg(long, default_value = "")]
        prefix: String,
        /// The S3 endpoint, http://HOST:PORT or https://HOST[:PORT] [default: this
        /// cluster's S3 gateway].
        #[arg(long)]
        endpoint: Option<String>,
        /// For an https endpoint: the CA certificate (PEM) its certificate must chain to,
        /// read by the hosts serving the objvol too [default: the system's roots].
        #[arg(long, value_name = "FILE")]
        ca_file: Option<String>,
        /// The region requests are signed for: an AWS bucket outside us-east-1, with its
        /// regional endpoint (https://s3.eu-west-1.amazonaws.com) [default: us-east-1].
        #[arg(long)]
        region: Option<String>,
        /// A file with the bucket's access key: AWS credentials format, or one line
        /// ACCESS:SECRET; the hosts serving the objvol read it too [default: this
        /// cluster's own S3 key].
        #[arg(long, value_name = "FILE")]
        credentials: Option<String>,
    },
    /// List objvols.
    Ls,
    /// Show one objvol, with the keys its build skipped.
    Info { name: String },
    /// Rebuild an objvol's index from its bucket as it is now (new, changed and removed
    /// objects). Clients connected to the old index get I/O errors and reconnect.
    Refresh { name: String },
    /// Remove an objvol and its index (the bucket is not touched). Also removes a build
    /// that was interrupted.
    Rm { name: String },
}

/// Progress of a build: objects listed (reported with total 0), then bytes of the index
/// stored.
fn build_progress(name: &str) -> impl Fn(u64, u64) + Send + Sync {
    let listing = Meter::new(
        &format!("listing the bucket of {name}"),
        Unit::Count("objects"),
    );
    let store = Meter::new(&format!("storing the index of {name}"), Unit::Bytes);
    let listed = std::sync::atomic::AtomicBool::new(false);
    move |done, total| {
        if total == 0 {
            listing.update(done, 0);
            return;
        }
        if !listed.swap(true, std::sync::atomic::Ordering::Relaxed) {
            listing.finish();
        }
        store.update(done, total);
    }
}

fn summary(o: &ObjvolInfo) -> String {
    let per_object = (o.index_bytes + o.extents_bytes) / o.files.max(1);
    format!(
        "{} files in {} directories, {} of data; index {} ({per_object} bytes per file)",
        o.files,
        o.directories,
        human_bytes(o.data_bytes),
        human_bytes(o.index_bytes + o.extents_bytes)
    )
}

fn source(o: &ObjvolInfo) -> String {
    format!("s3://{}/{}", o.source.bucket, o.source.prefix)
}

fn print_skipped(o: &ObjvolInfo) {
    if o.skipped_count == 0 {
        return;
    }
    println!(
        "skipped {} keys that cannot be paths (basalt objvol info {} lists them):",
        o.skipped_count, o.name
    );
    for (key, why) in o.skipped.iter().take(5) {
        println!("  {key:?}: {why}");
    }
}

fn print_info(o: &ObjvolInfo) {
    println!("name:        {}", o.name);
    println!("source:      {} at {}", source(o), o.source.endpoint);
    println!(
        "credentials: {}",
        o.source
            .credentials
            .as_deref()
            .unwrap_or("the cluster's own S3 key")
    );
    println!("export:      objvol:{} (NBD, read-only)", o.name);
    println!(
        "size:        {} ({} bytes)",
        human_bytes(o.size()),
        o.size()
    );
    println!("files:       {}", o.files);
    println!("directories: {}", o.directories);
    println!("data:        {}", human_bytes(o.data_bytes));
    println!(
        "index:       {} (EROFS metadata {}, extent map {}) in layer {:#x}",
        human_bytes(o.index_bytes + o.extents_bytes),
        human_bytes(o.index_bytes),
        human_bytes(o.extents_bytes),
        o.inode
    );
    println!(
        "built:       {} (listing {:.1} s, in all {:.1} s)",
        utc_from_unix(o.created),
        o.listing_ms as f64 / 1000.0,
        o.build_ms as f64 / 1000.0
    );
    println!("state:       {}", state(o));
    println!("skipped:     {} keys", o.skipped_count);
    for (key, why) in &o.skipped {
        println!("  {key:?}: {why}");
    }
    if o.skipped.len() < o.skipped_count as usize {
        println!(
            "  ... and {} more",
            o.skipped_count as usize - o.skipped.len()
        );
    }
}

fn state(o: &ObjvolInfo) -> &'static str {
    match o.state {
        ObjvolState::Building => "building (or interrupted: basalt objvol rm)",
        ObjvolState::Ready => "ready",
    }
}

pub async fn run(target: VolumeApi, command: ObjvolCommand) -> anyhow::Result<()> {
    let target = &target;
    match command {
        ObjvolCommand::Create {
            name,
            bucket,
            prefix,
            endpoint,
            credentials,
            ca_file,
            region,
        } => {
            if target.meta.meta.is_some() && (endpoint.is_none() || credentials.is_none()) {
                anyhow::bail!(
                    "with --meta, give the bucket's --endpoint and --credentials (a file the \
                     hosts serving the objvol can read too)"
                );
            }
            let req = Request::ObjvolCreate {
                name: name.clone(),
                bucket,
                prefix,
                endpoint,
                credentials: absolute(credentials, "credentials file")?,
                ca_file: absolute(ca_file, "CA file")?,
                region,
            };
            create(target, &name, req).await
        }
        ObjvolCommand::Refresh { name } => refresh(target, name).await,
        ObjvolCommand::Ls => list(target).await,
        ObjvolCommand::Info { name } => {
            let resp = target.call(Request::ObjvolInfo { name }).await?;
            let o = resp.objvol.context("objvol_info returns the objvol")?;
            print_json_or(target.json, &o, print_info)
        }
        ObjvolCommand::Rm { name } => {
            target
                .call(Request::ObjvolRm { name: name.clone() })
                .await?;
            if target.json {
                println!("{}", serde_json::json!({ "removed": name }));
            } else {
                println!("removed objvol \"{name}\" (the bucket is untouched)");
            }
            Ok(())
        }
    }
}

/// `path` made absolute (the hosts serving the objvol read it too), or a precise error
/// naming `what`.
fn absolute(path: Option<String>, what: &str) -> anyhow::Result<Option<String>> {
    path.map(|p| {
        std::fs::canonicalize(&p)
            .with_context(|| format!("{what} {p}"))
            .map(|p| p.display().to_string())
    })
    .transpose()
}

/// Build objvol `name` (`req`), with progress, and say what it holds.
async fn create(target: &VolumeApi, name: &str, req: Request) -> anyhow::Result<()> {
    let started = Instant::now();
    let resp = target.call_with_progress(req, build_progress(name)).await?;
    let o = resp.objvol.context("objvol_create returns the objvol")?;
    if target.json {
        println!("{}", serde_json::to_string_pretty(&o)?);
        return Ok(());
    }
    println!(
        "built objvol \"{}\" from {} in {:.1} s: {}",
        o.name,
        source(&o),
        started.elapsed().as_secs_f64(),
        summary(&o)
    );
    print_skipped(&o);
    println!(
        "export: objvol:{} (NBD, read-only; mount -t erofs -o ro)",
        o.name
    );
    Ok(())
}

/// Rebuild objvol `name`'s index, with progress.
async fn refresh(target: &VolumeApi, name: String) -> anyhow::Result<()> {
    let started = Instant::now();
    let resp = target
        .call_with_progress(
            Request::ObjvolRefresh { name: name.clone() },
            build_progress(&name),
        )
        .await?;
    let o = resp.objvol.context("objvol_refresh returns the objvol")?;
    if target.json {
        println!("{}", serde_json::to_string_pretty(&o)?);
        return Ok(());
    }
    println!(
        "refreshed objvol \"{}\" in {:.1} s: {}",
        o.name,
        started.elapsed().as_secs_f64(),
        summary(&o)
    );
    print_skipped(&o);
    Ok(())
}

/// List objvols.
async fn list(target: &VolumeApi) -> anyhow::Result<()> {
    let resp = target.call(Request::ObjvolLs).await?;
    let all = resp.objvols.unwrap_or_default();
    if target.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    println!(
        "{:<20} {:>10} {:>10} {:>10}  {:<20} {:<30} STATE",
        "NAME", "FILES", "DATA", "INDEX", "BUILT", "SOURCE"
    );
    for o in &all {
        println!(
            "{:<20} {:>10} {:>10} {:>10}  {:<20} {:<30} {}",
            o.name,
            o.files,
            human_bytes(o.data_bytes),
            human_bytes(o.index_bytes + o.extents_bytes),
            utc_from_unix(o.created),
            source(o),
            state(o)
        );
    }
    Ok(())
}
