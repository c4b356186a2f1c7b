//! A streaming EROFS image writer for a sorted object listing (docs/design.md,
//! "Object-backed volumes"; format facts in ../shared/EROFS-NOTES.md).
//!
//! Keys go in sorted by bytes, as S3 lists them; each file gets a run of blocks in the
//! *data region* (from [`DATA_START_BLOCK`], never written: the block server fetches them
//! from the bucket) the moment it is added. The metadata region (inodes and directory blocks) is
//! streamed to `out` as directories close; it is placed after the data region, at block
//! the block after the last file's, known only at the end — nids are relative to it, and the few
//! absolute addresses (directories' blocks, `..` entries of directories whose parent had
//! not closed yet) are patched by [`Writer::finish`]. Memory: the children of the open
//! directories (the path of the current key), about 32 bytes plus the name each.

use std::io::{self, Seek, SeekFrom, Write};

/// The filesystem block (and the only block size written).
pub const BLOCK_BYTES: u64 = 4096;
/// Longest name of a directory entry.
pub const MAX_NAME_BYTES: usize = 255;
/// Compact inodes count modification times from here (S3's launch, 2006-03-14 UTC): Linux
/// 6.15+ shows `epoch + i_mtime`; older kernels show this date for every file.
pub const EPOCH: u64 = 1_142_294_400;
/// The data region's first block: 1 MiB of zeros after the superblock, so that readahead
/// and probes of the device's start (blkid, buffered FUSE reads) never touch an object.
pub const DATA_START_BLOCK: u64 = 256;
/// Keys reported by name when skipped (more are counted).
pub const MAX_REPORTED_SKIPS: usize = 10_000;

const SUPERBLOCK_OFFSET: usize = 1024;
const MAGIC: u32 = 0xE0F5_E1E2;
const COMPACT_BYTES: u64 = 32;
const DIRENT_BYTES: usize = 12;
/// Block addresses are 32-bit: the whole device holds at most this many blocks (16 TiB).
const MAX_BLOCKS: u64 = u32::MAX as u64;
/// The start block of an empty file.
const NULL_ADDR: u32 = u32::MAX;
const LAYOUT_FLAT_PLAIN: u16 = 0;
const LAYOUT_FLAT_INLINE: u16 = 2;
const TYPE_FILE: u8 = 1;
const TYPE_DIR: u8 = 2;
const MODE_FILE: u16 = 0o100_644;
const MODE_DIR: u16 = 0o040_755;

/// Why an image cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum ErofsError {
    #[error("keys out of order: {previous:?} then {key:?} (a listing is sorted by bytes)")]
    Unsorted { previous: String, key: String },
    #[error("the image passes 2^32 blocks of 4 KiB (16 TiB) at key {key:?}")]
    TooLarge { key: String },
    #[error("writing the index: {0}")]
    Io(#[from] io::Error),
}

/// Why a key is not in the filesystem (docs/design.md, "Keys that are not paths").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    /// `a//b`, `/a`: a path component is empty.
    EmptyComponent,
    /// A component is `.` or `..`.
    DotComponent,
    /// A component is longer than 255 bytes.
    LongName,
    /// A key ending in `/` that holds data (a size-0 one is a directory marker).
    DataInDirectoryKey,
    /// A file whose name is also a directory (`a` beside `a/b`): the directory wins.
    ShadowedByDirectory,
}

impl Skip {
    /// What it means, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Skip::EmptyComponent => "empty path component",
            Skip::DotComponent => "'.' or '..' component",
            Skip::LongName => "component over 255 bytes",
            Skip::DataInDirectoryKey => "key ending in '/' with data",
            Skip::ShadowedByDirectory => "file name is also a directory",
        }
    }
}

/// What became of an added key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// A file whose data is blocks `start_block..start_block + ceil(size / 4096)` (none
    /// for an empty file).
    File { start_block: u64 },
    /// A directory marker (`prefix/` of size 0).
    Directory,
    /// Not in the filesystem.
    Skipped(Skip),
}

/// What a finished image is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Block 0 of the image: the superblock at byte 1024.
    pub superblock: Vec<u8>,
    /// Blocks of the data region (it starts at [`DATA_START_BLOCK`]).
    pub data_blocks: u64,
    /// The metadata region's first block (after the data region); `out` holds its bytes
    /// from offset 0.
    pub meta_block: u64,
    /// Bytes of the metadata region (a multiple of the block size).
    pub meta_bytes: u64,
    /// Blocks of the whole device.
    pub total_blocks: u64,
    pub files: u64,
    pub directories: u64,
    /// Skipped keys, at most [`MAX_REPORTED_SKIPS`] of them, and how many in all.
    pub skipped: Vec<(String, Skip)>,
    pub skipped_count: u64,
}

/// An entry of an open directory.
struct Child {
    name_off: u32,
    name_len: u8,
    kind: ChildKind,
}

enum ChildKind {
    File {
        size: u64,
        start_block: u32,
        mtime: u64,
    },
    Dir {
        nid: u64,
    },
}

/// A directory on the path of the current key.
struct OpenDir {
    /// Its name in its parent (empty for the root).
    name: Vec<u8>,
    children: Vec<Child>,
    /// The children's names, back to back.
    names: Vec<u8>,
    subdirs: u64,
    /// Where the `..` entries of its closed subdirectories wait for its nid.
    dotdot_waiting: Vec<u64>,
}

impl OpenDir {
    fn new(name: &[u8]) -> Self {
        Self {
            name: name.to_vec(),
            children: Vec::new(),
            names: Vec::new(),
            subdirs: 0,
            dotdot_waiting: Vec::new(),
        }
    }

    fn name_of(&self, c: &Child) -> &[u8] {
        &self.names[c.name_off as usize..c.name_off as usize + c.name_len as usize]
    }

    fn push(&mut self, name: &[u8], kind: ChildKind) {
        let name_off = self.names.len() as u32;
        self.names.extend_from_slice(name);
        self.children.push(Child {
            name_off,
            name_len: name.len() as u8,
            kind,
        });
    }
}

/// A value `finish` writes once the metadata region's place is known.
enum Patch {
    /// The nid of a directory at this stream position (a `..` entry).
    Nid { pos: u64, nid: u64 },
    /// A start block relative to the metadata region, at this position of an inode's i_u.
    MetaBlock { pos: u64, relative: u32 },
    /// Bytes written last at this position (the root's inode, in the slot of nid 0).
    Bytes { pos: u64, bytes: Vec<u8> },
}

/// The streaming writer. `out` receives the metadata region (offset 0 = block `M`).
pub struct Writer<W: Write + Seek> {
    out: W,
    pos: u64,
    data_blocks: u64,
    stack: Vec<OpenDir>,
    patches: Vec<Patch>,
    last_key: Option<Vec<u8>>,
    next_ino: u32,
    files: u64,
    directories: u64,
    skipped: Vec<(String, Skip)>,
    skipped_count: u64,
    built_at: u64,
}

/// A key as a path: its directories and its file name (None for a directory marker).
type PathOf<'a> = (Vec<&'a [u8]>, Option<&'a [u8]>);

/// The path components of a key, or why it cannot be a path.
fn components(key: &[u8], size: u64) -> Result<PathOf<'_>, Skip> {
    let (body, marker) = match key.strip_suffix(b"/") {
        Some(_) if size > 0 => return Err(Skip::DataInDirectoryKey),
        Some(body) => (body, true),
        None => (key, false),
    };
    let mut parts: Vec<&[u8]> = body.split(|&b| b == b'/').collect();
    for p in &parts {
        if p.is_empty() {
            return Err(Skip::EmptyComponent);
        }
        if *p == b"." || *p == b".." {
            return Err(Skip::DotComponent);
        }
        if p.len() > MAX_NAME_BYTES {
            return Err(Skip::LongName);
        }
    }
    if marker {
        Ok((parts, None))
    } else {
        let file = parts.pop();
        Ok((parts, file))
    }
}

/// A 32-byte compact inode.
fn compact_inode(
    layout: u16,
    mode: u16,
    nlink: u16,
    size: u32,
    mtime: u32,
    i_u: u32,
    ino: u32,
) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0..2].copy_from_slice(&(layout << 1).to_le_bytes());
    b[4..6].copy_from_slice(&mode.to_le_bytes());
    b[6..8].copy_from_slice(&nlink.to_le_bytes());
    b[8..12].copy_from_slice(&size.to_le_bytes());
    b[12..16].copy_from_slice(&mtime.to_le_bytes());
    b[16..20].copy_from_slice(&i_u.to_le_bytes());
    b[20..24].copy_from_slice(&ino.to_le_bytes());
    b
}

/// A 64-byte extended inode (sizes ≥ 4 GiB, times outside the compact range, many links).
fn extended_inode(
    layout: u16,
    mode: u16,
    nlink: u32,
    size: u64,
    mtime: u64,
    i_u: u32,
    ino: u32,
) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..2].copy_from_slice(&((layout << 1) | 1).to_le_bytes());
    b[4..6].copy_from_slice(&mode.to_le_bytes());
    b[8..16].copy_from_slice(&size.to_le_bytes());
    b[16..20].copy_from_slice(&i_u.to_le_bytes());
    b[20..24].copy_from_slice(&ino.to_le_bytes());
    b[32..40].copy_from_slice(&mtime.to_le_bytes());
    b[44..48].copy_from_slice(&nlink.to_le_bytes());
    b
}

/// An inode in whichever form holds its values.
fn inode(layout: u16, mode: u16, nlink: u64, size: u64, mtime: u64, i_u: u32, ino: u32) -> Vec<u8> {
    let delta = mtime.checked_sub(EPOCH).and_then(|d| u32::try_from(d).ok());
    match (u16::try_from(nlink), u32::try_from(size), delta) {
        (Ok(n), Ok(s), Some(d)) => compact_inode(layout, mode, n, s, d, i_u, ino).to_vec(),
        _ => extended_inode(layout, mode, nlink as u32, size, mtime, i_u, ino).to_vec(),
    }
}

/// Directory entries packed into blocks (the last one cut at its used bytes), sorted by
/// raw bytes; returns the bytes and, per entry, its offset in them (for its nid).
fn pack_dirents(entries: &[(&[u8], u8)]) -> (Vec<u8>, Vec<usize>) {
    let block = BLOCK_BYTES as usize;
    let mut data = Vec::new();
    let mut offsets = Vec::with_capacity(entries.len());
    let mut i = 0;
    while i < entries.len() {
        // As many entries as fit in one block: 12 bytes each plus the names.
        let mut used = 0;
        let mut j = i;
        while j < entries.len() && used + DIRENT_BYTES + entries[j].0.len() <= block {
            used += DIRENT_BYTES + entries[j].0.len();
            j += 1;
        }
        let start = data.len();
        let mut name_off = (j - i) * DIRENT_BYTES;
        for (name, kind) in &entries[i..j] {
            offsets.push(data.len());
            data.extend_from_slice(&0u64.to_le_bytes());
            data.extend_from_slice(&(name_off as u16).to_le_bytes());
            data.push(*kind);
            data.push(0);
            name_off += name.len();
        }
        for (name, _) in &entries[i..j] {
            data.extend_from_slice(name);
        }
        if j < entries.len() {
            // Not the last block: zeros to its end (a name ends at the first NUL).
            data.resize(start + block, 0);
        }
        i = j;
    }
    (data, offsets)
}

impl<W: Write + Seek> Writer<W> {
    /// A writer whose directories show `built_at` (Unix seconds) as their time.
    pub fn new(out: W, built_at: u64) -> io::Result<Self> {
        let mut w = Self {
            out,
            pos: 0,
            data_blocks: 0,
            stack: vec![OpenDir::new(b"")],
            patches: Vec::new(),
            last_key: None,
            next_ino: 1,
            files: 0,
            directories: 0,
            skipped: Vec::new(),
            skipped_count: 0,
            built_at,
        };
        // nid 0 is the root's (written last): root nids must fit 16 bits.
        w.write(&[0u8; COMPACT_BYTES as usize])?;
        Ok(w)
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Zeros up to the next block boundary, unless already on one.
    fn pad_to_block(&mut self) -> io::Result<()> {
        let rem = self.pos % BLOCK_BYTES;
        if rem != 0 {
            self.write(&vec![0u8; (BLOCK_BYTES - rem) as usize])?;
        }
        Ok(())
    }

    /// Zeros to the next 32-byte slot: inodes start on slots (nid = offset / 32).
    fn align_slot(&mut self) -> io::Result<()> {
        let rem = self.pos % COMPACT_BYTES;
        if rem != 0 {
            self.write(&vec![0u8; (COMPACT_BYTES - rem) as usize])?;
        }
        Ok(())
    }

    /// Zeros to the next block when `len` bytes would cross a block boundary here.
    fn pad_to_fit(&mut self, len: u64) -> io::Result<()> {
        if self.pos % BLOCK_BYTES + len > BLOCK_BYTES {
            self.pad_to_block()?;
        }
        Ok(())
    }

    fn ino(&mut self) -> u32 {
        let ino = self.next_ino;
        self.next_ino = self.next_ino.saturating_add(1);
        ino
    }

    fn skip(&mut self, key: &[u8], why: Skip) {
        self.skipped_count += 1;
        if self.skipped.len() < MAX_REPORTED_SKIPS {
            self.skipped
                .push((String::from_utf8_lossy(key).into_owned(), why));
        }
    }

    /// Add object `key` (relative to the volume's prefix) of `size` bytes modified at
    /// `mtime` (Unix seconds). Keys must come sorted by bytes, each once.
    pub fn add(&mut self, key: &[u8], size: u64, mtime: u64) -> Result<Added, ErofsError> {
        if let Some(previous) = &self.last_key {
            if key <= previous.as_slice() {
                return Err(ErofsError::Unsorted {
                    previous: String::from_utf8_lossy(previous).into_owned(),
                    key: String::from_utf8_lossy(key).into_owned(),
                });
            }
        }
        self.last_key = Some(key.to_vec());
        let (dirs, file) = match components(key, size) {
            Ok(c) => c,
            Err(why) => {
                self.skip(key, why);
                return Ok(Added::Skipped(why));
            }
        };
        self.enter(&dirs)?;
        let Some(name) = file else {
            return Ok(Added::Directory);
        };
        let blocks = size.div_ceil(BLOCK_BYTES);
        let start = DATA_START_BLOCK + self.data_blocks;
        if start + blocks > MAX_BLOCKS {
            return Err(ErofsError::TooLarge {
                key: String::from_utf8_lossy(key).into_owned(),
            });
        }
        self.data_blocks += blocks;
        let start_block = if size == 0 { NULL_ADDR } else { start as u32 };
        let top = self.stack.last_mut().expect("the root is always open");
        top.push(
            name,
            ChildKind::File {
                size,
                start_block,
                mtime,
            },
        );
        self.files += 1;
        Ok(Added::File { start_block: start })
    }

    /// Make the open directories the path `dirs`: close those off it, open the rest.
    fn enter(&mut self, dirs: &[&[u8]]) -> Result<(), ErofsError> {
        let common = self.stack[1..]
            .iter()
            .zip(dirs)
            .take_while(|(open, name)| open.name.as_slice() == **name)
            .count();
        while self.stack.len() > 1 + common {
            self.close_top()?;
        }
        for name in &dirs[common..] {
            self.unshadow(name);
            self.stack.push(OpenDir::new(name));
        }
        Ok(())
    }

    /// Opening directory `name` in the top directory: a file of that name added before it
    /// (`a` sorts before `a/b`, with only names starting `a` between) is skipped.
    fn unshadow(&mut self, name: &[u8]) {
        let top = self.stack.last().expect("the root is always open");
        let found = top
            .children
            .iter()
            .rposition(|c| matches!(c.kind, ChildKind::File { .. }) && top.name_of(c) == name);
        let Some(i) = found else { return };
        let mut path: Vec<u8> = Vec::new();
        for d in &self.stack[1..] {
            path.extend_from_slice(&d.name);
            path.push(b'/');
        }
        path.extend_from_slice(name);
        let top = self.stack.last_mut().expect("the root is always open");
        top.children.remove(i);
        self.files -= 1;
        self.skip(&path, Skip::ShadowedByDirectory);
    }

    /// Write the top directory (not the root): its files' inodes, its entries, its inode.
    fn close_top(&mut self) -> Result<(), ErofsError> {
        let dir = self.stack.pop().expect("close below the root");
        let parent_nid = (self.stack.len() == 1).then_some(0);
        let (nid, dotdot_pos) = self.write_dir(&dir, parent_nid)?;
        let parent = self.stack.last_mut().expect("the root is always open");
        if let Some(pos) = dotdot_pos {
            parent.dotdot_waiting.push(pos);
        }
        parent.subdirs += 1;
        parent.push(&dir.name, ChildKind::Dir { nid });
        Ok(())
    }

    /// Write directory `dir` (its nid is where its inode lands; the root's is 0): the
    /// inodes of its files, then its entry blocks and inode. `parent_nid` None: its `..`
    /// is patched when the parent closes (returned: where). Returns its nid.
    fn write_dir(
        &mut self,
        dir: &OpenDir,
        parent_nid: Option<u64>,
    ) -> Result<(u64, Option<u64>), ErofsError> {
        let is_root = dir.name.is_empty();
        // The files' inodes, in entry order (neighbours in a listing stay neighbours).
        let mut order: Vec<usize> = (0..dir.children.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            dir.name_of(&dir.children[a])
                .cmp(dir.name_of(&dir.children[b]))
        });
        let mut nids = vec![0u64; dir.children.len()];
        for &i in &order {
            match dir.children[i].kind {
                ChildKind::Dir { nid } => nids[i] = nid,
                ChildKind::File {
                    size,
                    start_block,
                    mtime,
                } => {
                    let ino = self.ino();
                    let bytes = inode(
                        LAYOUT_FLAT_PLAIN,
                        MODE_FILE,
                        1,
                        size,
                        mtime,
                        start_block,
                        ino,
                    );
                    self.align_slot()?;
                    self.pad_to_fit(bytes.len() as u64)?;
                    nids[i] = self.pos / COMPACT_BYTES;
                    self.write(&bytes)?;
                }
            }
        }
        // Entries sorted by raw bytes, `.` and `..` among them.
        let mut entries: Vec<(&[u8], u8, Option<usize>)> = Vec::with_capacity(order.len() + 2);
        entries.push((b".", TYPE_DIR, None));
        entries.push((b"..", TYPE_DIR, None));
        for &i in &order {
            let kind = match dir.children[i].kind {
                ChildKind::Dir { .. } => TYPE_DIR,
                ChildKind::File { .. } => TYPE_FILE,
            };
            entries.push((dir.name_of(&dir.children[i]), kind, Some(i)));
        }
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let packed: Vec<(&[u8], u8)> = entries.iter().map(|e| (e.0, e.1)).collect();
        let (mut data, offsets) = pack_dirents(&packed);
        let size = data.len() as u64;
        let ino = self.ino();
        let probe = inode(
            LAYOUT_FLAT_PLAIN,
            MODE_DIR,
            2 + dir.subdirs,
            size,
            self.built_at,
            0,
            ino,
        );
        let inode_len = probe.len() as u64;
        let tail = size % BLOCK_BYTES;
        let inline = !is_root && tail > 0 && tail + inode_len <= BLOCK_BYTES;
        let full = if inline {
            size / BLOCK_BYTES
        } else {
            size.div_ceil(BLOCK_BYTES)
        };
        let layout = if inline {
            LAYOUT_FLAT_INLINE
        } else {
            LAYOUT_FLAT_PLAIN
        };
        let dinode = inode(
            layout,
            MODE_DIR,
            2 + dir.subdirs,
            size,
            self.built_at,
            0,
            ino,
        );
        // Where the blocks and the inode go, so `.` can name the nid before writing.
        if full > 0 {
            self.pad_to_block()?;
        } else {
            self.align_slot()?;
            self.pad_to_fit(inode_len + tail)?;
        }
        let blocks_at = self.pos;
        let inode_at = if is_root {
            0
        } else {
            blocks_at + full * BLOCK_BYTES
        };
        let nid = inode_at / COMPACT_BYTES;
        let tail_at = inode_at + inode_len;
        // Stream position of entry byte `off` of the directory's data.
        let place = |off: usize| -> u64 {
            let off = off as u64;
            if off < full * BLOCK_BYTES {
                blocks_at + off
            } else {
                tail_at + (off - full * BLOCK_BYTES)
            }
        };
        let mut dotdot_pos = None;
        for (e, &off) in entries.iter().zip(&offsets) {
            let value = match e.2 {
                Some(i) => nids[i],
                None if e.0 == b"." => nid,
                None => match parent_nid {
                    Some(p) => p,
                    None => {
                        dotdot_pos = Some(place(off));
                        0
                    }
                },
            };
            data[off..off + 8].copy_from_slice(&value.to_le_bytes());
        }
        for &pos in &dir.dotdot_waiting {
            self.patches.push(Patch::Nid { pos, nid });
        }
        let full_bytes = (full * BLOCK_BYTES) as usize;
        if full > 0 {
            let mut blocks = data[..full_bytes.min(data.len())].to_vec();
            blocks.resize(full_bytes, 0);
            self.write(&blocks)?;
        }
        if is_root {
            self.patches.push(Patch::Bytes {
                pos: 0,
                bytes: dinode,
            });
        } else {
            self.write(&dinode)?;
            if inline {
                self.write(&data[full_bytes..])?;
            }
        }
        if full > 0 {
            self.patches.push(Patch::MetaBlock {
                pos: inode_at + 16,
                relative: u32::try_from(blocks_at / BLOCK_BYTES).unwrap_or(u32::MAX),
            });
        }
        self.directories += 1;
        Ok((nid, dotdot_pos))
    }

    /// Close every directory, write the root, patch the addresses that needed the
    /// metadata region's place, and make the superblock.
    pub fn finish(mut self) -> Result<(W, Summary), ErofsError> {
        while self.stack.len() > 1 {
            self.close_top()?;
        }
        let root = self.stack.pop().expect("the root is always open");
        self.write_dir(&root, Some(0))?;
        self.pad_to_block()?;
        let meta_block = DATA_START_BLOCK + self.data_blocks;
        let meta_blocks = self.pos / BLOCK_BYTES;
        let total_blocks = meta_block + meta_blocks;
        if total_blocks > MAX_BLOCKS {
            return Err(ErofsError::TooLarge {
                key: "(the index itself)".into(),
            });
        }
        for patch in std::mem::take(&mut self.patches) {
            match patch {
                Patch::Nid { pos, nid } => {
                    self.out.seek(SeekFrom::Start(pos))?;
                    self.out.write_all(&nid.to_le_bytes())?;
                }
                Patch::MetaBlock { pos, relative } => {
                    self.out.seek(SeekFrom::Start(pos))?;
                    let absolute = meta_block + u64::from(relative);
                    self.out.write_all(&(absolute as u32).to_le_bytes())?;
                }
                Patch::Bytes { pos, bytes } => {
                    self.out.seek(SeekFrom::Start(pos))?;
                    self.out.write_all(&bytes)?;
                }
            }
        }
        self.out.seek(SeekFrom::Start(self.pos))?;
        self.out.flush()?;
        let inodes = u64::from(self.next_ino - 1);
        let superblock = superblock(inodes, total_blocks, meta_block);
        let summary = Summary {
            superblock,
            data_blocks: self.data_blocks,
            meta_block,
            meta_bytes: self.pos,
            total_blocks,
            files: self.files,
            directories: self.directories,
            skipped: self.skipped,
            skipped_count: self.skipped_count,
        };
        Ok((self.out, summary))
    }
}

/// Block 0: the superblock at byte 1024 (no feature bits: every reader takes it).
fn superblock(inodes: u64, total_blocks: u64, meta_block: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_BYTES as usize];
    let sb = &mut b[SUPERBLOCK_OFFSET..SUPERBLOCK_OFFSET + 128];
    sb[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    sb[12] = 12; // log2 of the block size
    sb[14..16].copy_from_slice(&0u16.to_le_bytes()); // root nid
    sb[16..24].copy_from_slice(&inodes.to_le_bytes());
    sb[24..32].copy_from_slice(&EPOCH.to_le_bytes());
    sb[36..40].copy_from_slice(&(total_blocks as u32).to_le_bytes());
    sb[40..44].copy_from_slice(&(meta_block as u32).to_le_bytes());
    sb[64..70].copy_from_slice(b"basalt");
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::Cursor;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// An image built from `objects` (key → bytes, any order), written to a file with
    /// each file's bytes in its data blocks; returns the image, the summary and what was
    /// added per key.
    fn image(
        dir: &Path,
        objects: &BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> (PathBuf, Summary, Vec<(Vec<u8>, Added)>) {
        let mut w = Writer::new(Cursor::new(Vec::new()), 1_700_000_000).unwrap();
        let mut added = Vec::new();
        for (key, data) in objects {
            let a = w.add(key, data.len() as u64, 1_600_000_000).unwrap();
            added.push((key.clone(), a));
        }
        let (meta, summary) = w.finish().unwrap();
        let path = dir.join("index.erofs");
        let mut f = std::fs::File::create(&path).unwrap();
        f.set_len(summary.total_blocks * BLOCK_BYTES).unwrap();
        let mut put = |at: u64, bytes: &[u8]| {
            f.seek(SeekFrom::Start(at)).unwrap();
            f.write_all(bytes).unwrap();
        };
        put(0, &summary.superblock);
        put(summary.meta_block * BLOCK_BYTES, meta.get_ref());
        for (key, a) in &added {
            if let Added::File { start_block } = a {
                put(start_block * BLOCK_BYTES, &objects[key]);
            }
        }
        (path, summary, added)
    }

    /// fsck.erofs on the image (it must pass); with `extract`, the tree it unpacks. A
    /// missing fsck.erofs fails the test, naming it.
    fn fsck(image: &Path, extract: Option<&Path>) -> String {
        let mut cmd = Command::new("fsck.erofs");
        if let Some(dir) = extract {
            cmd.arg(format!("--extract={}", dir.display()));
        }
        let out = match cmd.arg(image).output() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
                "required tool `fsck.erofs` is not installed (Debian package erofs-utils; \
                 scripts/install-test-deps.sh installs it)"
            ),
            Err(e) => panic!("fsck.erofs: {e}"),
            Ok(out) => out,
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "fsck.erofs failed:\n{text}");
        text
    }

    /// Every regular file under `root`, by path relative to it, with its bytes.
    fn tree(root: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let mut out = BTreeMap::new();
        let mut todo = vec![root.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                if e.file_type().unwrap().is_dir() {
                    todo.push(p);
                } else {
                    let rel = p
                        .strip_prefix(root)
                        .unwrap()
                        .as_os_str()
                        .as_bytes()
                        .to_vec();
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    fn bytes(seed: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i * 31 + seed * 7 + i / 4096) as u8)
            .collect()
    }

    /// Goal: a bucket's awkward shapes make an image fsck.erofs accepts and extracts to
    /// exactly the objects: nested prefixes, empty files, exact and odd block multiples,
    /// names sorting before `.`, UTF-8, 255-byte names, a multi-block directory, many
    /// small directories (inline entries), directory markers.
    #[test]
    fn fsck_extracts_exactly_the_objects() {
        let mut objects: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut add = |k: &str, d: Vec<u8>| {
            objects.insert(k.as_bytes().to_vec(), d);
        };
        add("empty", vec![]);
        add("one", bytes(1, 1));
        add("block", bytes(2, 4096));
        add("block-and-one", bytes(3, 4097));
        add("a b/with space.txt", bytes(4, 100));
        add("!bang", bytes(5, 10));
        add("-dash", bytes(6, 10));
        add("#hash", bytes(7, 10));
        add("a-b", bytes(8, 10));
        add("a.c", bytes(9, 10));
        add("a/x", bytes(10, 5000));
        add("a/deeper/still/leaf", bytes(11, 12345));
        add("ünïcødé/файл", bytes(12, 77));
        add(&format!("long/{}", "n".repeat(255)), bytes(13, 3));
        add("markers/", vec![]);
        add("markers/inside/", vec![]);
        add("markers/inside/file", bytes(14, 8192));
        for i in 0..600 {
            add(&format!("wide/file-{i:04}"), bytes(i, i % 50));
        }
        for i in 0..300 {
            add(&format!("many/{i:03}/only"), bytes(i + 1000, 20));
        }
        let dir = tempfile::tempdir().unwrap();
        let (img, summary, _) = image(dir.path(), &objects);
        assert_eq!(summary.skipped_count, 0, "{:?}", summary.skipped);
        let out = dir.path().join("out");
        fsck(&img, Some(&out));
        let got = tree(&out);
        let want: BTreeMap<Vec<u8>, Vec<u8>> = objects
            .into_iter()
            .filter(|(k, _)| !k.ends_with(b"/"))
            .collect();
        assert_eq!(got.len(), want.len());
        for (k, v) in &want {
            assert_eq!(got.get(k), Some(v), "{}", String::from_utf8_lossy(k));
        }
        assert!(std::fs::metadata(out.join("markers/inside"))
            .unwrap()
            .is_dir());
    }

    /// Goal: keys that cannot be paths are skipped and reported by reason, the rest kept;
    /// a file that is also a directory loses to the directory.
    #[test]
    fn keys_that_are_not_paths_are_skipped_and_reported() {
        let mut objects: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for (k, d) in [
            ("/leading", bytes(1, 5)),
            ("a", bytes(2, 5)),
            ("a!x", bytes(3, 5)),
            ("a//b", bytes(4, 5)),
            ("a/b", bytes(5, 5)),
            ("dir/", bytes(6, 5)),
            ("x/./y", bytes(7, 5)),
            ("x/../y", bytes(8, 5)),
            ("ok", bytes(9, 5)),
        ] {
            objects.insert(k.as_bytes().to_vec(), d);
        }
        objects.insert(
            format!("too/{}", "l".repeat(256)).into_bytes(),
            bytes(10, 5),
        );
        let dir = tempfile::tempdir().unwrap();
        let (img, summary, _) = image(dir.path(), &objects);
        let mut skipped = summary.skipped.clone();
        skipped.sort();
        let mut want = vec![
            ("/leading".to_string(), Skip::EmptyComponent),
            ("a//b".to_string(), Skip::EmptyComponent),
            ("dir/".to_string(), Skip::DataInDirectoryKey),
            ("x/./y".to_string(), Skip::DotComponent),
            ("x/../y".to_string(), Skip::DotComponent),
            (format!("too/{}", "l".repeat(256)), Skip::LongName),
            ("a".to_string(), Skip::ShadowedByDirectory),
        ];
        want.sort();
        assert_eq!(skipped, want);
        assert_eq!(summary.skipped_count, 7);
        assert_eq!(summary.files, 3, "a!x, a/b, ok");
        let out = dir.path().join("out");
        fsck(&img, Some(&out));
        let got: Vec<Vec<u8>> = tree(&out).into_keys().collect();
        assert_eq!(got, vec![b"a!x".to_vec(), b"a/b".to_vec(), b"ok".to_vec()]);
    }

    /// Goal: keys out of order are an error naming both, never a corrupt image.
    #[test]
    fn unsorted_keys_are_refused() {
        let mut w = Writer::new(Cursor::new(Vec::new()), 0).unwrap();
        w.add(b"b", 1, 0).unwrap();
        let e = w.add(b"a", 1, 0).unwrap_err();
        assert!(e.to_string().contains("\"b\" then \"a\""), "{e}");
        assert!(matches!(
            w.add(b"b", 1, 0),
            Err(ErofsError::Unsorted { .. })
        ));
    }

    /// Goal: a 100,000-entry directory and a file over 4 GiB (extended inode) make an
    /// image fsck.erofs accepts, with each file's blocks after the one before.
    #[test]
    fn a_hundred_thousand_files_and_a_huge_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::new(Cursor::new(Vec::new()), 1_700_000_000).unwrap();
        let huge = 5u64 << 30;
        assert_eq!(
            w.add(b"big/huge.bin", huge, 1_600_000_000).unwrap(),
            Added::File {
                start_block: DATA_START_BLOCK
            }
        );
        let mut next = DATA_START_BLOCK + huge / BLOCK_BYTES;
        for i in 0..100_000u64 {
            let key = format!("flat/img-{i:06}.jpg");
            let size = 1000 + i % 9000;
            assert_eq!(
                w.add(key.as_bytes(), size, 1_600_000_000 + i).unwrap(),
                Added::File { start_block: next }
            );
            next += size.div_ceil(BLOCK_BYTES);
        }
        let (meta, summary) = w.finish().unwrap();
        assert_eq!(summary.files, 100_001);
        assert_eq!(summary.meta_block, next);
        let per_file = summary.meta_bytes / summary.files;
        assert!(per_file <= 64, "{per_file} bytes of metadata per file");
        let path = dir.path().join("index.erofs");
        let mut f = std::fs::File::create(&path).unwrap();
        f.set_len(summary.total_blocks * BLOCK_BYTES).unwrap();
        f.write_all(&summary.superblock).unwrap();
        f.seek(SeekFrom::Start(summary.meta_block * BLOCK_BYTES))
            .unwrap();
        f.write_all(meta.get_ref()).unwrap();
        drop(f);
        fsck(&path, None);
    }

    /// Goal: the Linux kernel mounts the image (loop device, read-only) and reads every
    /// file's bytes, sizes and modification times (mounting needs root: it fails without).
    #[test]
    fn the_kernel_mounts_the_image() {
        assert!(
            running_as_root().is_some(),
            "not root: mounting the image (a loop device) needs root"
        );
        let mut objects: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for i in 0..700 {
            objects.insert(
                format!("d{}/f{i:03}", i % 7).into_bytes(),
                bytes(i, i * 37 % 9000),
            );
        }
        objects.insert(b"top".to_vec(), bytes(1, 4096 * 3 + 1));
        let dir = tempfile::tempdir().unwrap();
        let (img, _, _) = image(dir.path(), &objects);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let out = Command::new("mount")
            .args(["-t", "erofs", "-o", "ro,loop"])
            .arg(&img)
            .arg(&mnt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = tree(&mnt);
        let mtime = std::fs::metadata(mnt.join("top")).unwrap();
        let umount = Command::new("umount").arg(&mnt).status().unwrap();
        assert!(umount.success());
        assert_eq!(got, objects);
        use std::os::unix::fs::MetadataExt;
        assert_eq!(mtime.mtime(), 1_600_000_000, "per-file mtime (Linux 6.15+)");
    }

    /// Some(()) when running as root (from /proc, without unsafe code).
    fn running_as_root() -> Option<()> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let uid = status.lines().find(|l| l.starts_with("Uid:"))?;
        (uid.split_whitespace().nth(1)? == "0").then_some(())
    }
}
