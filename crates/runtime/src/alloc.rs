//! The allocator is the binary's choice, not this library's: a library that
//! installed a `#[global_allocator]` would impose it (and its C build) on
//! every program linking it. presa's binaries opt in to jemalloc with one
//! line, and so can any server built on [`App`](crate::App):
//!
//! ```ignore
//! presa_runtime::use_jemalloc!();
//! ```
//!
//! Why jemalloc: presa-bench measured it faster than glibc's malloc and than
//! mimalloc, with less memory per listen stream, and (with its background
//! threads, which [`App`](crate::App) turns on when jemalloc is the
//! allocator) it gives freed memory back to the system after a burst. Tune it
//! with `_RJEM_MALLOC_CONF`. Without the opt-in the process keeps the system
//! allocator and nothing here runs.

/// jemalloc, for `#[global_allocator]` (see [`use_jemalloc!`](crate::use_jemalloc)).
#[cfg(feature = "jemalloc")]
pub use tikv_jemallocator::Jemalloc;

/// Make jemalloc the program's global allocator: one line at the top level of
/// a binary crate (needs presa-runtime's default feature `jemalloc`).
#[cfg(feature = "jemalloc")]
#[macro_export]
macro_rules! use_jemalloc {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::Jemalloc = $crate::Jemalloc;
    };
}

/// Whether jemalloc is this program's allocator: it counted this thread's
/// allocations (a program that did not opt in allocated nothing through it).
pub fn jemalloc_in_use() -> bool {
    #[cfg(feature = "jemalloc")]
    return tikv_jemalloc_ctl::thread::allocatedp::read().is_ok_and(|allocated| allocated.get() > 0);
    #[cfg(not(feature = "jemalloc"))]
    false
}

/// When jemalloc is the allocator, let it give freed memory back to the
/// system by itself (background purging threads, after its 10 s decay), so a
/// burst (thousands of listen streams, a queue of tasks) does not pin the
/// process at its peak RSS while it idles. A no-op otherwise.
pub(crate) fn return_freed_memory() {
    #[cfg(feature = "jemalloc")]
    if jemalloc_in_use()
        && let Err(e) = tikv_jemalloc_ctl::background_thread::write(true)
    {
        eprintln!("jemalloc background threads not enabled: {e}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_library_installs_no_allocator() {
        let v = vec![0u8; 1 << 20];
        assert!(!super::jemalloc_in_use(), "a library must leave the allocator to the binary");
        drop(v);
    }
}
