//! Giving up the unfound stripes of an erasure-coded PG (docs/design.md, "Unfound
//! stripes"): the PG's primary rewrites each at a new version with the newest contents that
//! still decode, a batch per request, and says what became of each.

use crate::cluster::Cluster;
use crate::error::ClientError;
use basalt_proto::unfound::{GiveUpReply, GivenUp};
use basalt_proto::{Header, ObjectId, Opcode, PgId, Status};

/// Most MARK_UNFOUND_LOST requests one give-up sends (each gives up a batch; the loop
/// stops earlier when a batch makes no progress).
const GIVE_UP_ROUNDS_MAX: usize = 1 << 16;

/// What giving up a PG's unfound stripes did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GiveUpReport {
    /// Every stripe given up (or found again meanwhile), in the order the primary did them.
    pub stripes: Vec<GivenUp>,
    /// Stripes still unfound at the end (their rewrite failed: the PG changed meanwhile, or
    /// a member did not answer); running the command again retries them.
    pub still_unfound: u32,
}

impl Cluster {
    /// Give up every unfound stripe of the erasure-coded PG `pg` at its primary, batch by
    /// batch. Refused (Invalid) for a PG of a replicated pool or one with no unfound stripes.
    pub async fn mark_unfound_lost(&self, pg: PgId) -> Result<GiveUpReport, ClientError> {
        let map = self.map();
        let pool = map
            .pools
            .get(&pg.pool)
            .ok_or_else(|| ClientError::NotFound {
                what: format!("pool {} of pg {pg}", pg.pool),
            })?;
        if pool.ec.is_none() || pg.index >= pool.pg_count {
            return Err(ClientError::Invalid {
                reason: format!(
                    "pg {pg} is not a PG of an erasure-coded pool (pool \"{}\"{}): only \
                     erasure-coded stripes can be unfound",
                    pool.name,
                    if pool.ec.is_none() {
                        " is replicated"
                    } else {
                        " has fewer PGs"
                    }
                ),
            });
        }
        let mut report = GiveUpReport::default();
        for round in 0..GIVE_UP_ROUNDS_MAX {
            let mut h = Header::request(Opcode::MarkUnfoundLost, 0, ObjectId::new(0, 0));
            h.pg = pg;
            let reply = match self.object_request(pg, h, bytes::Bytes::new()).await {
                Ok(r) => r,
                Err(ClientError::Status {
                    status: Status::Invalid,
                }) if round == 0 => {
                    return Err(ClientError::Invalid {
                        reason: format!(
                            "pg {pg} has no unfound stripes: nothing to give up (`basalt \
                             status` lists the PGs that have some)"
                        ),
                    })
                }
                // Emptied by the previous round (or by another give-up meanwhile).
                Err(ClientError::Status {
                    status: Status::Invalid,
                }) => {
                    report.still_unfound = 0;
                    return Ok(report);
                }
                Err(e) => return Err(e),
            };
            let batch = GiveUpReply::decode(&reply.payload).map_err(|e| ClientError::BadReply {
                reason: e.to_string(),
            })?;
            let progress = !batch.stripes.is_empty();
            report.stripes.extend(batch.stripes);
            report.still_unfound = batch.still_unfound;
            if batch.still_unfound == 0 || !progress {
                return Ok(report);
            }
        }
        Ok(report)
    }

    /// A name for every layer of every volume: the head's inode names the volume,
    /// a snapshot's `VOLUME@SNAPSHOT` (to say what a given-up stripe belonged to).
    pub async fn layer_names(
        &self,
    ) -> Result<std::collections::HashMap<basalt_proto::InodeId, String>, ClientError> {
        let mut names = std::collections::HashMap::new();
        for v in self.list_volumes().await? {
            for s in &v.snapshots {
                names.insert(s.inode, format!("{}@{}", v.name, s.name));
            }
            names.insert(v.id, format!("volume {}", v.name));
        }
        Ok(names)
    }
}
