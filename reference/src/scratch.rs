//! Per-thread reuse of large temporaries (the emulator's per-expert operand arrays).
//!
//! Each expert's GEMM stage makes weight-sized temporaries (a transposed weight, its codes, magnitudes,
//! dequantised magnitudes, the tensor-core model's panels: ~150 MB per expert at qwen3-30b-a3b's shape)
//! and drops them before the next expert; the weight-gradient stages make smaller ones (an expert's rows
//! transposed, their codes and magnitudes, the bound's product tiles). The allocator gave much of that
//! memory back to the system in between, so the next expert faulted it in again: about 250,000 page faults
//! of one fp8-block run at 1024 tokens (`BENCHMARKS.md`, session 7), and fresh memory is what the emulator
//! spends most of its time on. Here a thread keeps the buffers it gave back and hands them out again,
//! filled exactly like a fresh `vec![fill; len]`, so contents, and results, do not depend on reuse.

use std::cell::RefCell;

/// Buffers smaller than this are left to the allocator.
const MIN_BYTES: usize = 256 << 10;
/// Buffers kept per thread and element type: more than one expert's stage gives back at once.
const KEEP: usize = 32;

/// Element types with a per-thread pool.
pub trait Pooled: Copy + 'static {
    fn with_pool<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> R;
}

macro_rules! pooled {
    ($($t:ty),*) => {$(
        impl Pooled for $t {
            fn with_pool<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> R {
                thread_local!(static POOL: RefCell<Vec<Vec<$t>>> = const { RefCell::new(Vec::new()) });
                POOL.with_borrow_mut(f)
            }
        }
    )*};
}
pooled!(f64, i32, [i32; 16]);

/// `len` copies of `fill`, in the smallest buffer this thread gave back that holds them (else a new one).
pub fn filled<T: Pooled>(len: usize, fill: T) -> Vec<T> {
    if len * std::mem::size_of::<T>() < MIN_BYTES {
        return vec![fill; len]; // small: never takes a large kept buffer
    }
    let reused = T::with_pool(|p| {
        let best = p.iter().enumerate().filter(|(_, b)| b.capacity() >= len).min_by_key(|(_, b)| b.capacity()).map(|(i, _)| i);
        best.map(|i| p.swap_remove(i))
    });
    match reused {
        Some(mut v) => {
            v.clear();
            v.resize(len, fill);
            v
        }
        None => vec![fill; len],
    }
}

/// A zero `[rows, cols]` array in a reused buffer ([`filled`]).
pub fn zeros2(rows: usize, cols: usize) -> ndarray::Array2<f64> {
    ndarray::Array2::from_shape_vec((rows, cols), filled(rows * cols, 0.0)).expect("length equals the shape's size")
}

/// Keep `v` for this thread's next [`filled`] (the smallest kept buffer goes when more than [`KEEP`]).
pub fn give<T: Pooled>(v: Vec<T>) {
    if v.capacity() * std::mem::size_of::<T>() < MIN_BYTES {
        return;
    }
    T::with_pool(|p| {
        p.push(v);
        if p.len() > KEEP {
            let smallest = (0..p.len()).min_by_key(|&i| p[i].capacity()).expect("non-empty");
            p.swap_remove(smallest);
        }
    });
}

/// Give back an owned array's buffer.
pub fn give_array<T: Pooled, D: ndarray::Dimension>(a: ndarray::Array<T, D>) {
    give(a.into_raw_vec_and_offset().0);
}

/// Free every pool of this thread.
fn clear_here() {
    f64::with_pool(Vec::clear);
    i32::with_pool(Vec::clear);
    <[i32; 16]>::with_pool(Vec::clear);
}

/// Free the pools of the calling thread and of every thread of the rayon pool (at the end of a run, so
/// that a process does not keep them).
pub fn release() {
    clear_here();
    rayon::broadcast(|_| clear_here());
}

#[cfg(test)]
mod tests {
    #[test]
    fn reused_buffers_are_filled_like_fresh_ones() {
        let mut v = super::filled(1 << 18, 0.0f64);
        v.iter_mut().for_each(|x| *x = 7.0);
        super::give(v);
        let w = super::filled(1 << 17, 0.0f64);
        assert_eq!(w.len(), 1 << 17);
        assert!(w.capacity() >= 1 << 18, "the given buffer was reused");
        assert!(w.iter().all(|&x| x == 0.0));
        super::release();
    }
}
