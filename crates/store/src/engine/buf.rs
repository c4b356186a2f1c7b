//! Buffers that direct I/O accepts: 4096-byte aligned in memory and a multiple of 4096 long.

use std::alloc::{alloc, alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Alignment (and length granularity) of every buffer the engine reads into or writes from:
/// the store's block size, which is also the largest logical sector it accepts.
pub const ALIGN: usize = 4096;

/// A zero-initialised heap buffer aligned to [`ALIGN`] whose length is a multiple of it.
/// Its address is stable (it never reallocates), so the engine may hand it to the kernel
/// while the operation is in flight.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Box<[u8]>); nothing else holds
// the pointer, so moving it to another thread or sharing &AlignedBuf is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above: &AlignedBuf only gives &[u8] access.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of at least `len` bytes, rounded up to a multiple of [`ALIGN`] (and at
    /// least one block).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let len = len.max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size (at least ALIGN).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len }
    }

    /// A buffer holding `data`, zero-padded to a multiple of [`ALIGN`]. Only the padding is
    /// zeroed (every write the store starts copies its bytes once into such a buffer).
    pub fn copy_from(data: &[u8]) -> AlignedBuf {
        let len = data.len().max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size (at least ALIGN).
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        // SAFETY: the allocation holds len >= data.len() bytes and cannot overlap data (it
        // is fresh); after these two writes all len bytes are initialised, as as_slice needs.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), data.len());
            std::ptr::write_bytes(ptr.as_ptr().add(data.len()), 0, len - data.len());
        }
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        match Layout::from_size_align(len, ALIGN) {
            Ok(layout) => layout,
            // Only a length near usize::MAX fails; no store buffer comes close.
            Err(_) => handle_alloc_error(Layout::new::<[u8; ALIGN]>()),
        }
    }

    /// Its length in bytes (a multiple of [`ALIGN`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: every buffer holds at least one block.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised bytes (zeroed or copied at allocation) owned
        // by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Its bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The address the kernel reads from or writes to.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated in `zeroed` or `copy_from` with exactly this layout and
        // is freed once.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: every buffer is aligned, rounded up to whole blocks, zeroed, and keeps what is
    /// copied into it.
    #[test]
    fn buffers_are_aligned_whole_blocks() {
        for len in [0, 1, 4095, 4096, 4097, 1 << 20] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_mut_ptr() as usize % ALIGN, 0);
            assert_eq!(b.len() % ALIGN, 0);
            assert!(b.len() >= len.max(1) && b.len() < len.max(1) + ALIGN);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
        let b = AlignedBuf::copy_from(b"basalt");
        assert_eq!(&b.as_slice()[..6], b"basalt");
        assert_eq!(b.len(), ALIGN);
        assert!(b.as_slice()[6..].iter().all(|&x| x == 0));
    }
}
