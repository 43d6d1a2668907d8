//! Launching the fast kernels by `cuLaunchKernelEx`, for the two launch attributes cudarc's launch builder does
//! not take: clusters (the persistent GEMMs with the weight tile multicast) and programmatic dependent launch
//! (PDL, `MOE_FAST_PDL=1`: see cuda/fast/fast_pdl.cu for the rule the kernels keep).

use std::ffi::c_void;

use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, DriverError, LaunchConfig};

/// What may be passed to a fast kernel by value: device pointers and 4- or 8-byte scalars, each held in an
/// 8-byte slot whose first bytes are the parameter (little-endian: the host and the GPU).
pub(super) trait KernelArg {
    fn slot(&self, stream: &CudaStream) -> u64;
}
impl<T> KernelArg for CudaSlice<T> {
    fn slot(&self, stream: &CudaStream) -> u64 {
        self.device_ptr(stream).0
    }
}
/// A scalar parameter's slot: its bytes, zero-extended to 8.
pub(super) trait Scalar: Copy {
    fn bits(self) -> u64;
}
impl Scalar for u64 {
    fn bits(self) -> u64 {
        self
    }
}
impl Scalar for i64 {
    fn bits(self) -> u64 {
        self as u64
    }
}
impl Scalar for i32 {
    fn bits(self) -> u64 {
        self as u32 as u64
    }
}
impl Scalar for f32 {
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}
impl<S: Scalar> KernelArg for S {
    fn slot(&self, _: &CudaStream) -> u64 {
        self.bits()
    }
}

/// One launch of a fast kernel, in the manner of cudarc's launch builder:
/// `Launch::new(stream, f, pdl).arg(&n).arg(&buf).launch(cfg)`; parameters are scalars and device pointers
/// (`arg`, by value) or plain structs (`arg_ref`: GemmParams, tensor maps, read where they lie).
pub(super) struct Launch<'a> {
    stream: &'a CudaStream,
    func: &'a CudaFunction,
    pdl: bool,
    cluster: u32,
    params: Vec<Param<'a>>,
}

enum Param<'a> {
    Slot(u64),
    Ref(*const c_void, std::marker::PhantomData<&'a ()>),
}

impl<'a> Launch<'a> {
    pub(super) fn new(stream: &'a CudaStream, func: &'a CudaFunction, pdl: bool) -> Self {
        Launch { stream, func, pdl, cluster: 1, params: Vec::new() }
    }

    pub(super) fn arg<A: KernelArg + ?Sized>(&mut self, a: &A) -> &mut Self {
        self.params.push(Param::Slot(a.slot(self.stream)));
        self
    }

    pub(super) fn arg_ref<T: DeviceRepr>(&mut self, v: &'a T) -> &mut Self {
        self.params.push(Param::Ref(v as *const T as *const c_void, std::marker::PhantomData));
        self
    }

    /// Blocks in clusters of `n` along x (the grid a multiple of it).
    pub(super) fn cluster(&mut self, n: usize) -> &mut Self {
        self.cluster = n as u32;
        self
    }

    /// # Safety
    /// The arguments must match the kernel's parameter list, and the buffers be sized for what it indexes.
    pub(super) unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        let mut args: Vec<*mut c_void> = self
            .params
            .iter_mut()
            .map(|p| match p {
                Param::Slot(s) => s as *mut u64 as *mut c_void,
                Param::Ref(r, _) => *r as *mut c_void,
            })
            .collect();
        launch_ex(self.stream, self.func, cfg, self.cluster, self.pdl, &mut args)
    }
}

/// `cuLaunchKernelEx` of `func` with `args` (pointers to each parameter's value, in order), in clusters of
/// `cluster` blocks along x (1: none), with programmatic stream serialisation when `pdl`.
///
/// # Safety
/// As `cuLaunchKernelEx`: `args` matches the kernel's parameters, the grid is a multiple of `cluster`.
pub(super) unsafe fn launch_ex(stream: &CudaStream, func: &CudaFunction, cfg: LaunchConfig, cluster: u32, pdl: bool, args: &mut [*mut c_void]) -> Result<(), DriverError> {
    stream.context().bind_to_thread()?;
    with_config(cfg, cluster, pdl, stream.cu_stream(), |config| unsafe { sys::cuLaunchKernelEx(config, func.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) }).result()
}

/// The driver's launch configuration of `cfg` on `stream` with the attributes (clusters of `cluster` along x
/// when more than 1; PDL), handed to `f`: the configuration points at its attributes, which live only during
/// the call.
pub(super) fn with_config<R>(cfg: LaunchConfig, cluster: u32, pdl: bool, stream: sys::CUstream, f: impl FnOnce(&sys::CUlaunchConfig) -> R) -> R {
    // SAFETY: CUlaunchAttribute is a plain C struct (an id and a union of plain values); all zeros is valid.
    let mut attrs: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    let mut n = 0;
    if cluster > 1 {
        attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: cluster, y: 1, z: 1 };
        n += 1;
    }
    if pdl {
        attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[n].value.programmaticStreamSerializationAllowed = 1;
        n += 1;
    }
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: n as u32,
    };
    f(&config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scalar_is_the_first_bytes_of_its_slot() {
        assert_eq!(Scalar::bits(-2i32).to_le_bytes()[..4], (-2i32).to_le_bytes());
        assert_eq!(Scalar::bits(-2i32) >> 32, 0, "no sign extension past the parameter's 4 bytes");
        assert_eq!(Scalar::bits(1.5f32).to_le_bytes()[..4], 1.5f32.to_le_bytes());
        assert_eq!(Scalar::bits(-3i64).to_le_bytes(), (-3i64).to_le_bytes());
        assert_eq!(Scalar::bits(u64::MAX - 1), u64::MAX - 1);
    }

    #[test]
    fn the_configuration_carries_only_the_attributes_asked_for() {
        let cfg = LaunchConfig { grid_dim: (4, 2, 1), block_dim: (128, 1, 1), shared_mem_bytes: 96 };
        let stream = std::ptr::null_mut();
        with_config(cfg, 1, false, stream, |c| assert_eq!(c.numAttrs, 0));
        with_config(cfg, 2, true, stream, |c| {
            assert_eq!((c.gridDimX, c.gridDimY, c.blockDimX, c.sharedMemBytes, c.numAttrs), (4, 2, 128, 96, 2));
            // SAFETY: numAttrs entries were written by with_config and live during the call
            let a = unsafe { std::slice::from_raw_parts(c.attrs, 2) };
            assert_eq!(a[0].id, sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
            assert_eq!(unsafe { a[0].value.clusterDim.x }, 2);
            assert_eq!(a[1].id, sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
            assert_eq!(unsafe { a[1].value.programmaticStreamSerializationAllowed }, 1);
        });
        with_config(cfg, 1, true, stream, |c| {
            assert_eq!(c.numAttrs, 1);
            assert_eq!(unsafe { (*c.attrs).id }, sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
        });
    }
}
