//! Scrubbing: asking each PG's primary to compare and repair every copy (or chunk) of its
//! objects, a batch at a time (docs/design.md, "Scrub").

use crate::cluster::Cluster;
use crate::error::ClientError;
use basalt_proto::{Header, ObjectId, Opcode, PgId, PoolId, Status};
use serde::{Deserialize, Serialize};

/// What a scrub found, summed over the PGs it covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    pub pgs: u64,
    /// Objects (stripes of erasure-coded pools) checked.
    pub objects: u64,
    /// Objects with a copy or chunk that was missing, damaged or different.
    pub inconsistent: u64,
    /// Of those, repaired.
    pub repaired: u64,
}

/// Most batches one PG's scrub may take (each covers SCRUB_BATCH_OBJECTS objects).
const SCRUB_BATCHES_MAX: u64 = 1 << 26;

impl Cluster {
    /// Scrub every PG of `pool` (every pool when None); `progress(done, total)` counts PGs.
    pub async fn scrub(
        &self,
        pool: Option<PoolId>,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<ScrubReport, ClientError> {
        let map = self.map();
        let pgs: Vec<PgId> = map
            .all_pgs()
            .filter(|pg| pool.is_none_or(|p| p == pg.pool))
            .collect();
        let mut report = ScrubReport::default();
        for (done, &pg) in pgs.iter().enumerate() {
            progress(done as u64, pgs.len() as u64);
            let r = self.scrub_pg(pg).await?;
            report.pgs += 1;
            report.objects += r.objects;
            report.inconsistent += r.inconsistent;
            report.repaired += r.repaired;
        }
        progress(pgs.len() as u64, pgs.len() as u64);
        Ok(report)
    }

    /// Scrub one PG, batch by batch, at its primary.
    pub async fn scrub_pg(&self, pg: PgId) -> Result<ScrubReport, ClientError> {
        let mut report = ScrubReport::default();
        let mut cursor = ObjectId::new(0, 0);
        for _ in 0..SCRUB_BATCHES_MAX {
            let mut h = Header::request(Opcode::Scrub, 0, cursor);
            h.pg = pg;
            let reply = self.object_request(pg, h, bytes::Bytes::new()).await?;
            if reply.header.status != Status::Ok {
                return Err(ClientError::Status {
                    status: reply.header.status,
                });
            }
            let word = |i: usize| {
                reply
                    .payload
                    .get(i * 8..i * 8 + 8)
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            };
            let (Some(checked), Some(inconsistent), Some(repaired), Some(done)) =
                (word(0), word(1), word(2), word(3))
            else {
                return Err(ClientError::BadReply {
                    reason: format!("SCRUB answered {} bytes", reply.payload.len()),
                });
            };
            report.objects += checked;
            report.inconsistent += inconsistent;
            report.repaired += repaired;
            if done == 1 {
                return Ok(report);
            }
            let (Some(inode), Some(index)) = (word(4), word(5)) else {
                return Err(ClientError::BadReply {
                    reason: "SCRUB reply without a cursor".into(),
                });
            };
            let next = ObjectId::new(inode, index);
            if next <= cursor {
                return Err(ClientError::BadReply {
                    reason: format!("SCRUB cursor went back from {cursor} to {next}"),
                });
            }
            cursor = next;
        }
        Ok(report)
    }
}
