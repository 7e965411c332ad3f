//! The bytes of payload config-copier holds at once, all rules together
//! (`--max-bytes-in-flight`): a semaphore counted in KiB. Every read of a
//! source's payload, and every write of a copy, holds its share until done;
//! nothing else holds a payload (watches are metadata only). So the memory
//! payloads take is bounded by this budget, never by what rules select.
//!
//! The shares are estimates of what the process really allocates per byte
//! of payload (the response body, its parsed JSON, the parsed source; a
//! write's manifest and its serialised body), on the side of too much.

use tokio::sync::{Semaphore, SemaphorePermit};

/// The largest source the API server stores: etcd refuses requests over
/// 1.5 MiB (a ConfigMap's or Secret's data is at most 1 MiB, a Secret's
/// base64-encoded on the wire).
pub const MAX_SOURCE_BYTES: u64 = 1536 * 1024;
/// Bytes held per payload byte while a source is read and parsed.
const READ_FACTOR: u64 = 3;
/// Bytes held per payload byte by one write in flight.
const WRITE_FACTOR: u64 = 3;
/// Bytes counted per request besides the payload.
const OVERHEAD: u64 = 4 * 1024;

/// What reading a source of `size` bytes holds at its peak.
pub fn read_cost(size: u64) -> u64 {
    READ_FACTOR * size + OVERHEAD
}

/// What holding a read source of `size` bytes costs.
pub fn hold_cost(size: u64) -> u64 {
    size + OVERHEAD
}

/// What one write of a copy of `size` bytes holds.
pub fn write_cost(size: u64) -> u64 {
    WRITE_FACTOR * size + OVERHEAD
}

/// What holding a source and `writes` writes of its copies costs.
pub fn writes_cost(size: u64, writes: usize) -> u64 {
    hold_cost(size) + writes as u64 * write_cost(size)
}

/// How many writes of a `size`-byte source's copies fit in `bytes` besides
/// the source itself: at least one (a source larger than the whole budget
/// is still copied, alone), at most `max`.
pub fn writes_fitting(size: u64, bytes: u64, max: usize) -> usize {
    let n = bytes.saturating_sub(hold_cost(size)) / write_cost(size);
    usize::try_from(n).unwrap_or(usize::MAX).clamp(1, max.max(1))
}

fn kib(bytes: u64) -> u64 {
    bytes.div_ceil(1024)
}

/// The shared budget.
pub struct Budget {
    semaphore: Semaphore,
    total_kib: u64,
}

impl Budget {
    /// A budget of `kib` KiB (at least 1).
    pub fn new(kib: u32) -> Self {
        let kib = kib.max(1);
        Self { semaphore: Semaphore::new(kib as usize), total_kib: u64::from(kib) }
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_kib * 1024
    }

    /// KiB held now, all holders together.
    pub fn held_kib(&self) -> u64 {
        self.total_kib.saturating_sub(self.semaphore.available_permits() as u64)
    }

    fn permits(&self, bytes: u64) -> u32 {
        // A share larger than the whole budget takes the whole budget: it
        // waits until nothing else is held, then runs alone.
        u32::try_from(kib(bytes).clamp(1, self.total_kib)).unwrap_or(u32::MAX)
    }

    /// Waits for `bytes` (the whole budget at most). `None` once closed.
    pub async fn acquire(&self, bytes: u64) -> Option<Share<'_>> {
        let permit = self.semaphore.acquire_many(self.permits(bytes)).await.ok()?;
        Some(Share { permit })
    }

    /// Up to `bytes` more for `share`, as much as is free now (never
    /// waits: a holder that waited for more could wait forever on other
    /// holders doing the same). Returns whether anything was added.
    pub fn try_grow<'a>(&'a self, share: &mut Share<'a>, bytes: u64) -> bool {
        let free = self.semaphore.available_permits() as u64;
        let want = u32::try_from(kib(bytes).min(free)).unwrap_or(u32::MAX);
        if want == 0 {
            return false;
        }
        match self.semaphore.try_acquire_many(want) {
            Ok(more) => {
                share.permit.merge(more);
                true
            }
            // Taken meanwhile by another holder: go on with what is held.
            Err(_) => false,
        }
    }
}

/// A holder's part of the budget, given back when dropped.
pub struct Share<'a> {
    permit: SemaphorePermit<'a>,
}

impl Share<'_> {
    pub fn bytes(&self) -> u64 {
        self.permit.num_permits() as u64 * 1024
    }

    /// Gives back all but `bytes` (at least 1 KiB stays).
    pub fn shrink_to(&mut self, bytes: u64) {
        let keep = usize::try_from(kib(bytes).max(1)).unwrap_or(usize::MAX);
        let held = self.permit.num_permits();
        if held > keep {
            drop(self.permit.split(held - keep));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn writes_fit_the_budget_but_never_fewer_than_one() {
        const MI: u64 = 1024 * 1024;
        // 700 KB Secrets (933 KB base64) in 16 MiB: a handful of writes at once.
        let n = writes_fitting(933_000, 16 * MI, 32);
        assert!((4..=6).contains(&n), "{n}");
        assert!(writes_cost(933_000, n) <= 16 * MI);
        // Small sources: the concurrency is the limit.
        assert_eq!(writes_fitting(256, 16 * MI, 32), 32);
        // Larger than the whole budget: still one.
        assert_eq!(writes_fitting(MAX_SOURCE_BYTES, 64 * 1024, 32), 1);
        assert_eq!(writes_fitting(10, 16 * MI, 0), 1);
    }

    #[tokio::test]
    async fn shares_are_bounded_by_the_budget_and_given_back() {
        let budget = Budget::new(1024);
        // More than the budget: the whole budget.
        let mut big = budget.acquire(10 * 1024 * 1024).await.unwrap();
        assert_eq!(big.bytes(), 1024 * 1024);
        assert_eq!(budget.held_kib(), 1024);
        // Nothing left: a second holder cannot start.
        assert!(budget.semaphore.try_acquire().is_err());
        big.shrink_to(100 * 1024);
        assert_eq!(budget.held_kib(), 100);
        let mut small = budget.acquire(1).await.unwrap();
        assert_eq!(small.bytes(), 1024);
        assert!(budget.try_grow(&mut small, 900 * 1024));
        assert_eq!(budget.held_kib(), 1001);
        assert!(budget.try_grow(&mut small, 100 * 1024), "what is free (23 KiB)");
        assert_eq!((small.bytes(), budget.held_kib()), (924 * 1024, 1024));
        assert!(!budget.try_grow(&mut small, 1024), "nothing is free");
        drop((big, small));
        assert_eq!(budget.held_kib(), 0);
    }
}
