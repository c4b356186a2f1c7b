//! `basalt volume ...`: volume management through the control API.

use crate::control::{call, Request};
use basalt_client::{parse_size, VolumeInfo};
use clap::Subcommand;
use std::net::SocketAddr;

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Create a volume; it is exported over NBD under its name at once.
    ///
    /// Example: basalt volume create db1 --size 10G
    Create {
        name: String,
        /// Size with an optional K, M, G or T suffix (binary units); a multiple of 4096.
        #[arg(long, short)]
        size: String,
    },
    /// List volumes.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one volume.
    Info {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Change a volume's size. Shrinking discards the data past the new end.
    ///
    /// Connected NBD clients keep the size they negotiated; reconnect to see the new one.
    Resize {
        name: String,
        /// New size, e.g. 20G.
        size: String,
    },
    /// Remove a volume and its data.
    Rm { name: String },
}

fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.1}{unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}")
}

fn print_info(v: &VolumeInfo) {
    println!("name:        {}", v.name);
    println!("id:          {}", v.id);
    println!("size:        {} ({} bytes)", human(v.size), v.size);
    println!("pool:        {}", v.pool);
    println!("object size: {}", human(v.object_size as u64));
    println!("created:     {} (unix seconds)", v.created);
}

pub async fn run(control: SocketAddr, command: VolumeCommand) -> anyhow::Result<()> {
    match command {
        VolumeCommand::Create { name, size } => {
            let size = parse_size(&size)?;
            let resp = call(control, &Request::Create { name, size }).await?;
            let v = resp.volume.expect("create returns the volume");
            println!("created volume \"{}\" ({})", v.name, human(v.size));
        }
        VolumeCommand::Ls { json } => {
            let resp = call(control, &Request::Ls).await?;
            let volumes = resp.volumes.unwrap_or_default();
            if json {
                println!("{}", serde_json::to_string_pretty(&volumes)?);
            } else {
                println!("{:<32} {:>10} {:>6} {:>8}", "NAME", "SIZE", "POOL", "ID");
                for v in volumes {
                    println!(
                        "{:<32} {:>10} {:>6} {:>8}",
                        v.name,
                        human(v.size),
                        v.pool,
                        v.id
                    );
                }
            }
        }
        VolumeCommand::Info { name, json } => {
            let resp = call(control, &Request::Info { name }).await?;
            let v = resp.volume.expect("info returns the volume");
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print_info(&v);
            }
        }
        VolumeCommand::Resize { name, size } => {
            let size = parse_size(&size)?;
            let resp = call(control, &Request::Resize { name, size }).await?;
            let v = resp.volume.expect("resize returns the volume");
            println!("resized volume \"{}\" to {}", v.name, human(v.size));
        }
        VolumeCommand::Rm { name } => {
            call(control, &Request::Rm { name: name.clone() }).await?;
            println!("removed volume \"{name}\"");
        }
    }
    Ok(())
}
