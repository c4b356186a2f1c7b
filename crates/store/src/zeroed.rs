//! Fixed-size arrays of zeros mapped straight from the kernel (anonymous `mmap`): a page costs
//! resident memory only once written, whatever the allocator's state. The index's per-slot
//! arrays and its hash table live in them, so slots never used cost nothing even when a
//! store is opened in a process whose heap holds freed memory (which `calloc` would clear,
//! touching every page), and a table replaced by a larger one goes back to the kernel.

use std::ops::{Deref, DerefMut};

/// Types for which all-zero bytes are a valid value.
///
/// # Safety
/// Implement only for plain integers and arrays of them.
pub(crate) unsafe trait Zeroable: Copy {}

// SAFETY: integers and arrays of integers are valid for every bit pattern, zero included.
unsafe impl Zeroable for u8 {}
// SAFETY: as above.
unsafe impl Zeroable for u32 {}
// SAFETY: as above.
unsafe impl Zeroable for u64 {}
// SAFETY: as above.
unsafe impl Zeroable for [u64; 4] {}

/// `len` values of `T`, all zero at first, in their own anonymous mapping.
pub(crate) struct ZeroedArray<T: Zeroable> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: the array owns its mapping exclusively, like a Box<[T]>.
unsafe impl<T: Zeroable + Send> Send for ZeroedArray<T> {}
// SAFETY: shared access only reads, like a &[T].
unsafe impl<T: Zeroable + Sync> Sync for ZeroedArray<T> {}

impl<T: Zeroable> ZeroedArray<T> {
    /// `len` zeros. Aborts like any failed allocation when the kernel refuses the mapping.
    pub fn new(len: usize) -> ZeroedArray<T> {
        let bytes = Self::bytes_for(len);
        if bytes == 0 {
            return ZeroedArray {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len,
            };
        }
        // SAFETY: a fresh private anonymous mapping; no existing memory is involved.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let layout = std::alloc::Layout::array::<T>(len)
                .unwrap_or_else(|_| std::alloc::Layout::new::<T>());
            std::alloc::handle_alloc_error(layout);
        }
        ZeroedArray {
            ptr: ptr.cast(),
            len,
        }
    }

    fn bytes_for(len: usize) -> usize {
        len.checked_mul(std::mem::size_of::<T>())
            .expect("array size overflows")
    }
}

impl<T: Zeroable> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        let bytes = Self::bytes_for(self.len);
        if bytes != 0 {
            // SAFETY: the mapping was made by `new` with this length and is dropped once.
            unsafe {
                libc::munmap(self.ptr.cast(), bytes);
            }
        }
    }
}

impl<T: Zeroable> Deref for ZeroedArray<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` maps `len` initialized values (zeros are valid for `T`), or is a
        // dangling, aligned pointer for an empty array.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Zeroable> DerefMut for ZeroedArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_start_zero_and_hold_what_is_written() {
        // Goal: a fresh array reads as zeros, keeps writes, and empty or single-page sizes
        // work (an empty one maps nothing).
        let mut a = ZeroedArray::<[u64; 4]>::new(10_000);
        assert!(a.iter().all(|r| *r == [0; 4]));
        a[9_999] = [1, 2, 3, 4];
        a[0][2] = 7;
        assert_eq!((a[9_999], a[0]), ([1, 2, 3, 4], [0, 0, 7, 0]));
        let empty = ZeroedArray::<u32>::new(0);
        assert!(empty.is_empty());
        let mut small = ZeroedArray::<u8>::new(3);
        small[2] = 9;
        assert_eq!(&small[..], &[0, 0, 9]);
    }
}
