//! `basalt image ...`: import VM images (raw or qcow2) and manage them. The import itself
//! is `basalt_node::image_import`'s; here are its flags, its progress and its printing.

use crate::control::Request;
use crate::progress::{Meter, Unit};
use crate::volume_cmd::VolumeApi;
use anyhow::Context;
use basalt_bench::environment::utc_from_unix;
use basalt_client::{ImageInfo, ImageState};
use basalt_node::image_import::{import_into, ImportGateway, ImportSource};
use basalt_proto::size::human_bytes;
use clap::Subcommand;
use std::time::Instant;

#[derive(Subcommand, Debug)]
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

async fn import(
    target: &VolumeApi,
    file: String,
    name: String,
    format: Option<String>,
    size: Option<String>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let source = ImportSource::resolve(&file, format.as_deref(), size.as_deref()).await?;
    // With --meta this process serves the image to the copy tool itself.
    let private = match target.meta.meta {
        Some(_) => {
            Some(ImportGateway::start(crate::admin::open_cluster(&target.meta).await?).await?)
        }
        None => None,
    };
    let meter = Meter::new(&format!("importing image \"{name}\""), Unit::Bytes);
    let call = |req| target.call(req);
    let image = import_into(&source, &name, call, private, meter.reporter()).await?;
    if target.json {
        println!("{}", serde_json::to_string_pretty(&image)?);
        return Ok(());
    }
    let secs = started.elapsed().as_secs_f64();
    let moved = match source.data_bytes {
        Some(d) => format!(
            ", {} of data ({:.0} MiB/s)",
            human_bytes(d),
            d as f64 / (1 << 20) as f64 / secs.max(1e-6)
        ),
        None => String::new(),
    };
    println!(
        "imported image \"{}\" ({}, {}) in {secs:.1} s{moved}",
        image.name,
        human_bytes(image.size),
        source.format
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

pub async fn run(target: VolumeApi, command: ImageCommand) -> anyhow::Result<()> {
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
