//! Sequential detection per object: when reads of one object proceed in order, the reader
//! fetches ahead of them in ranged GETs whose size doubles from [`WINDOW_START_BYTES`] to
//! [`WINDOW_MAX_BYTES`], keeping [`DEPTH_WINDOWS`] windows ahead of the last read, never
//! past the object's end. Pure bookkeeping: the reader does the GETs.

use std::collections::HashMap;

/// The first GET ahead of a sequential stream.
pub const WINDOW_START_BYTES: u64 = 256 << 10;
/// The largest GET ahead.
pub const WINDOW_MAX_BYTES: u64 = 4 << 20;
/// How far ahead of the last read a stream is fetched, in windows.
pub const DEPTH_WINDOWS: u64 = 4;
/// A read starting at most this far past the end of the stream's furthest one still
/// continues it (concurrent requests of one reader arrive out of order).
pub const SLACK_BYTES: u64 = 1 << 20;
/// A read starting at most this far before the start of the stream's last one still
/// continues it. A client with several connections (nbdfuse opens four) delivers one
/// sequential stream's requests out of order by several requests (seen: 1.25 MiB behind,
/// with 1 MiB requests); restarting the stream there would fetch ahead again the bytes the
/// early requests already took.
pub const BEHIND_BYTES: u64 = 8 << 20;
/// Objects followed at once (the least recently read is forgotten).
pub const MAX_STREAMS: usize = 256;

/// One object being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stream {
    /// Start of the last read, and the end of the furthest one (object offsets).
    last_start: u64,
    next: u64,
    /// Bytes below this were read or are being fetched ahead.
    ahead: u64,
    /// The size of the next GET ahead.
    window: u64,
    tick: u64,
}

impl Stream {
    /// A stream whose first read was `[start, end)`, at `tick`.
    fn starting(start: u64, end: u64, tick: u64) -> Stream {
        Stream {
            last_start: start,
            next: end,
            ahead: end,
            window: WINDOW_START_BYTES,
            tick,
        }
    }
}

/// The streams of one reader, by object (its first byte on the device).
#[derive(Default)]
pub struct Streams {
    streams: HashMap<u64, Stream>,
    tick: u64,
}

impl Streams {
    /// A read of `[start, end)` of the object at `object` (of `size` bytes): the ranges to
    /// fetch ahead now (object offsets, in order, within the object).
    pub fn on_read(&mut self, object: u64, size: u64, start: u64, end: u64) -> Vec<(u64, u64)> {
        self.tick += 1;
        let tick = self.tick;
        let Some(s) = self.streams.get_mut(&object) else {
            if end < size {
                if self.streams.len() >= MAX_STREAMS {
                    let oldest = self
                        .streams
                        .iter()
                        .min_by_key(|(_, s)| s.tick)
                        .map(|(k, _)| *k);
                    if let Some(k) = oldest {
                        self.streams.remove(&k);
                    }
                }
                self.streams
                    .insert(object, Stream::starting(start, end, tick));
            }
            return Vec::new();
        };
        s.tick = tick;
        let sequential = start + BEHIND_BYTES >= s.last_start && start <= s.next + SLACK_BYTES;
        if !sequential {
            *s = Stream::starting(start, end, tick);
            return Vec::new();
        }
        s.last_start = s.last_start.max(start);
        s.next = s.next.max(end);
        s.ahead = s.ahead.max(end);
        let mut out = Vec::new();
        let target = s.next + DEPTH_WINDOWS * s.window;
        // Bound: each round moves `ahead` forward by a window, up to the object's end.
        while s.ahead < size && s.ahead < target {
            let stop = (s.ahead + s.window).min(size);
            out.push((s.ahead, stop));
            s.ahead = stop;
            s.window = (s.window * 2).min(WINDOW_MAX_BYTES);
        }
        out
    }

    /// The range from `from` on could not be fetched ahead (no GET slot or no cache room):
    /// a later read tries again.
    pub fn not_fetched(&mut self, object: u64, from: u64) {
        if let Some(s) = self.streams.get_mut(&object) {
            s.ahead = s.ahead.min(from).max(s.next);
        }
    }

    /// How many objects are followed.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a first read fetches nothing ahead; the second in order starts the windows,
    /// which double, stay within the object and never cover a byte twice.
    #[test]
    fn sequential_reads_fetch_ahead_in_growing_windows() {
        let mut s = Streams::default();
        let size = 64 << 20;
        assert!(s.on_read(0, size, 0, 128 << 10).is_empty());
        let first = s.on_read(0, size, 128 << 10, 256 << 10);
        assert_eq!(first[0], (256 << 10, 512 << 10));
        let mut covered = 256 << 10;
        for (a, b) in &first {
            assert_eq!(*a, covered, "contiguous, no byte twice");
            covered = *b;
        }
        let mut at = 256 << 10;
        let mut largest = 0;
        while at < size {
            for (a, b) in s.on_read(0, size, at, at + (128 << 10)) {
                assert_eq!(a, covered);
                assert!(b <= size);
                largest = largest.max(b - a);
                covered = b;
            }
            at += 128 << 10;
        }
        assert_eq!(covered, size, "fetched ahead to the end, not past it");
        assert_eq!(largest, WINDOW_MAX_BYTES);
    }

    /// Goal: requests of one sequential read that arrive out of order over several
    /// connections never fetch ahead bytes an earlier request already took (regression:
    /// this order, seen from nbdfuse, fetched the object's last 256 KiB twice).
    #[test]
    fn reordered_requests_never_fetch_ahead_what_was_read() {
        let mut s = Streams::default();
        let size = 9_437_184;
        let arrivals = [
            (622_592, 1_671_168),
            (0, 622_592),
            (1_671_168, 2_621_440),
            (2_621_440, 3_670_016),
            (3_670_016, 3_932_160),
            (3_932_160, 4_980_736),
            (4_980_736, 5_242_880),
            (5_242_880, 6_291_456),
            (6_291_456, 6_553_600),
            (6_553_600, 7_602_176),
            (7_602_176, 7_864_320),
            (9_175_040, 9_437_184),
            (7_864_320, 8_912_896),
            (8_912_896, 9_175_040),
        ];
        let mut read: Vec<(u64, u64)> = Vec::new();
        let mut fetched: Vec<(u64, u64)> = Vec::new();
        for (start, end) in arrivals {
            for (a, b) in s.on_read(0, size, start, end) {
                let overlaps = |(x, y): &(u64, u64)| a < *y && *x < b;
                assert!(!read.iter().any(overlaps), "[{a}, {b}) was read already");
                assert!(!fetched.iter().any(overlaps), "[{a}, {b}) fetched twice");
                fetched.push((a, b));
            }
            read.push((start, end));
        }
    }

    /// Goal: reads out of order within the slack continue a stream; a jump restarts it;
    /// a whole small object read at once starts none.
    #[test]
    fn random_reads_fetch_nothing_ahead() {
        let mut s = Streams::default();
        let size = 100 << 20;
        s.on_read(7, size, 0, 128 << 10);
        assert!(
            !s.on_read(7, size, 256 << 10, 384 << 10).is_empty(),
            "ahead of order"
        );
        let late = s.on_read(7, size, 128 << 10, 256 << 10);
        assert!(
            late.iter().all(|(a, _)| *a >= 384 << 10),
            "continues: {late:?}"
        );
        assert!(s.on_read(7, size, 50 << 20, (50 << 20) + 4096).is_empty());
        assert!(s.on_read(7, size, 10 << 20, (10 << 20) + 4096).is_empty());
        assert!(s.on_read(8, 4096, 0, 4096).is_empty());
        assert_eq!(s.len(), 1, "the whole small object is no stream");
        for i in 0..(MAX_STREAMS as u64 + 10) {
            s.on_read(1000 + i, size, 0, 4096);
        }
        assert_eq!(s.len(), MAX_STREAMS);
    }
}
