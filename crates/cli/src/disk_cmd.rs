//! `basalt disk`: make a block device into an OSD's store (`prepare`) and list the devices
//! that hold one (`ls`). The checks and the store live in `basalt_store::prepare`; this file
//! parses and prints.

use anyhow::Context;
use basalt_proto::size::{human_bytes, parse_size};
use basalt_store::prepare::{self, DeviceStore, PrepareOptions};
use clap::Subcommand;
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
    /// List the block devices that hold a Basalt store: device, size, store id, object size,
    /// WAL size (--json for scripts).
    ///
    /// Devices are opened read-only and shared, so devices in use by an OSD are listed too.
    Ls,
}

/// Run a `basalt disk` command; `json` is the global --json flag.
pub fn run(command: DiskCommand, json: bool) -> anyhow::Result<()> {
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
                println!("{}", serde_json::to_string_pretty(&to_json(&made))?);
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
            if json {
                let list: Vec<_> = stores.iter().map(to_json).collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            print_table(&stores);
            Ok(())
        }
    }
}

/// The JSON form of a device's store (docs/cli.md, `disk ls --json`).
fn to_json(s: &DeviceStore) -> serde_json::Value {
    serde_json::json!({
        "device": s.device.display().to_string(),
        "size_bytes": s.size_bytes,
        "store_id": format!("{:016x}", s.store_id),
        "osd": null,
        "object_size_bytes": s.object_size_bytes,
        "wal_bytes": s.wal_bytes,
        "capacity_bytes": s.capacity_bytes,
        "slot_count": s.slot_count,
    })
}

fn print_table(stores: &[DeviceStore]) {
    if stores.is_empty() {
        println!("no block device holds a Basalt store (make one with `basalt disk prepare DEV`)");
        return;
    }
    println!(
        "{:<24} {:>10} {:<16} {:>4} {:>11} {:>10}",
        "DEVICE", "SIZE", "STORE", "OSD", "OBJECT SIZE", "WAL"
    );
    for s in stores {
        println!(
            "{:<24} {:>10} {:016x} {:>4} {:>11} {:>10}",
            s.device.display().to_string(),
            human_bytes(s.size_bytes),
            s.store_id,
            "-",
            human_bytes(s.object_size_bytes as u64),
            human_bytes(s.wal_bytes)
        );
    }
}
