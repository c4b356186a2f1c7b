//! The local store's RAM per stored object copy against its goal (≤ 64 B, docs/design.md,
//! "Memory"): `basalt bench store-memory` run as a child process (so nothing the bench
//! holds moves the figure) on a sparse store in the scratch directory, with room for and
//! then holding a million objects (20,000 with `--smoke`; `--quick` leaves the section out
//! unless `--sections` names it: writing a million objects and removing their store takes
//! minutes on a virtual disk). See [`crate::store_memory`].

use super::{Ctx, Scale, Section};
use crate::results::{Figure, Row, SectionLayout, SectionReport, SectionStatus};
use crate::store_memory::StoreMemory;
use anyhow::Context;
use std::process::Command;
use std::time::Duration;

/// Section id.
pub const ID: &str = "memory";
/// The goal: bytes of RAM per stored object copy...
pub const GOAL_BYTES_PER_OBJECT: f64 = 64.0;
/// ...with this many objects in the store.
pub const GOAL_OBJECTS: u64 = 1_000_000;
/// Bound on the child's run: a million small writes and flushes took 2 minutes (release
/// build) on this project's virtual disk, and removing their store file over 7 more.
const CHILD_TIMEOUT: Duration = Duration::from_secs(1800);
/// Planned seconds per object: writing it, and removing the store's extent for it.
const PLANNED_S_PER_OBJECT: f64 = 120e-6 + 450e-6;

/// The section.
pub struct MemorySection {
    /// Picks the object count.
    pub scale: Scale,
}

impl MemorySection {
    /// Objects the measured store holds.
    pub fn objects(&self) -> u64 {
        self.scale.pick(20_000, GOAL_OBJECTS, GOAL_OBJECTS)
    }

    /// The command that measures it, as the report shows it.
    fn command(&self) -> String {
        format!(
            "basalt bench store-memory --dir SCRATCH/memory --objects {}",
            self.objects()
        )
    }
}

impl Section for MemorySection {
    fn id(&self) -> &'static str {
        ID
    }

    fn plan(&self, _ctx: &Ctx) -> Vec<f64> {
        vec![2.0 + self.objects() as f64 * PLANNED_S_PER_OBJECT]
    }

    fn run(&self, ctx: &mut Ctx) -> SectionReport {
        let plan = self.plan(ctx);
        ctx.progress.step(
            &format!(
                "memory: RAM per object of a store holding {} objects",
                self.objects()
            ),
            plan[0],
        );
        let measured = run_child(ctx, self.objects());
        if let Err(e) = &measured {
            ctx.progress.note(&format!("failed: {e:#}"));
        }
        self.report(measured, &self.command())
    }
}

/// Run `basalt bench store-memory` (this executable) in `ctx`'s scratch directory.
fn run_child(ctx: &Ctx, objects: u64) -> anyhow::Result<StoreMemory> {
    if crate::interrupt::requested() {
        anyhow::bail!(crate::interrupt::MESSAGE);
    }
    let dir = ctx.work_dir.join("memory");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let _cleanup = crate::suite::RemoveOnDrop(dir.clone());
    let exe = std::env::current_exe().context("find the basalt executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("bench")
        .arg("store-memory")
        .arg("--dir")
        .arg(&dir)
        .arg("--objects")
        .arg(objects.to_string());
    let stdout = super::run_ok(&mut cmd, CHILD_TIMEOUT)?;
    serde_json::from_str(stdout.trim()).context("parse the output of basalt bench store-memory")
}

impl MemorySection {
    /// The section's table from a measurement, or from why there is none.
    pub fn report(&self, measured: anyhow::Result<StoreMemory>, command: &str) -> SectionReport {
        let figure = |value: anyhow::Result<f64>| match value {
            Ok(v) => Figure {
                value: Some(v),
                command: Some(command.to_string()),
                ..Figure::default()
            },
            Err(e) => Figure::failed(format!("{e:#}"), Some(command.to_string()), None),
        };
        let get = |f: fn(&StoreMemory) -> f64| match &measured {
            Ok(m) => Ok(f(m)),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        };
        let n = self.objects();
        let goal = Figure {
            value: Some(GOAL_BYTES_PER_OBJECT),
            command: Some("goal: docs/design.md, \"Memory (≤ 64 B per object copy)\"".into()),
            ..Figure::default()
        };
        let rows = vec![
            Row {
                key: "rss_per_object_bytes".into(),
                label: format!("RAM per stored object copy ({n} objects)"),
                unit: "B".into(),
                higher_is_better: false,
                baseline: Some(goal),
                basalt: Some(figure(get(StoreMemory::per_object_bytes))),
            },
            Row {
                key: "peak_per_object_bytes".into(),
                label: format!(
                    "peak RAM over the writes, per object (checkpoints included, {n} objects)"
                ),
                unit: "B".into(),
                higher_is_better: false,
                baseline: None,
                basalt: Some(figure(get(StoreMemory::peak_per_object_bytes))),
            },
            Row {
                key: "open_mib".into(),
                label: "RAM of the empty store at open (its slots' tables, engine, buffers)".into(),
                unit: "MiB".into(),
                higher_is_better: false,
                baseline: None,
                basalt: Some(figure(get(|m| mib(m.open_bytes())))),
            },
        ];
        let mut notes = Vec::new();
        if n < GOAL_OBJECTS {
            notes.push(format!(
                "The goal holds at {GOAL_OBJECTS} objects. With {n}, the store's bounded parts \
                 (crcs changed since the last checkpoint, up to 4 MiB; WAL buffers; the overlay's \
                 buffer pool) weigh more per object: this figure means little."
            ));
        }
        if let Ok(m) = &measured {
            notes.push(format!(
                "The store had {} slots of {} KiB and ran `{}`; writing and flushing the {} \
                 objects took {:.1} s, removing the store file afterwards {:.1} s; the \
                 process held {:.1} MiB before the open, {:.1} MiB after it and {:.1} MiB \
                 after the writes.",
                m.slots,
                m.object_size_bytes >> 10,
                m.io_mode,
                m.objects,
                m.write_seconds,
                m.remove_seconds,
                mib(m.rss_before_open_bytes),
                mib(m.rss_open_bytes),
                mib(m.rss_after_bytes)
            ));
        }
        SectionReport {
            id: ID.into(),
            title: "Store memory per object".into(),
            intro: format!(
                "RAM the local store holds per stored object copy, against the goal of at \
                 most {GOAL_BYTES_PER_OBJECT:.0} B. A child process (`basalt bench \
                 store-memory`) creates a sparse store of 128 KiB objects in the scratch \
                 directory with room for {n} objects, opens it as an OSD does (direct I/O \
                 through io_uring where the filesystem allows it), reads its resident set \
                 (`/proc/self/statm`), writes {n} objects of one 4 KiB block each through \
                 the store's API, flushing whenever 1 MiB is unflushed, and reads the \
                 resident set again: the figure is the rise divided by the objects. A \
                 sample is read back and compared."
            ),
            baseline_name: "Goal".into(),
            status: SectionStatus::Measured,
            layout: SectionLayout::Comparison,
            notes,
            rows,
        }
    }
}

/// Bytes in MiB.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured() -> StoreMemory {
        StoreMemory {
            objects: 1_000_000,
            slots: 1_000_100,
            object_size_bytes: 128 << 10,
            io_mode: "direct uring".into(),
            rss_before_open_bytes: 10 << 20,
            rss_open_bytes: 12 << 20,
            rss_after_bytes: (12 << 20) + 50_000_000,
            peak_rss_bytes: (12 << 20) + 90_000_000,
            write_seconds: 20.0,
            remove_seconds: 3.0,
        }
    }

    #[test]
    fn the_table_holds_the_figure_beside_the_goal() {
        // Goal: the report's row is (after − open) / objects beside the 64 B goal, the peak
        // and the open cost follow, and a failed child is a failed figure, not a missing row.
        let section = MemorySection {
            scale: Scale::Quick,
        };
        let r = section.report(Ok(measured()), "cmd");
        assert_eq!(r.rows[0].basalt.as_ref().and_then(|f| f.value), Some(50.0));
        assert_eq!(
            r.rows[0].baseline.as_ref().and_then(|f| f.value),
            Some(64.0)
        );
        assert_eq!(r.rows[1].basalt.as_ref().and_then(|f| f.value), Some(90.0));
        assert_eq!(r.rows[2].basalt.as_ref().and_then(|f| f.value), Some(2.0));
        let failed = section.report(Err(anyhow::anyhow!("boom")), "cmd");
        assert_eq!(failed.rows.len(), 3);
        assert_eq!(
            failed.rows[0].basalt.as_ref().and_then(|f| f.error.clone()),
            Some("boom".into())
        );
        assert_eq!(section.objects(), 1_000_000);
        assert_eq!(
            MemorySection {
                scale: Scale::Smoke
            }
            .objects(),
            20_000
        );
    }
}
