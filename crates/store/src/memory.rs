//! Allocator settings for a process that moves I/O buffers of 128 KiB to a few MiB, and
//! giving back free heap the store's metadata left behind.

/// Keep large I/O buffers in the heap instead of a fresh `mmap` each. glibc serves
/// allocations of 128 KiB and more (an object-sized read buffer) with `mmap`, and gives the
/// pages back when they are freed: every such buffer then costs a map, an unmap and a page
/// fault per 4 KiB touched, which profiles of 1 MiB reads showed at over 10 % of the CPU.
/// With a fixed threshold of 32 MiB and trimming only above 512 MiB of free heap top,
/// buffers are reused; memory stays bounded by the peak of buffers in flight. Call once, at
/// start, before threads allocate. Does nothing on other C libraries.
pub fn keep_io_buffers_in_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator tunables; it takes plain integers and is
        // safe to call at any time (glibc serialises it against allocation).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
        }
    }
}

/// Hand the allocator's free heap pages back to the kernel (glibc's `malloc_trim`). With the
/// trim threshold [`keep_io_buffers_in_heap`] sets, memory the store's metadata freed (the
/// object table's hash array each time it doubles, dirty crcs dropped by a checkpoint,
/// buffers of a listing) would stay resident for good; a checkpoint calls this once it is
/// written (docs/design.md, "Memory"). Freed I/O buffers go back too and are faulted in again
/// when next used: a few page faults per checkpoint. Returns the microseconds it took.
pub fn release_free_heap() -> u64 {
    let started = std::time::Instant::now();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only returns free pages of the allocator's own arenas to the
        // kernel; it takes the arenas' locks like any allocation and touches no live memory.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    started.elapsed().as_micros() as u64
}
