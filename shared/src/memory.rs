//! glibc malloc settings for a small, long-running, multi-threaded process.
//!
//! By default glibc gives each thread that allocates its own arena (up to
//! 8 per core) and lets the mmap threshold grow with the largest buffer freed,
//! so a burst of work (a list of thousands of objects, a large Route53
//! response) leaves megabytes of freed memory in several heaps that the
//! process keeps as RSS. An operator is I/O-bound: two arenas are plenty,
//! big buffers go straight to mmap (and back to the kernel when freed), and
//! free memory at the top of a heap is returned sooner. Measured with
//! service-dns writing 5,201 records: peak RSS 45.5 MiB with glibc's
//! defaults, 38-40 MiB with these.
//!
//! Each setting is left alone when its environment variable (or
//! `GLIBC_TUNABLES`) is set, so an operator of the operator can still tune it.

/// Arenas: one per tokio worker on a 2-core node, shared beyond that.
const ARENA_MAX: i32 = 2;
/// Allocations from this size on are mmapped (and unmapped when freed).
const MMAP_THRESHOLD: i32 = 64 * 1024;
/// Free memory above this at the top of a heap is given back.
const TRIM_THRESHOLD: i32 = 128 * 1024;

/// Applies the settings and returns the environment variables of those
/// applied (the others were set by the user, or refused). Call it first
/// thing in `main`, before any thread is started ([`crate::Operator::run`]
/// does).
pub fn tune_allocator() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut applied = Vec::new();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tunables = std::env::var_os("GLIBC_TUNABLES").is_some();
        let settings = [
            ("MALLOC_ARENA_MAX", glibc::M_ARENA_MAX, ARENA_MAX),
            ("MALLOC_MMAP_THRESHOLD_", glibc::M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            ("MALLOC_TRIM_THRESHOLD_", glibc::M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        ];
        for (var, param, value) in settings {
            if !tunables && std::env::var_os(var).is_none() && glibc::mallopt(param, value) {
                applied.push(var);
            }
        }
    }
    applied
}

/// Gives free heap memory back to the kernel (after a large piece of work,
/// so that the steady-state RSS is what is in use, not what was used).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::malloc_trim();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod glibc {
    pub use libc::{M_ARENA_MAX, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD};

    /// Whether glibc took the setting.
    pub fn mallopt(param: i32, value: i32) -> bool {
        // SAFETY: mallopt only changes allocator parameters; any value is
        // accepted or refused (returns 0), never undefined behaviour.
        let ok = unsafe { libc::mallopt(param, value) } != 0;
        if !ok {
            eprintln!("warning: mallopt({param}, {value}) was refused; keeping glibc's default");
        }
        ok
    }

    pub fn malloc_trim() {
        // SAFETY: malloc_trim walks the allocator's own free lists under its
        // locks; it takes no pointers from us.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_every_setting_the_environment_leaves_open() {
        let tunables = std::env::var_os("GLIBC_TUNABLES").is_some();
        let open: Vec<&str> = ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
            .into_iter()
            .filter(|v| !tunables && std::env::var_os(v).is_none())
            .collect();
        assert_eq!(tune_allocator(), open);
    }

    /// A smoke test: trimming while blocks are live must not corrupt them.
    /// (What the settings buy is measured, not asserted: the RSS figures of
    /// `cargo xtask bench service-dns`, in the module's docs.)
    #[test]
    fn trimming_with_live_blocks_keeps_them_intact() {
        tune_allocator();
        let big: Vec<u8> = vec![7; 1 << 20];
        let small: Vec<Box<u64>> = (0..10_000u64).map(Box::new).collect();
        drop(big);
        release_free_memory();
        assert_eq!(small.iter().map(|b| **b).sum::<u64>(), (0..10_000u64).sum::<u64>());
    }
}
