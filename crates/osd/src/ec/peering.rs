//! Peering an erasure-coded PG: list every position (sealing it), settle each stripe with
//! a stash by [`basalt_ec::decide::decide`], and record which positions are behind.

use super::chunk::{partial_header, promote_chunk, put_chunk};
use super::EcPg;
use crate::daemon::Osd;
use crate::error::PgError;
use crate::recovery::{list_remote, read_record};
use basalt_ec::decide::{decide, PartialStash, Plan, PositionState};
use basalt_meta::schema::{pg_key, CompleteCopy, PgRecord};
use basalt_placement::{ClusterMap, NO_OSD};
use basalt_proto::{ObjectId, OsdId, Status, Version};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What peering found that the activated PG must know.
pub(crate) struct Peered {
    /// Positions (bit per position) whose holder lacks some stripe's version.
    pub behind: u32,
    /// Stripes whose newest committed version fewer than k listed positions hold.
    pub unfound: BTreeSet<ObjectId>,
    /// The OSDs those stripes wait for, each with the run that did not answer (None: down).
    pub waiting: Vec<(OsdId, Option<u64>)>,
}

/// Peer an erasure-coded PG as its new primary: list every live position (sealing them),
/// settle every stripe with a stash (promote, roll back, or drop), note the positions that
/// lack chunks for background recovery and the stripes that are unfound, record and
/// activate.
pub(crate) async fn peer(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    acting: &[(OsdId, u64)],
    generation: u64,
) -> Result<Peered, PgError> {
    let pg = ctx.pg;
    let (previous, expected_rev) = previous_sources(osd, ctx).await?;
    // Promises to an old primary the map shows down, and to members this interval drops,
    // bind this copy too (see `crate::heartbeat`).
    let dropped = crate::heartbeat::dropped_by_seal(osd, pg, ctx.interval, Some(acting));
    crate::heartbeat::wait_to_seal(osd, &dropped, ctx.interval).await;
    osd.pgs.with(pg, |e| e.sealed = e.sealed.max(ctx.interval));
    let map = osd.map();
    let survey = survey(osd, &map, ctx, acting, &previous).await?;
    previous.check_reached(ctx, &survey)?;
    let Survey {
        mut seen,
        found_elsewhere,
        listed,
    } = survey;
    let placement = map.placement(ctx.pg).map(<[_]>::to_vec).unwrap_or_default();
    let seek = Unlisted {
        placement: &placement,
        sources: &previous.sources,
        listed: &listed,
    };
    let mut settled = Settled::default();
    for (stripe, state) in seen.iter_mut() {
        read_partial_bases(osd, ctx, *stripe, state).await;
        settle_stripe(osd, ctx, *stripe, state, &seek, &mut settled).await?;
    }
    let Settled {
        behind,
        rebuilds,
        unfound,
        promoted,
        dropped,
        unfound_stripes,
        waiting,
    } = settled;
    // Positions are bits of a u32: the code is at most 20 wide (basalt_ec::MAX_K + MAX_M).
    assert!(
        u64::from(behind) >> ctx.positions.len() == 0,
        "osd.{} pg {pg}: positions behind {behind:#b} outside a {}-wide code",
        osd.id,
        ctx.positions.len()
    );
    if promoted + dropped + rebuilds + unfound > 0 {
        tracing::info!(
            osd = osd.id, %pg, interval = ctx.interval, promoted, dropped, rebuilds, unfound,
            "EC peering settled the stripes of cut writes"
        );
    }
    if unfound > 0 {
        let names: Vec<String> = waiting.iter().map(|o| format!("osd.{o}")).collect();
        tracing::warn!(
            osd = osd.id, %pg, interval = ctx.interval, unfound, waiting = ?names,
            "stripes unfound: their newest writes are on fewer than k of the OSDs that \
             answered; their I/O waits for the OSDs named (`basalt pg mark-unfound-lost {pg}` \
             gives them up)"
        );
    }
    if !crate::peering::is_current(osd, pg, generation) {
        return Err(PgError::TakenOver);
    }
    let sources = rebuild_sources(ctx, behind, &previous.sources, &found_elsewhere);
    let complete = ctx
        .live()
        .filter(|(pos, _)| behind & (1 << pos) == 0)
        .map(|(_, peer)| CompleteCopy {
            osd: peer,
            incarnation: incarnation_of(&map, acting, peer),
        })
        .collect();
    let rec = PgRecord {
        epoch: ctx.interval,
        primary: osd.id,
        acting: acting.iter().map(|a| a.0).collect(),
        complete,
        degraded_objects: rebuilds,
        holders: Vec::new(),
        unfound_objects: unfound,
        unfound_waiting: waiting.iter().copied().collect(),
        ec_sources: sources.clone(),
        fence: 0,
        inherited: 0,
    };
    let value = serde_json::to_vec(&rec).expect("PG record serialises");
    match osd
        .meta
        .compare_and_swap(&pg_key(pg.pool, pg.index), expected_rev, value)
        .await
    {
        Ok(Some(_)) => {}
        Ok(None) => return Err(PgError::RecordChanged),
        Err(e) => return Err(PgError::Meta(e)),
    }
    osd.pgs.with(pg, |e| {
        if e.generation == generation {
            e.ec_sources = sources;
        }
    });
    let waiting = waiting
        .into_iter()
        .map(|o| {
            let run = map.osds.get(&o).filter(|i| i.up).map(|i| i.incarnation);
            (o, run)
        })
        .collect();
    Ok(Peered {
        behind,
        unfound: unfound_stripes,
        waiting,
    })
}

/// Where chunks of a position may be that peering did not list: the OSD the map places
/// there (down: a hole) and the position's recorded earlier holders.
struct Unlisted<'a> {
    placement: &'a [OsdId],
    sources: &'a [Vec<OsdId>],
    listed: &'a BTreeSet<OsdId>,
}

impl Unlisted<'_> {
    /// The OSDs that may hold chunks of position `pos` and did not answer the survey.
    fn at(&self, pos: usize) -> impl Iterator<Item = OsdId> + '_ {
        let placed = self.placement.get(pos).copied().filter(|&o| o != NO_OSD);
        let earlier = self.sources.get(pos).into_iter().flatten().copied();
        placed
            .into_iter()
            .chain(earlier)
            .filter(|o| !self.listed.contains(o))
    }
}

/// What the last activated interval left that peering must take into account.
struct Previous {
    /// Per position, the OSDs that held it in earlier intervals and were not rebuilt from
    /// yet (a placement change moved it).
    sources: Vec<Vec<OsdId>>,
    /// The last activated interval and its members: every write acknowledged in it is
    /// stashed on all of them (on nothing else) before its acknowledgement.
    last: Option<(u32, Vec<OsdId>)>,
}

impl Previous {
    /// Refuse to settle unless at least k members of the last activated interval answered
    /// the survey. Fewer could hide a write acknowledged there: its stashes would show on
    /// fewer than k positions and be rolled back as a cut write (with min_size = k, a
    /// member back from a long outage beside one of the interval's k members). The PG
    /// stays incomplete until enough of them are back.
    fn check_reached(&self, ctx: &EcPg, survey: &Survey) -> Result<(), PgError> {
        let Some((interval, members)) = &self.last else {
            return Ok(());
        };
        let reached = members.iter().filter(|o| survey.listed.contains(o)).count();
        // An interval that activated with fewer than k live members took no write.
        let k = ctx.scheme.k().min(members.len());
        if reached < k {
            return Err(PgError::EcIncomplete {
                interval: *interval,
                members: members.clone(),
                reached,
                k,
            });
        }
        Ok(())
    }
}

/// Step 1 of [`peer`]: the PG's record (refused when a later interval wrote it): where each
/// position's chunks may be besides its holder, and the last activated interval's members.
/// Returns those and the record's revision.
async fn previous_sources(osd: &Arc<Osd>, ctx: &EcPg) -> Result<(Previous, u64), PgError> {
    let record = read_record(osd, ctx.pg).await?;
    let expected_rev = record.as_ref().map(|r| r.1).unwrap_or(0);
    if let Some((rec, _)) = &record {
        if rec.epoch > ctx.interval {
            return Err(PgError::RecordAhead {
                recorded: rec.epoch,
            });
        }
    }
    let width = ctx.positions.len();
    let sources = record
        .as_ref()
        .map(|(r, _)| r.ec_sources.clone())
        .filter(|s| s.len() == width)
        .unwrap_or_else(|| vec![Vec::new(); width]);
    let last = record.map(|(r, _)| {
        let members = r.acting.into_iter().filter(|&o| o != NO_OSD).collect();
        (r.epoch, members)
    });
    Ok((Previous { sources, last }, expected_rev))
}

/// The incarnation `peer` must be: as named in the acting set, else as in `map` (0: any).
fn incarnation_of(map: &ClusterMap, acting: &[(OsdId, u64)], peer: OsdId) -> u64 {
    acting
        .iter()
        .find(|a| a.0 == peer)
        .map(|a| a.1)
        .or_else(|| map.osds.get(&peer).map(|o| o.incarnation))
        .unwrap_or(0)
}

/// Every chunk peering found of the PG.
struct Survey {
    /// Per stripe, what each position holds at its holder and elsewhere.
    seen: BTreeMap<ObjectId, Vec<Seen>>,
    /// Per position, the OSDs other than its holder found holding chunks of it.
    found_elsewhere: Vec<Vec<OsdId>>,
    /// Every OSD that answered its LIST.
    listed: std::collections::BTreeSet<OsdId>,
}

/// Step 2 of [`peer`]: list every member (each must answer: the LIST seals the PG there),
/// every earlier holder and member of the last activated interval that is up (possible
/// sources), and gather what each holds of every stripe.
async fn survey(
    osd: &Arc<Osd>,
    map: &ClusterMap,
    ctx: &EcPg,
    acting: &[(OsdId, u64)],
    previous: &Previous,
) -> Result<Survey, PgError> {
    let width = ctx.positions.len();
    let members: std::collections::BTreeSet<OsdId> = ctx.live().map(|(_, o)| o).collect();
    let mut to_list = members.clone();
    let last_members = previous.last.iter().flat_map(|(_, m)| m);
    to_list.extend(
        previous
            .sources
            .iter()
            .flatten()
            .chain(last_members)
            .filter(|o| map.osds.get(o).is_some_and(|i| i.up)),
    );
    let mut survey = Survey {
        seen: BTreeMap::new(),
        found_elsewhere: vec![Vec::new(); width],
        listed: Default::default(),
    };
    for &peer in &to_list {
        let listed = match list_at(osd, map, ctx, peer, incarnation_of(map, acting, peer)).await {
            Ok(l) => l,
            // A member must answer; an earlier holder is only a possible source.
            Err(e) if members.contains(&peer) => return Err(e),
            Err(e) => {
                tracing::warn!(osd = osd.id, pg = %ctx.pg, peer, "earlier chunk holder did not list: {e}");
                continue;
            }
        };
        survey.listed.insert(peer);
        for (key, version) in listed {
            survey.note(ctx, peer, key, version);
        }
    }
    Ok(survey)
}

impl Survey {
    /// `peer` listed the chunk key `key` at `version`.
    fn note(&mut self, ctx: &EcPg, peer: OsdId, key: ObjectId, version: Version) {
        let width = ctx.positions.len();
        let Some((p, stash)) = key.chunk_position() else {
            return;
        };
        if p >= width {
            return;
        }
        let slot = self
            .seen
            .entry(key.stripe())
            .or_insert_with(|| vec![Seen::default(); width]);
        if key.is_partial_stash() {
            if ctx.positions[p] != peer && !self.found_elsewhere[p].contains(&peer) {
                self.found_elsewhere[p].push(peer);
            }
            slot[p].partials.push((peer, version, None));
            return;
        }
        let (committed, stashed) = if ctx.positions[p] == peer {
            let h = &mut slot[p].holder;
            (&mut h.0, &mut h.1)
        } else {
            if !self.found_elsewhere[p].contains(&peer) {
                self.found_elsewhere[p].push(peer);
            }
            let list = &mut slot[p].elsewhere;
            let i = match list.iter().position(|e| e.0 == peer) {
                Some(i) => i,
                None => {
                    list.push((peer, None, None));
                    list.len() - 1
                }
            };
            let e = &mut list[i];
            (&mut e.1, &mut e.2)
        };
        let field = if stash { stashed } else { committed };
        *field = (*field).max(Some(version));
    }
}

/// What peering did to the PG's stripes, for its log line and record.
#[derive(Default)]
struct Settled {
    /// Positions (bit per position) whose holder lacks some stripe's version: rebuilt in
    /// the background.
    behind: u32,
    rebuilds: u64,
    unfound: u64,
    promoted: u64,
    dropped: u64,
    /// The unfound stripes.
    unfound_stripes: BTreeSet<ObjectId>,
    /// The OSDs they wait for ([`Unlisted`] at the positions lacking their version).
    waiting: BTreeSet<OsdId>,
}

/// Step 3 of [`peer`], for one stripe: decide its version from every chunk found for each
/// position, wherever it is, then settle the chunks left on earlier holders and make each
/// holder end at that version (or note it behind).
async fn settle_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    state: &[Seen],
    seek: &Unlisted<'_>,
    settled: &mut Settled,
) -> Result<(), PgError> {
    let merged = merged_state(ctx, state);
    let (plan, ranked) = plan_of(ctx.scheme.k(), &merged);
    if let Some(v) = plan.unfound {
        settled.unfound += 1;
        settled.unfound_stripes.insert(stripe);
        let mut waits = Vec::new();
        for pos in basalt_ec::unfound::missing(&ranked, v) {
            waits.extend(seek.at(pos));
        }
        settled.waiting.extend(waits.iter().copied());
        // A holder without the newest committed chunk must not serve the stripe: its fast
        // read would answer older bytes than an acknowledged write (seen: a position back
        // from a long outage, while the OSD with that write's other chunk was down). Behind,
        // and the stripe's I/O waits while it is unfound; a later interval with enough
        // chunks rebuilds it.
        let newest = version_of(&merged, v);
        for (pos, _) in ctx.live() {
            if state[pos].holder.0 != Some(newest) {
                settled.behind |= 1 << pos;
            }
        }
        tracing::debug!(osd = osd.id, pg = %ctx.pg, %stripe, version = %version_of(&merged, v), ?waits, "stripe unfound: its newest write is on fewer than k positions that answered");
        return Ok(());
    }
    let target = plan.target.map(|t| version_of(&merged, t));
    // A committed chunk means its write was acknowledged (promotes start once every stash
    // is durable): the version the stripe settles at never undoes one.
    let newest_committed = merged.iter().flatten().filter_map(|(c, _, _)| *c).max();
    assert!(
        newest_committed <= target,
        "osd.{} pg {} stripe {stripe}: peering settles at {target:?} below the committed \
         {newest_committed:?}",
        osd.id,
        ctx.pg
    );
    settle_elsewhere(osd, ctx, stripe, state, target).await;
    settle_holders(osd, ctx, stripe, state, target, settled).await
}

/// What peering knows of one position of a stripe: the newest committed and stashed
/// versions found at its holder or elsewhere, and the newest partial stash (version,
/// base) that sits on an OSD whose committed chunk is at its base.
type Merged = (Option<Version>, Option<Version>, Option<(Version, Version)>);

/// The decision's input for one stripe, per position (None: a hole with no chunk found).
fn merged_state(ctx: &EcPg, state: &[Seen]) -> Vec<Option<Merged>> {
    state
        .iter()
        .enumerate()
        .map(|(p, s)| {
            let live = ctx.positions[p] != NO_OSD;
            let committed = s.elsewhere.iter().map(|e| e.1).max().flatten();
            let stashed = s.elsewhere.iter().map(|e| e.2).max().flatten();
            let partial = s
                .partials
                .iter()
                .filter_map(|&(at, v, base)| {
                    let base = base?;
                    (s.committed_at(ctx.positions[p], at) == Some(base)).then_some((v, base))
                })
                .max();
            (live || !s.elsewhere.is_empty() || !s.partials.is_empty()).then_some((
                s.holder.0.max(committed),
                s.holder.1.max(stashed),
                partial,
            ))
        })
        .collect()
}

/// Read the base of every partial stash peering found of `stripe` (its header; one 4 KiB
/// read per stash of a cut write). A stash whose header cannot be read keeps no base: it
/// counts for nothing and is dropped.
async fn read_partial_bases(osd: &Arc<Osd>, ctx: &EcPg, stripe: ObjectId, state: &mut [Seen]) {
    for (pos, seen) in state.iter_mut().enumerate() {
        for (at, version, base) in seen.partials.iter_mut() {
            let header = partial_header(osd, ctx, *at, stripe, pos).await;
            *base = header.map(|h| h.base);
            if header.is_none() {
                tracing::warn!(osd = osd.id, pg = %ctx.pg, %stripe, pos, at, %version, "partial stash without a readable header: dropped");
            }
        }
    }
}

/// Chunks left on earlier holders are sources for the rebuild: a stash of the target there
/// is promoted (recovery reads committed chunks), any other stash dropped. Failures are
/// logged only: these OSDs are not members.
async fn settle_elsewhere(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    state: &[Seen],
    target: Option<Version>,
) {
    for (pos, seen_at) in state.iter().enumerate() {
        for &(other, c, st) in &seen_at.elsewhere {
            let result = match (st, target) {
                (Some(v), Some(t)) if v == t && c != Some(t) => {
                    promote_chunk(osd, ctx, other, stripe, pos, t, false).await
                }
                (Some(v), _) => {
                    put_chunk(osd, ctx, other, stripe.chunk(pos, true), v, None, false).await
                }
                _ => Ok(()),
            };
            if let Err(status) = result {
                tracing::warn!(osd = osd.id, pg = %ctx.pg, %stripe, pos, other, "settling a chunk left on an earlier holder: {status:?}");
            }
        }
        let holder = ctx.positions[pos];
        for &(other, v, base) in seen_at.partials.iter().filter(|p| p.0 != holder) {
            let merges =
                target == Some(v) && base.is_some() && seen_at.committed_at(holder, other) == base;
            let result = match merges {
                true => promote_chunk(osd, ctx, other, stripe, pos, v, true).await,
                false => {
                    put_chunk(osd, ctx, other, stripe.partial_stash(pos), v, None, false).await
                }
            };
            if let Err(status) = result {
                tracing::warn!(osd = osd.id, pg = %ctx.pg, %stripe, pos, other, "settling a partial stash left on an earlier holder: {status:?}");
            }
        }
    }
}

/// What each holder does to end at the target (the chunks found elsewhere are only
/// sources: a holder lacking the target is rebuilt from them in the background).
async fn settle_holders(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    state: &[Seen],
    target: Option<Version>,
    settled: &mut Settled,
) -> Result<(), PgError> {
    for (pos, peer) in ctx.live() {
        let (hc, hs) = state[pos].holder;
        // The holder's partial stash (version, base: None when unreadable).
        let hp = state[pos]
            .partials
            .iter()
            .find(|p| p.0 == peer)
            .map(|p| (p.1, p.2));
        let mut merged = false;
        match target {
            Some(t) => {
                if hc != Some(t) {
                    if hs == Some(t) {
                        promote_chunk(osd, ctx, peer, stripe, pos, t, false)
                            .await
                            .map_err(|status| peer_status("PROMOTE", peer, status))?;
                        settled.promoted += 1;
                        drop_partial(osd, ctx, peer, stripe, pos, hp, settled).await?;
                        continue;
                    }
                    if hc.is_some() && hp == Some((t, hc)) {
                        promote_chunk(osd, ctx, peer, stripe, pos, t, true)
                            .await
                            .map_err(|status| peer_status("MERGE", peer, status))?;
                        settled.promoted += 1;
                        merged = true;
                    } else {
                        settled.behind |= 1 << pos;
                        settled.rebuilds += 1;
                    }
                }
                if let Some(v) = hs.filter(|_| hs != Some(t) || hc == Some(t)) {
                    put_chunk(osd, ctx, peer, stripe.chunk(pos, true), v, None, false)
                        .await
                        .map_err(|status| peer_status("DROP", peer, status))?;
                    settled.dropped += 1;
                }
                if !merged {
                    drop_partial(osd, ctx, peer, stripe, pos, hp, settled).await?;
                }
            }
            None => {
                drop_partial(osd, ctx, peer, stripe, pos, hp, settled).await?;
                if let Some(v) = hs {
                    put_chunk(osd, ctx, peer, stripe.chunk(pos, true), v, None, false)
                        .await
                        .map_err(|status| peer_status("DROP", peer, status))?;
                    settled.dropped += 1;
                }
                if let Some(v) = hc {
                    put_chunk(osd, ctx, peer, stripe.chunk(pos, false), v, None, false)
                        .await
                        .map_err(|status| peer_status("DELETE", peer, status))?;
                    settled.dropped += 1;
                }
            }
        }
    }
    Ok(())
}

/// Drop the holder's partial stash `hp` (version, base), if any.
async fn drop_partial(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    peer: OsdId,
    stripe: ObjectId,
    pos: usize,
    hp: Option<(Version, Option<Version>)>,
    settled: &mut Settled,
) -> Result<(), PgError> {
    let Some((v, _)) = hp else {
        return Ok(());
    };
    put_chunk(osd, ctx, peer, stripe.partial_stash(pos), v, None, false)
        .await
        .map_err(|status| peer_status("DROP", peer, status))?;
    settled.dropped += 1;
    Ok(())
}

/// Where recovery reads each position from: its holder, then — for a position behind or a
/// hole — the earlier holders recorded and those peering found chunks on.
fn rebuild_sources(
    ctx: &EcPg,
    behind: u32,
    previous: &[Vec<OsdId>],
    found_elsewhere: &[Vec<OsdId>],
) -> Vec<Vec<OsdId>> {
    (0..ctx.positions.len())
        .map(|p| {
            let holder = ctx.positions[p];
            let mut v: Vec<OsdId> = (holder != NO_OSD).then_some(holder).into_iter().collect();
            if behind & (1 << p) != 0 || holder == NO_OSD {
                for &o in previous[p].iter().chain(&found_elsewhere[p]) {
                    if !v.contains(&o) {
                        v.push(o);
                    }
                }
            }
            v
        })
        .collect()
}

/// What peering found of one position of a stripe: at its holder, and elsewhere (an OSD
/// that held the position in an earlier interval): (committed, stash) versions.
#[derive(Clone, Debug, Default)]
struct Seen {
    holder: (Option<Version>, Option<Version>),
    elsewhere: Vec<(OsdId, Option<Version>, Option<Version>)>,
    /// Partial stashes of the position, wherever found: (OSD, version, base once read).
    partials: Vec<(OsdId, Version, Option<Version>)>,
}

impl Seen {
    /// The committed version of the position's chunk on `at` (`holder`: the position's OSD).
    fn committed_at(&self, holder: OsdId, at: OsdId) -> Option<Version> {
        match at == holder {
            true => self.holder.0,
            false => self.elsewhere.iter().find(|e| e.0 == at).and_then(|e| e.1),
        }
    }
}

/// Every object of the PG held by `peer` (this OSD's own store, or a LIST, which also seals
/// the PG there), which must be the run `incarnation` (0: any).
pub(super) async fn list_at(
    osd: &Arc<Osd>,
    map: &ClusterMap,
    ctx: &EcPg,
    peer: OsdId,
    incarnation: u64,
) -> Result<Vec<(ObjectId, Version)>, PgError> {
    if peer == osd.id {
        return Ok(crate::recovery::list_local(osd, ctx.pg));
    }
    let conn = crate::peering::connect(osd, map, peer).await?;
    let scope = crate::recovery::ListScope::of(map, ctx.pg.pool);
    list_remote(&conn, ctx.pg, ctx.interval, incarnation, scope).await
}

fn peer_status(op: &'static str, peer: OsdId, status: Status) -> PgError {
    PgError::PeerStatus {
        op,
        peer: format!("osd.{peer}"),
        status,
    }
}

/// Every version in a stripe's listed state, ascending: a version's rank is its index + 1.
fn listed_versions(state: &[Option<Merged>]) -> Vec<Version> {
    let mut all: Vec<Version> = state
        .iter()
        .flatten()
        .flat_map(|(c, s, p)| [*c, *s, p.map(|p| p.0), p.map(|p| p.1)])
        .flatten()
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The plan for one stripe's listed state, with versions ranked (the decision only
/// compares them), and the ranked state it was decided from.
fn plan_of(k: usize, state: &[Option<Merged>]) -> (Plan, Vec<Option<PositionState>>) {
    let all = listed_versions(state);
    let rank = |v: Option<Version>| v.map(|v| all.binary_search(&v).expect("listed") as u64 + 1);
    let positions: Vec<Option<PositionState>> = state
        .iter()
        .map(|p| {
            p.map(|(c, s, partial)| PositionState {
                committed: rank(c),
                stash: rank(s),
                partial: partial.map(|(v, base)| PartialStash {
                    version: rank(Some(v)).expect("ranked"),
                    base: rank(Some(base)).expect("ranked"),
                }),
            })
        })
        .collect();
    (decide(k, &positions), positions)
}

/// The version of rank `rank` in a stripe's listed state.
fn version_of(state: &[Option<Merged>], rank: u64) -> Version {
    listed_versions(state)[rank as usize - 1]
}
