//! The functions' heap, counted: what a process holds between invocations (the watched
//! view, the claim cache) and what one invocation needs on top of it, so a sizing
//! question ("how much of the 256 MB is the cluster, how much the decision") has an
//! answer from the function's own summary, not a guess from its peak RSS.
//!
//! [`CountingAllocator`] wraps mimalloc with two relaxed atomic updates per allocation:
//! the bytes live now, and the most live since the last [`begin_invocation`]. mimalloc,
//! not glibc's allocator: a tick allocates and frees millions of small strings and
//! vectors, and glibc spent about two fifths of a quiet minute's CPU consolidating and
//! unlinking its free chunks (measured at 1,000 nodes; docs/benchmarks.md). Its v2, as
//! the CLI's: it hands freed pages back to the system within milliseconds, so a warm
//! process's resident set stays near what it holds. A main installs it as its `#[global_allocator]`; in a process
//! that did not (a test calling a handler in process), [`reading`] is `None`.

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);
/// Live bytes once the cold start was done, plus one (0: not marked yet).
static BASELINE: AtomicUsize = AtomicUsize::new(0);

/// mimalloc, counting the bytes it hands out. See the module documentation.
pub struct CountingAllocator;

// SAFETY: every call is forwarded to `MiMalloc` unchanged; only counters are updated.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `MiMalloc`'s.
        let ptr = unsafe { MiMalloc.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `MiMalloc`'s.
        let ptr = unsafe { MiMalloc.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `MiMalloc`'s.
        unsafe { MiMalloc.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `MiMalloc`'s.
        let moved = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        moved
    }
}

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
    if !COUNTING.load(Ordering::Relaxed) {
        COUNTING.store(true, Ordering::Relaxed);
    }
}

/// The heap as counted: bytes live now, and the most live since the last
/// [`begin_invocation`] (or since the process started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapReading {
    pub live_bytes: usize,
    pub peak_bytes: usize,
}

/// The heap now; `None` when [`CountingAllocator`] is not the process's allocator.
pub fn reading() -> Option<HeapReading> {
    COUNTING.load(Ordering::Relaxed).then(|| HeapReading {
        live_bytes: LIVE.load(Ordering::Relaxed),
        peak_bytes: PEAK.load(Ordering::Relaxed),
    })
}

/// An invocation starts: the peak counts from what is live now. Returns the heap at
/// its start.
pub fn begin_invocation() -> Option<HeapReading> {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    reading()
}

/// The cold start is done (configuration read, clients and ports built): what is live
/// now is the baseline every invocation's figures are read against.
pub fn mark_baseline() {
    BASELINE.store(LIVE.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// The heap as [`mark_baseline`] found it; `None` before it, or when not counting.
pub fn baseline() -> Option<HeapReading> {
    let marked = BASELINE.load(Ordering::Relaxed).checked_sub(1)?;
    reading().map(|_| HeapReading {
        live_bytes: marked,
        peak_bytes: marked,
    })
}

/// What the invocation that began at `start` ([`begin_invocation`]) used, when it ends:
/// its figure for the summary, `None` when not counting.
pub fn invocation_ended(start: Option<HeapReading>) -> Option<InvocationHeap> {
    InvocationHeap::ended(baseline(), start)
}

/// One invocation's heap, for its summary: the cold start's baseline (configuration,
/// clients, ports), what the process held when the invocation began (the baseline,
/// plus the watched view and the caches once warm), the most it held during it, and
/// what it held when it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvocationHeap {
    /// After the cold start built the configuration, the clients and the ports.
    pub baseline_bytes: usize,
    pub at_start_bytes: usize,
    pub peak_bytes: usize,
    pub at_end_bytes: usize,
}

impl InvocationHeap {
    /// The invocation that began at `start` ends now; `None` when not counting.
    pub fn ended(baseline: Option<HeapReading>, start: Option<HeapReading>) -> Option<Self> {
        let (baseline, start, end) = (baseline?, start?, reading()?);
        Some(InvocationHeap {
            baseline_bytes: baseline.live_bytes,
            at_start_bytes: start.live_bytes,
            peak_bytes: end.peak_bytes,
            at_end_bytes: end.live_bytes,
        })
    }

    /// As the summary prints it.
    pub fn to_json(&self) -> Value {
        json!({
            "baselineBytes": self.baseline_bytes,
            "atStartBytes": self.at_start_bytes,
            "peakBytes": self.peak_bytes,
            "atEndBytes": self.at_end_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the counters are the process's, and the first check needs them untouched.
    #[test]
    fn the_heap_reads_as_nothing_until_counted_then_follows_allocations() {
        // The test harness runs on the system allocator: nothing went through the
        // counter yet, so no figure is made up.
        assert_eq!(reading(), None);
        assert_eq!(InvocationHeap::ended(reading(), begin_invocation()), None);

        let layout = Layout::from_size_align(1 << 20, 8).unwrap();
        let before = LIVE.load(Ordering::Relaxed);
        // SAFETY: a non-zero layout, freed below with the same layout.
        let ptr = unsafe { CountingAllocator.alloc(layout) };
        assert!(!ptr.is_null());
        assert_eq!(LIVE.load(Ordering::Relaxed), before + (1 << 20));
        assert!(PEAK.load(Ordering::Relaxed) >= before + (1 << 20));
        // SAFETY: allocated above with this layout.
        let ptr = unsafe { CountingAllocator.realloc(ptr, layout, 1 << 10) };
        assert_eq!(LIVE.load(Ordering::Relaxed), before + (1 << 10));
        let small = Layout::from_size_align(1 << 10, 8).unwrap();
        // SAFETY: reallocated above to this size.
        unsafe { CountingAllocator.dealloc(ptr, small) };
        assert_eq!(LIVE.load(Ordering::Relaxed), before);
        let started = begin_invocation().expect("counting since the first allocation");
        assert_eq!(started.peak_bytes, started.live_bytes);
    }
}
