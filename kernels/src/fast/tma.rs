//! TMA tensor maps for the persistent GEMMs (fast_ws.cu): encoded on the host with the driver's
//! `cuTensorMapEncodeTiled` and passed to the kernels by value.

use cudarc::driver::DeviceRepr;

use crate::GpuError;

/// A TMA tensor map (`CUtensorMap`, 128 opaque bytes) as the persistent GEMMs take it: by value
/// (`__grid_constant__ TmaDesc` in fast_ws.cu).
#[repr(C, align(64))]
#[derive(Clone, Copy, Default)]
pub(super) struct TmaDesc([u64; 16]);
// SAFETY: 128 bytes of plain data, the layout of fast_ws.cu's TmaDesc.
unsafe impl DeviceRepr for TmaDesc {}

/// A bf16 tensor map with 128-byte swizzle over `dims` (innermost first; `strides` in elements of every dim
/// but the first) and box `boxd`: the box lands in shared memory as wgmma's 128-byte-swizzle layout, and
/// reads past the tensor's bounds are zero-filled (stores past them are dropped).
pub(super) fn tma_desc(ptr: u64, dims: &[u64], strides: &[u64], boxd: &[u32]) -> Result<TmaDesc, GpuError> {
    use cudarc::driver::sys::*;
    let rank = dims.len();
    if rank == 0 || rank > 3 || strides.len() + 1 != rank || boxd.len() != rank || dims.contains(&0) {
        return Err(GpuError::Input(format!("tensor map: dims {dims:?}, strides {strides:?}, box {boxd:?}")));
    }
    let bytes: Vec<u64> = strides.iter().map(|s| s * 2).collect();
    let ones = [1u32; 3];
    let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
    // SAFETY: the pointers are valid arrays of `rank` (dims, box, element strides) and `rank - 1` (strides)
    // entries; `map` is written by the call.
    let r = unsafe {
        cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            rank as u32,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            bytes.as_ptr(),
            boxd.as_ptr(),
            ones.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r != CUresult::CUDA_SUCCESS {
        return Err(GpuError::Input(format!("cuTensorMapEncodeTiled failed ({r:?}) for dims {dims:?}, strides {strides:?}, box {boxd:?}")));
    }
    // SAFETY: initialised by the successful call above.
    let map = unsafe { map.assume_init() };
    let mut d = TmaDesc::default();
    d.0.copy_from_slice(&map.opaque);
    Ok(d)
}
