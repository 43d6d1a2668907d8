//! Opening the GPU: load the driver and NVRTC (clear errors when absent), compile the kernels once per
//! process for the device's architecture, load them.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use crate::error::GpuError;
use crate::source;

/// A device with the MoE kernels loaded.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    functions: HashMap<&'static str, CudaFunction>,
    /// e.g. "NVIDIA H200 (sm_90)"
    pub name: String,
}

fn loadable(lib: &str) -> Result<(), String> {
    let candidates = cudarc::get_lib_name_candidates(lib);
    for c in &candidates {
        // SAFETY: loading a shared library runs its initialisers; these are the CUDA libraries cudarc itself
        // would load next.
        if unsafe { libloading::Library::new(c) }.is_ok() {
            return Ok(());
        }
    }
    Err(candidates.join(", "))
}

/// PTX for the kernels, compiled once per process and architecture.
fn ptx_for(arch: &'static str) -> Result<Ptx, GpuError> {
    static CACHE: OnceLock<std::sync::Mutex<HashMap<&'static str, Ptx>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = cache.get(arch) {
        return Ok(p.clone());
    }
    let opts = CompileOptions {
        arch: Some(arch),
        fmad: Some(true),
        options: vec!["--std=c++17".into()],
        name: Some("moe_kernels.cu".into()),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(source::translation_unit(), opts).map_err(|e| GpuError::Compile(format!("{e:?}")))?;
    cache.insert(arch, ptx.clone());
    Ok(ptx)
}

impl Gpu {
    /// Open device `ordinal`: `NoDriver`/`NoNvrtc` when the libraries are missing, `Driver` when no device.
    pub fn open(ordinal: usize) -> Result<Gpu, GpuError> {
        loadable("cuda").map_err(GpuError::NoDriver)?;
        loadable("nvrtc").map_err(GpuError::NoNvrtc)?;
        let ctx = CudaContext::new(ordinal)?;
        let (major, minor) = ctx.compute_capability()?;
        // Hopper gets its architecture-specific target (wgmma and friends); others their plain one.
        let arch: &'static str = match (major, minor) {
            (9, 0) => "sm_90a",
            (10, 0) => "sm_100a",
            (8, 0) => "sm_80",
            (8, 6) => "sm_86",
            (8, 9) => "sm_89",
            (12, 0) => "sm_120",
            _ => "compute_80",
        };
        let ptx = ptx_for(arch)?;
        let module = ctx.load_module(ptx)?;
        let mut functions = HashMap::new();
        for &k in source::KERNELS {
            functions.insert(k, module.load_function(k)?);
        }
        let name = format!("{} ({arch})", ctx.name().unwrap_or_else(|_| "unknown GPU".into()));
        let stream = ctx.default_stream();
        Ok(Gpu { ctx, stream, _module: module, functions, name })
    }

    pub(crate) fn function(&self, name: &str) -> &CudaFunction {
        &self.functions[name]
    }
}
