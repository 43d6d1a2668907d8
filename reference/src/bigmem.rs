//! Zero-filled arrays for the layer's large results, backed by transparent huge pages where Linux offers
//! them.
//!
//! The weight gradients of one qwen3-30b-a3b layer are 4.8 GB of f64, and the emulator keeps three arrays of
//! that size. Fresh memory is zeroed by the kernel on first touch, one fault per 4 KiB page; measured on
//! the development VM (`BENCHMARKS.md`), that ran at 0.5-2.8 GB/s and was a third of the exact layer's CPU
//! time. With `MADV_HUGEPAGE` the same first touch faults once per 2 MiB and ran at 5-20 GB/s once the
//! host had backed the memory. The advice only changes how pages are mapped, never their contents, so
//! results are bit-identical with or without it (and on other systems this is a plain zeroed allocation).

use ndarray::{Array, Dimension, IntoDimension};
use num_traits::Zero;

/// Allocations smaller than this are left alone: they hold at most a few huge pages.
const ADVISE_FROM_BYTES: usize = 8 << 20;

/// A zero-filled array of the given shape (standard layout).
pub fn zeros<T, Sh>(shape: Sh) -> Array<T, Sh::Dim>
where
    T: Zero + Clone,
    Sh: IntoDimension,
    Sh::Dim: Dimension,
{
    let dim = shape.into_dimension();
    let v = zeroed_vec(dim.size());
    Array::from_shape_vec(dim, v).expect("length equals the shape's size")
}

/// `len` zeros. `vec![0.0; len]` takes memory from `calloc`, which for large sizes maps fresh, untouched
/// pages, so the advice below reaches them before their first fault.
pub fn zeroed_vec<T: Zero + Clone>(len: usize) -> Vec<T> {
    let v = vec![T::zero(); len];
    advise_huge(v.as_ptr() as usize, len * std::mem::size_of::<T>());
    v
}

#[cfg(target_os = "linux")]
fn advise_huge(start: usize, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < ADVISE_FROM_BYTES {
        return;
    }
    // Only whole huge pages inside the allocation: madvise needs a page-aligned start, and the advice must
    // not reach memory the allocation does not own.
    let lo = start.next_multiple_of(HUGE);
    let hi = (start + bytes) / HUGE * HUGE;
    if hi > lo {
        // SAFETY: [lo, hi) lies inside the live allocation; MADV_HUGEPAGE changes no contents. A failure
        // (e.g. THP disabled) leaves ordinary pages, which is fine.
        unsafe {
            libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_start: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    #[test]
    fn zeros_have_the_shape_and_are_zero() {
        let a = super::zeros::<f64, _>((3usize, 5usize));
        assert_eq!(a.dim(), (3, 5));
        assert!(a.is_standard_layout());
        let big = super::zeros::<f32, _>((2usize, 1usize << 11, 1usize << 10)); // 16 MiB: advised
        assert_eq!(big.dim(), (2, 2048, 1024));
        assert!(big.iter().all(|&v| v == 0.0));
    }
}
