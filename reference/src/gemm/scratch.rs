//! Reusable scratch buffers for the fast GEMM.
//!
//! The slice and product buffers of one per-expert GEMM are tens of megabytes; allocating them fresh each
//! call costs a page fault per 4 KiB, which measured as much as the GEMM itself. Buffers are taken out of a
//! thread-local pool and put back after use (take/put rather than borrow, so a nested call on the same
//! thread, e.g. from rayon work stealing, simply allocates its own).

use std::cell::RefCell;

thread_local! {
    static POOL: RefCell<Vec<Vec<f64>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of exactly `len` elements with unspecified contents.
pub(super) fn take(len: usize) -> Vec<f64> {
    let found = POOL.with(|p| {
        let mut p = p.borrow_mut();
        // best fit: the smallest pooled buffer that is large enough, else the largest (it will grow)
        let idx = p
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i)
            .or_else(|| (0..p.len()).max_by_key(|&i| p[i].capacity()));
        idx.map(|i| p.swap_remove(i))
    });
    let mut v = found.unwrap_or_default();
    if v.len() < len {
        v.resize(len, 0.0);
    }
    v.truncate(len);
    v
}

/// A buffer of `len` zeros.
pub(super) fn take_zeroed(len: usize) -> Vec<f64> {
    let mut v = take(len);
    v.fill(0.0);
    v
}

/// Return a buffer to this thread's pool (the pool keeps at most a few).
pub(super) fn give(v: Vec<f64>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        p.push(v);
        if p.len() > 6 {
            let smallest = (0..p.len()).min_by_key(|&i| p[i].capacity()).unwrap_or(0);
            p.swap_remove(smallest);
        }
    });
}
