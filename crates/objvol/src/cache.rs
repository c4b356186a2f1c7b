//! The reader's bounded cache of object bytes fetched ahead (docs/design.md, "Object-backed
//! volumes", Serving). A *run* is a stretch of one object's bytes, addressed by device byte
//! offsets: pending while its GET is in flight (readers wait on it instead of fetching the
//! same bytes again), then ready. Bytes are served once: a read takes what it uses out of the
//! cache, so a later read of the same blocks goes to the bucket again (with If-Match) and
//! sees a change; the first GET that sees one drops every cached byte of that object.
//!
//! The bound is on the buffers the cache keeps alive: a run split by a read shares its
//! buffer with its remainders, and the buffer is charged once, until no run refers to it.
//! Pending runs are charged when reserved and never evicted; ready runs are evicted least
//! recently used first.

use crate::reader::SourceError;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use tokio::sync::watch;

/// What a pending run's GET gives: set once, when the GET ends.
pub type FetchOutcome = Option<Result<Bytes, SourceError>>;

/// A stretch of cached object bytes `[start, end)` of the device.
struct Run {
    end: u64,
    /// The buffer it is a slice of (charged once for all runs sharing it).
    buffer: u64,
    /// When it was last used (its key in the LRU order, ready runs only).
    tick: u64,
    state: State,
}

enum State {
    Pending(watch::Receiver<FetchOutcome>),
    Ready(Bytes),
}

/// A buffer's size and how many runs refer to it.
struct Buffer {
    bytes: u64,
    runs: u32,
}

/// What a read of `[a, b)` finds, in order.
pub enum Seg {
    /// Bytes taken out of the cache.
    Hit(Bytes),
    /// Bytes of a run still being fetched: the run starts at `run_start`; once it is
    /// ready, take `[a, b)` of it (see [`Cache::take`]).
    Wait {
        rx: watch::Receiver<FetchOutcome>,
        run_start: u64,
        a: u64,
        b: u64,
    },
    /// Not cached: fetch `[a, b)`.
    Miss { a: u64, b: u64 },
}

/// The cache: runs that never overlap, by start.
pub struct Cache {
    bound_bytes: u64,
    charged_bytes: u64,
    /// Bytes of pending runs (each owns its whole buffer; they cannot be evicted).
    pending_bytes: u64,
    runs: BTreeMap<u64, Run>,
    /// Ready runs by last use: tick → start.
    lru: BTreeMap<u64, u64>,
    buffers: HashMap<u64, Buffer>,
    tick: u64,
    next_buffer: u64,
}

impl Cache {
    /// An empty cache keeping at most `bound_bytes` of buffers alive.
    pub fn new(bound_bytes: u64) -> Self {
        Self {
            bound_bytes,
            charged_bytes: 0,
            pending_bytes: 0,
            runs: BTreeMap::new(),
            lru: BTreeMap::new(),
            buffers: HashMap::new(),
            tick: 0,
            next_buffer: 0,
        }
    }

    /// Bytes of buffers the cache keeps alive now (never above the bound).
    pub fn charged_bytes(&self) -> u64 {
        self.charged_bytes
    }

    /// The bound.
    pub fn bound_bytes(&self) -> u64 {
        self.bound_bytes
    }

    /// Bytes of object data in ready runs (what a read could still take).
    pub fn ready_bytes(&self) -> u64 {
        self.runs
            .iter()
            .filter(|(_, r)| matches!(r.state, State::Ready(_)))
            .map(|(s, r)| r.end - s)
            .sum()
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Start of the run covering byte `at`, if any.
    fn covering(&self, at: u64) -> Option<u64> {
        let (&start, run) = self.runs.range(..=at).next_back()?;
        (run.end > at).then_some(start)
    }

    /// What reading `[a, b)` finds: ready bytes are taken out now, pending ones waited on,
    /// the rest fetched.
    pub fn plan(&mut self, a: u64, b: u64) -> Vec<Seg> {
        let mut out = Vec::new();
        let mut at = a;
        // Bound: each round moves `at` forward to a run's end or the next run's start.
        while at < b {
            match self.covering(at) {
                Some(start) => {
                    let run = &self.runs[&start];
                    let stop = run.end.min(b);
                    match &run.state {
                        State::Ready(data) => {
                            let bytes = data.slice((at - start) as usize..(stop - start) as usize);
                            out.push(Seg::Hit(bytes));
                            self.take(at, stop);
                        }
                        State::Pending(rx) => out.push(Seg::Wait {
                            rx: rx.clone(),
                            run_start: start,
                            a: at,
                            b: stop,
                        }),
                    }
                    at = stop;
                }
                None => {
                    let stop = self.runs.range(at..b).next().map_or(b, |(&next, _)| next);
                    out.push(Seg::Miss { a: at, b: stop });
                    at = stop;
                }
            }
        }
        out
    }

    /// The stretches of `[a, b)` no run covers, in order.
    pub fn gaps(&self, a: u64, b: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = a;
        while at < b {
            if let Some(start) = self.covering(at) {
                at = self.runs[&start].end.min(b);
                continue;
            }
            let stop = self.runs.range(at..b).next().map_or(b, |(&next, _)| next);
            out.push((at, stop));
            at = stop;
        }
        out
    }

    /// Take `[a, b)` out of the ready runs it overlaps (their other bytes stay cached).
    pub fn take(&mut self, a: u64, b: u64) {
        let starts: Vec<u64> = self
            .runs
            .range(..b)
            .rev()
            .take_while(|(_, r)| r.end > a)
            .filter(|(_, r)| matches!(r.state, State::Ready(_)))
            .map(|(&s, _)| s)
            .collect();
        for start in starts {
            let Some(run) = self.runs.remove(&start) else {
                continue;
            };
            self.lru.remove(&run.tick);
            let State::Ready(data) = run.state else {
                unreachable!("only ready runs are taken");
            };
            let mut kept = 0;
            for (s, e) in [(start, a.max(start)), (b.min(run.end), run.end)] {
                if s < e {
                    let tick = self.next_tick();
                    let slice = data.slice((s - start) as usize..(e - start) as usize);
                    self.runs.insert(
                        s,
                        Run {
                            end: e,
                            buffer: run.buffer,
                            tick,
                            state: State::Ready(slice),
                        },
                    );
                    self.lru.insert(tick, s);
                    kept += 1;
                }
            }
            // The remainders refer to the buffer before the taken run lets it go.
            self.buffers
                .get_mut(&run.buffer)
                .expect("a run's buffer is known")
                .runs += kept;
            self.release(run.buffer, 1);
        }
    }

    /// One fewer run refers to `buffer` (`n` of them); the last one uncharges it.
    fn release(&mut self, buffer: u64, n: u32) {
        let buf = self
            .buffers
            .get_mut(&buffer)
            .expect("a run's buffer is known");
        buf.runs -= n;
        if buf.runs == 0 {
            self.charged_bytes -= buf.bytes;
            self.buffers.remove(&buffer);
        }
    }

    /// Reserve `[a, b)` (which no run covers) for a GET: evict ready runs, least recently
    /// used first, until its bytes fit the bound. None if they cannot (pending runs fill
    /// it); else the sender the GET's outcome goes to, after [`Cache::fill`].
    pub fn reserve(&mut self, a: u64, b: u64) -> Option<watch::Sender<FetchOutcome>> {
        debug_assert!(
            a < b && self.gaps(a, b) == vec![(a, b)],
            "reserve over a run"
        );
        let len = b - a;
        if self.pending_bytes + len > self.bound_bytes {
            // Even evicting every ready run would not make room.
            return None;
        }
        // Bound: each round removes one ready run.
        while self.charged_bytes + len > self.bound_bytes {
            let (_, start) = self.lru.pop_first()?;
            let run = self.runs.remove(&start).expect("LRU entries are runs");
            self.release(run.buffer, 1);
        }
        let (tx, rx) = watch::channel(None);
        let buffer = self.next_buffer;
        self.next_buffer += 1;
        self.buffers.insert(
            buffer,
            Buffer {
                bytes: len,
                runs: 1,
            },
        );
        self.charged_bytes += len;
        self.pending_bytes += len;
        self.runs.insert(
            a,
            Run {
                end: b,
                buffer,
                tick: 0,
                state: State::Pending(rx),
            },
        );
        assert!(
            self.charged_bytes <= self.bound_bytes,
            "cache over its bound"
        );
        Some(tx)
    }

    /// The GET of the pending run at `start` ended: its bytes become ready, or the run goes
    /// (an error reaches its waiters through the sender; later reads fetch again).
    pub fn fill(&mut self, start: u64, outcome: &Result<Bytes, SourceError>) {
        let Some(run) = self.runs.get(&start) else {
            return;
        };
        let fits = outcome
            .as_ref()
            .is_ok_and(|d| d.len() as u64 == run.end - start);
        if !matches!(run.state, State::Pending(_)) {
            return;
        }
        self.pending_bytes -= run.end - start;
        if let (true, Ok(data)) = (fits, outcome) {
            let tick = self.next_tick();
            let run = self.runs.get_mut(&start).expect("checked above");
            run.state = State::Ready(data.clone());
            run.tick = tick;
            self.lru.insert(tick, start);
        } else {
            let run = self.runs.remove(&start).expect("checked above");
            self.release(run.buffer, 1);
        }
    }

    /// Drop every ready byte in `[a, b)` (an object that changed).
    pub fn drop_range(&mut self, a: u64, b: u64) {
        self.take(a, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(c: &mut Cache, a: u64, b: u64) {
        let tx = c.reserve(a, b).expect("fits");
        let data: Bytes = (a..b).map(|i| i as u8).collect::<Vec<u8>>().into();
        let outcome = Ok(data);
        c.fill(a, &outcome);
        let _ = tx.send(Some(outcome));
    }

    fn hits(segs: &[Seg]) -> Vec<u8> {
        segs.iter()
            .flat_map(|s| match s {
                Seg::Hit(b) => b.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// Goal: a read takes the cached bytes it uses (served once) and finds the rest as
    /// misses; the run's other bytes stay, and its buffer stays charged until none do.
    #[test]
    fn reads_take_what_they_use() {
        let mut c = Cache::new(1000);
        ready(&mut c, 100, 200);
        let segs = c.plan(50, 150);
        assert!(matches!(segs[0], Seg::Miss { a: 50, b: 100 }));
        assert_eq!(hits(&segs), (100..150).map(|i| i as u8).collect::<Vec<_>>());
        assert_eq!(c.ready_bytes(), 50);
        assert_eq!(c.charged_bytes(), 100, "the buffer is still referred to");
        let segs = c.plan(120, 180);
        assert!(
            matches!(segs[0], Seg::Miss { a: 120, b: 150 }),
            "served once"
        );
        assert_eq!(hits(&segs), (150..180).map(|i| i as u8).collect::<Vec<_>>());
        c.plan(180, 200);
        assert_eq!((c.ready_bytes(), c.charged_bytes()), (0, 0));
        assert_eq!(c.gaps(0, 300), vec![(0, 300)]);
    }

    /// Goal: reservations evict ready runs least recently used first and never pending
    /// ones; the charge never passes the bound.
    #[test]
    fn the_bound_holds() {
        let mut c = Cache::new(300);
        ready(&mut c, 0, 100);
        ready(&mut c, 1000, 1100);
        let pending = c.reserve(2000, 2100).unwrap();
        assert_eq!(c.charged_bytes(), 300);
        // Needs 100: the least recently used ready run (0..100) goes.
        let _t = c.reserve(3000, 3100).unwrap();
        assert_eq!(c.gaps(0, 100), vec![(0, 100)]);
        assert_eq!(c.gaps(1000, 1100), vec![]);
        // Only pending runs and one ready run: 200 cannot fit.
        assert!(c.reserve(4000, 4200).is_none());
        assert!(c.charged_bytes() <= c.bound_bytes());
        assert!(matches!(
            c.plan(2050, 2060)[0],
            Seg::Wait {
                run_start: 2000,
                ..
            }
        ));
        c.fill(2000, &Err(SourceError::Failed("down".into())));
        drop(pending);
        assert_eq!(c.gaps(2000, 2100), vec![(2000, 2100)], "a failed run goes");
        assert_eq!(c.charged_bytes(), 200);
        assert!(c.reserve(4000, 4400).is_none(), "larger than the bound");
    }

    /// Goal: the bytes of an object that changed are dropped, pending runs of it are left
    /// to their GETs (which will fail the same way).
    #[test]
    fn a_changed_object_is_dropped() {
        let mut c = Cache::new(1000);
        ready(&mut c, 0, 100);
        ready(&mut c, 100, 200);
        let _p = c.reserve(200, 300).unwrap();
        c.drop_range(0, 300);
        assert_eq!(c.ready_bytes(), 0);
        assert_eq!(c.charged_bytes(), 100);
        assert_eq!(c.gaps(0, 300), vec![(0, 200)]);
    }
}
