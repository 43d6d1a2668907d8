//! Compiling the fast kernels (NVRTC, once per `FastKernels`) for the GPU's architecture and loading them.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

use super::source;
use crate::{Gpu, GpuError};

/// Bytes of one operand tile of the mma.sync GEMMs in shared memory (128 x 64 bf16).
const TILE_BYTES: usize = 128 * 64 * 2;

/// The compiled fast kernels.
pub struct FastKernels {
    _module: Arc<CudaModule>,
    functions: HashMap<&'static str, CudaFunction>,
    /// cp.async pipeline depth compiled in.
    pub stages: usize,
    /// NVRTC target, e.g. "sm_90a".
    pub arch: &'static str,
    /// Whether the wgmma (Hopper) row GEMMs are available (sm_90a).
    pub wgmma: bool,
    /// Streaming multiprocessors of the GPU (the persistent GEMMs' grid).
    pub sms: usize,
    /// Experiment `WS_EXP_CLOCKS` compiled in (MOE_FAST_DEFINES): print the persistent GEMMs' cycle counts.
    pub clocks: bool,
}

impl FastKernels {
    /// Compile (NVRTC) and load the fast kernels for `gpu` with a `stages`-deep pipeline (2..=4).
    pub fn load(gpu: &Gpu, stages: usize) -> Result<FastKernels, GpuError> {
        if !(2..=4).contains(&stages) {
            return Err(GpuError::Input(format!("pipeline stages must be 2, 3 or 4, not {stages}")));
        }
        let (major, minor) = gpu.ctx.compute_capability()?;
        let arch: &'static str = match (major, minor) {
            (9, 0) => "sm_90a",
            (8, 0) => "sm_80",
            (8, 6) => "sm_86",
            (8, 9) => "sm_89",
            (10, 0) => "sm_100a",
            (12, 0) => "sm_120",
            (m, _) if m >= 8 => "compute_80",
            _ => return Err(GpuError::Input(format!("the fast kernels need compute capability 8.0 or newer (mma.sync bf16, ldmatrix, cp.async); this GPU is {major}.{minor}"))),
        };
        let mut options = vec!["--std=c++17".to_string()];
        // Source lines in the SASS, for profilers (`ncu --page source`); off by default, it changes nothing else.
        if std::env::var_os("MOE_FAST_LINEINFO").is_some() {
            options.push("-lineinfo".into());
        }
        // Experiments only: extra preprocessor definitions, e.g. MOE_FAST_DEFINES="WS_EXP_NO_STORE" (see the
        // WS_EXP_ switches in fast_ws.cu; they break the results on purpose, to time the parts of a kernel).
        let defines: Vec<String> = std::env::var("MOE_FAST_DEFINES").unwrap_or_default().split_whitespace().map(|d| d.trim_start_matches("-D").to_string()).collect();
        options.extend(defines.iter().map(|d| format!("-D{d}")));
        let opts = CompileOptions {
            arch: Some(arch),
            fmad: Some(true),
            options,
            name: Some("moe_fast.cu".into()),
            ..Default::default()
        };
        let ptx = compile_ptx_with_opts(source::translation_unit(stages), opts).map_err(|e| GpuError::Compile(format!("{e:?}")))?;
        let module = gpu.ctx.load_module(ptx)?;
        let mut functions = HashMap::new();
        let smem = (2 * stages * TILE_BYTES) as i32;
        for &k in source::GEMMS {
            let f = module.load_function(k)?;
            f.set_attribute(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)?;
            functions.insert(k, f);
        }
        for &k in source::OTHERS {
            functions.insert(k, module.load_function(k)?);
        }
        let wgmma = arch == "sm_90a";
        if wgmma {
            for (names, smem) in [(source::WG_GEMMS, source::WG_SMEM), (source::WS_GEMMS, source::WS_SMEM)] {
                for &k in names {
                    let f = module.load_function(k)?;
                    f.set_attribute(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
                    functions.insert(k, f);
                }
            }
        }
        let sms = gpu.ctx.attribute(cudarc::driver::sys::CUdevice_attribute_enum::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize;
        let clocks = defines.iter().any(|d| d == "WS_EXP_CLOCKS");
        Ok(FastKernels { _module: module, functions, stages, arch, wgmma, sms, clocks })
    }

    pub(super) fn f(&self, name: &str) -> &CudaFunction {
        &self.functions[name]
    }
    pub(super) fn smem(&self) -> u32 {
        (2 * self.stages * TILE_BYTES) as u32
    }
}

