//! `basalt disk`: make a block device into an OSD's store (`prepare`) and list the devices
//! that hold one (`ls`). The checks and the store live in `basalt_store::prepare`; this file
//! parses and prints.

use crate::daemons::MetaArgs;
use anyhow::Context;
use basalt_proto::size::{human_bytes, parse_size};
use basalt_store::prepare::{self, DeviceStore, PrepareOptions};
use clap::Subcommand;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DiskCommand {
    /// Make a block device into a Basalt store, for `basalt osd --device DEV`.
    ///
    /// The store takes the whole device (no partition needed). Before writing anything,
    /// prepare refuses, naming the device and the reason, when the device:
    ///   - is not a block device;
    ///   - is mounted, or one of its partitions is (/proc/self/mountinfo);
    ///   - is held by device-mapper, LVM, md RAID or bcache (/sys/class/block/DEV/holders),
    ///     or opened exclusively by another process (O_EXCL refused);
    ///   - has logical sectors over 4096 bytes, or is smaller than 32 MiB;
    ///   - holds a partition table (MBR, GPT);
    ///   - holds a filesystem, swap, LVM2, LUKS or bcache signature (ext2/3/4, XFS, btrfs);
    ///   - holds a Basalt store already.
    ///
    /// --force overrides only the partition-table and signature checks: it destroys what
    /// they found. A Basalt store is never overwritten: once its OSD is removed, zero its
    /// first 4 KiB yourself (`dd if=/dev/zero of=DEV bs=4096 count=1 oflag=direct`).
    ///
    /// Examples:
    ///   basalt disk prepare /dev/nvme1n1
    ///   basalt disk prepare /dev/sdb --force --object-size 1M
    #[command(verbatim_doc_comment)]
    Prepare {
        /// The block device, e.g. /dev/nvme1n1 (or /dev/disk/by-id/...).
        device: PathBuf,
        /// Overwrite a partition table or a filesystem/swap/LVM/LUKS/bcache signature.
        #[arg(long)]
        force: bool,
        /// Object size of the store; must equal the object size of the pools the OSD will
        /// serve (a power of two from 4K to 4M).
        #[arg(long, default_value = "128K")]
        object_size: String,
        /// WAL size, e.g. 256M [default: an eighth of the device, 4 MiB to 256 MiB].
        #[arg(long)]
        wal_size: Option<String>,
    },
    /// List the block devices that hold a Basalt store: device, size, store id, its OSD,
    /// object size, WAL size (--json for scripts).
    ///
    /// Devices are opened read-only and shared, so devices in use by an OSD are listed too.
    /// The OSD column needs the cluster metadata (--meta URL): an OSD records its store's id
    /// when it starts. Without --meta it shows `?`; `-` is a store no OSD has started on.
    ///
    /// Examples:
    ///   basalt disk ls
    ///   basalt --meta etcd://10.0.0.1:2379 disk ls --json
    #[command(verbatim_doc_comment)]
    Ls,
}

/// Whose store each device holds, as far as known.
enum Owners {
    /// No cluster metadata to ask (no --meta).
    Unknown,
    /// OSD by store id, from the OSDs' records.
    Known(HashMap<String, u32>),
}

impl Owners {
    /// The OSD of `store`: Some(Some(id)), Some(None) when no OSD has it, None unknown.
    fn of(&self, store: &DeviceStore) -> Option<Option<u32>> {
        match self {
            Owners::Unknown => None,
            Owners::Known(map) => Some(map.get(&format!("{:016x}", store.store_id)).copied()),
        }
    }
}

/// Run a `basalt disk` command; `json` is the global --json flag, `meta` says how to reach
/// the cluster metadata (`disk ls` names the devices' OSDs with it).
pub async fn run(command: DiskCommand, meta: &MetaArgs, json: bool) -> anyhow::Result<()> {
    match command {
        DiskCommand::Prepare {
            device,
            force,
            object_size,
            wal_size,
        } => {
            let opts = PrepareOptions {
                force,
                object_size_bytes: u32::try_from(parse_size(&object_size)?)
                    .context("--object-size is too large")?,
                wal_bytes: wal_size
                    .as_deref()
                    .map(parse_size)
                    .transpose()?
                    .unwrap_or(0),
            };
            // The store's errors name the device and the reason already.
            let made = prepare::prepare(&device, &opts)?;
            if json {
                let owners = Owners::Known(HashMap::new());
                println!(
                    "{}",
                    serde_json::to_string_pretty(&to_json(&made, &owners))?
                );
            } else {
                println!(
                    "prepared {}: a Basalt store of {} (store id {:016x}, object size {}, \
                     WAL {}, {} objects at most)\nstart its OSD with: basalt osd --device {} \
                     --data DIR ...",
                    made.device.display(),
                    human_bytes(made.capacity_bytes),
                    made.store_id,
                    human_bytes(made.object_size_bytes as u64),
                    human_bytes(made.wal_bytes),
                    made.slot_count,
                    made.device.display()
                );
            }
            Ok(())
        }
        DiskCommand::Ls => {
            let stores = prepare::list();
            let owners = match meta.meta {
                None => Owners::Unknown,
                Some(_) => {
                    let meta = meta.connect().await?;
                    let map = basalt_client::osds::osds_by_store_id(meta.as_ref())
                        .await
                        .context("read the OSDs' records")?;
                    Owners::Known(map)
                }
            };
            if json {
                let list: Vec<_> = stores.iter().map(|s| to_json(s, &owners)).collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            print_table(&stores, &owners);
            Ok(())
        }
    }
}

/// The JSON form of a device's store (docs/cli.md, `disk ls --json`); "osd" is null when no
/// OSD has it or it is not known (then "osd_known" is false).
fn to_json(s: &DeviceStore, owners: &Owners) -> serde_json::Value {
    let osd = owners.of(s);
    serde_json::json!({
        "device": s.device.display().to_string(),
        "size_bytes": s.size_bytes,
        "store_id": format!("{:016x}", s.store_id),
        "osd": osd.flatten(),
        "osd_known": osd.is_some(),
        "object_size_bytes": s.object_size_bytes,
        "wal_bytes": s.wal_bytes,
        "capacity_bytes": s.capacity_bytes,
        "slot_count": s.slot_count,
    })
}

fn print_table(stores: &[DeviceStore], owners: &Owners) {
    if stores.is_empty() {
        println!("no block device holds a Basalt store (make one with `basalt disk prepare DEV`)");
        return;
    }
    println!(
        "{:<24} {:>10} {:<16} {:>7} {:>11} {:>10}",
        "DEVICE", "SIZE", "STORE", "OSD", "OBJECT SIZE", "WAL"
    );
    for s in stores {
        let osd = match owners.of(s) {
            None => "?".to_string(),
            Some(None) => "-".to_string(),
            Some(Some(id)) => format!("osd.{id}"),
        };
        println!(
            "{:<24} {:>10} {:016x} {:>7} {:>11} {:>10}",
            s.device.display().to_string(),
            human_bytes(s.size_bytes),
            s.store_id,
            osd,
            human_bytes(s.object_size_bytes as u64),
            human_bytes(s.wal_bytes)
        );
    }
    if matches!(owners, Owners::Unknown) {
        println!("(OSD ?: give --meta URL, or set BASALT_META, to name the OSD of each store)");
    }
}
