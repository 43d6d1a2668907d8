//! Compiling the fast kernels (NVRTC, once per `FastKernels`) for the GPU's architecture and loading them.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUfunction_attribute_enum};
use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

use super::source;
use crate::{Gpu, GpuError};

/// Bytes of one operand tile of the mma.sync GEMMs in shared memory (128 x 64 bf16).
const TILE_BYTES: usize = 128 * 64 * 2;

/// How the fast kernels are compiled and launched; `from_env` reads the environment variables named in
/// each field.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelSettings {
    /// MOE_FAST_DEFINES: preprocessor definitions, space-separated (e.g. "WS_CLUSTER=2 WS_EXP_CLOCKS"; see
    /// the switches in fast_ws.cu; the WS_EXP_ ones break the results on purpose, to time parts of a kernel).
    pub defines: String,
    /// MOE_FAST_CLUSTERED: the persistent GEMMs launched in clusters of two (`parse_clustered`).
    pub clustered: Option<String>,
    /// MOE_FAST_CLUSTERS: the clustered GEMMs' cluster count instead of the occupancy query's (experiment).
    pub clusters: Option<usize>,
    /// MOE_FAST_DYNAMIC: the persistent GEMMs whose blocks take tiles from a global counter (`parse_gemms`;
    /// default `DEFAULT_DYNAMIC`).
    pub dynamic: Option<String>,
    /// MOE_FAST_LINEINFO (set): source lines in the SASS, for profilers; changes nothing else.
    pub lineinfo: bool,
}

impl KernelSettings {
    /// The environment variables of the fields, which `with` takes.
    pub const VARIABLES: [&'static str; 5] = ["MOE_FAST_DEFINES", "MOE_FAST_CLUSTERED", "MOE_FAST_CLUSTERS", "MOE_FAST_DYNAMIC", "MOE_FAST_LINEINFO"];

    pub fn from_env() -> KernelSettings {
        KernelSettings {
            defines: std::env::var("MOE_FAST_DEFINES").unwrap_or_default(),
            clustered: std::env::var("MOE_FAST_CLUSTERED").ok(),
            clusters: std::env::var("MOE_FAST_CLUSTERS").ok().and_then(|v| v.parse().ok()),
            dynamic: std::env::var("MOE_FAST_DYNAMIC").ok(),
            lineinfo: std::env::var_os("MOE_FAST_LINEINFO").is_some(),
        }
    }

    /// These settings with `NAME=VALUE` assignments (the environment variables of the fields) applied.
    pub fn with(&self, assignments: &[(String, String)]) -> Result<KernelSettings, GpuError> {
        let mut s = self.clone();
        for (name, value) in assignments {
            match name.as_str() {
                "MOE_FAST_DEFINES" => s.defines = value.clone(),
                "MOE_FAST_CLUSTERED" => s.clustered = Some(value.clone()),
                "MOE_FAST_CLUSTERS" => s.clusters = Some(value.parse().map_err(|_| GpuError::Input(format!("MOE_FAST_CLUSTERS={value:?} is not a count")))?),
                "MOE_FAST_DYNAMIC" => s.dynamic = Some(value.clone()),
                "MOE_FAST_LINEINFO" => s.lineinfo = true,
                _ => return Err(GpuError::Input(format!("{name} is not a kernel setting ({})", Self::VARIABLES.join(", ")))),
            }
        }
        Ok(s)
    }
}

/// The compiled fast kernels.
pub struct FastKernels {
    _modules: Vec<Arc<CudaModule>>,
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
    /// Blocks per cluster of each persistent GEMM (`WS_CLUSTER` in fast_ws.cu: 1, or 2 with the B tile
    /// multicast to both blocks; absent: 1), and for each clustered one the most clusters that fit on the GPU
    /// at once (its persistent grid: a cluster that waited for a free pair of SMs would run after the others).
    /// `MOE_FAST_CLUSTERED` chooses them (`parse_clustered`); MOE_FAST_DEFINES="WS_CLUSTER=2" clusters all.
    clusters: HashMap<&'static str, usize>,
    max_clusters: HashMap<&'static str, usize>,
    /// The persistent GEMMs launched with the dynamic tile scheduler (MOE_FAST_DYNAMIC). A kernel compiled
    /// without it (WS_DYNAMIC=0 in MOE_FAST_DEFINES) ignores the counter and keeps the
    /// fixed order, so the list needs no filtering here.
    dynamic: Vec<&'static str>,
    /// Experiment `WS_EXP_CLUSTER_NO_MC`: clustered launches, each block loading all of B (the B boxes' size
    /// on the host follows it).
    no_multicast: bool,
}

impl FastKernels {
    /// Compile (NVRTC) and load the fast kernels for `gpu` with a `stages`-deep pipeline (2..=4), with the
    /// settings of the environment (`KernelSettings::from_env`).
    pub fn load(gpu: &Gpu, stages: usize) -> Result<FastKernels, GpuError> {
        Self::load_with(gpu, stages, &KernelSettings::from_env())
    }

    /// `load` with explicit settings (e.g. two sets in one process, for an interleaved A/B comparison).
    pub fn load_with(gpu: &Gpu, stages: usize, settings: &KernelSettings) -> Result<FastKernels, GpuError> {
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
        let defines: Vec<String> = settings.defines.split_whitespace().map(|d| d.trim_start_matches("-D").to_string()).collect();
        let cluster = match defines.iter().find_map(|d| d.strip_prefix("WS_CLUSTER=")) {
            None => 1,
            Some("1") => 1,
            Some("2") => 2,
            Some(v) => return Err(GpuError::Input(format!("MOE_FAST_DEFINES: WS_CLUSTER must be 1 or 2, not {v}"))),
        };
        // Source lines in the SASS, for profilers (`ncu --page source`); off by default, it changes nothing else.
        if settings.lineinfo {
            options.push("-lineinfo".into());
        }
        // Experiments only: extra preprocessor definitions, e.g. MOE_FAST_DEFINES="WS_EXP_NO_STORE" (see the
        // WS_EXP_ switches in fast_ws.cu; they break the results on purpose, to time the parts of a kernel).
        options.extend(defines.iter().map(|d| format!("-D{d}")));
        let opts = CompileOptions {
            arch: Some(arch),
            fmad: Some(true),
            options,
            name: Some("moe_fast.cu".into()),
            ..Default::default()
        };
        let compile = |opts: CompileOptions| -> Result<Arc<CudaModule>, GpuError> {
            let ptx = compile_ptx_with_opts(source::translation_unit(stages), opts).map_err(|e| GpuError::Compile(format!("{e:?}")))?;
            Ok(gpu.ctx.load_module(ptx)?)
        };
        let clustered = parse_clustered(cluster, settings.clustered.as_deref())?;
        let dynamic = parse_gemms("MOE_FAST_DYNAMIC", settings.dynamic.as_deref(), DEFAULT_DYNAMIC)?;
        // the clustered kernels come from a second module compiled with WS_CLUSTER=2 (unless all are)
        let module_c2 = if cluster == 1 && !clustered.is_empty() && arch == "sm_90a" {
            let mut opts2 = opts.clone();
            opts2.options.push("-DWS_CLUSTER=2".into());
            Some(compile(opts2)?)
        } else {
            None
        };
        let module = compile(opts)?;
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
                    let from = match &module_c2 {
                        Some(m2) if clustered.contains(&k) => m2,
                        _ => &module,
                    };
                    let f = from.load_function(k)?;
                    f.set_attribute(CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
                    functions.insert(k, f);
                }
            }
        }
        let sms = gpu.ctx.attribute(cudarc::driver::sys::CUdevice_attribute_enum::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize;
        let clocks = defines.iter().any(|d| d == "WS_EXP_CLOCKS");
        let no_multicast = defines.iter().any(|d| d == "WS_EXP_CLUSTER_NO_MC");
        let mut clusters = HashMap::new();
        let mut max_clusters = HashMap::new();
        if wgmma {
            // MOE_FAST_CLUSTERS=N: the persistent grid's cluster count instead of the occupancy query's (experiment)
            let forced = settings.clusters.filter(|&n| n > 0);
            for &k in &clustered {
                let n = Self::max_active_clusters(&functions[k], 2, gpu)?;
                eprintln!("fast kernels: {k} in clusters of 2: {n} clusters resident at most{}", forced.map(|f| format!(", launching {f}")).unwrap_or_default());
                clusters.insert(k, 2);
                max_clusters.insert(k, forced.unwrap_or(n));
            }
        }
        let mut modules = vec![module];
        modules.extend(module_c2);
        Ok(FastKernels { _modules: modules, functions, stages, arch, wgmma, sms, clocks, clusters, max_clusters, dynamic, no_multicast })
    }

    /// How many clusters of `cluster` persistent blocks (WS_THREADS threads, WS_SMEM bytes) fit at once.
    fn max_active_clusters(f: &CudaFunction, cluster: usize, gpu: &Gpu) -> Result<usize, GpuError> {
        let mut n: std::ffi::c_int = 0;
        // SAFETY: the configuration outlives the call; f is a loaded kernel of this context.
        with_cluster_config(cluster, cluster as u32, gpu.stream.cu_stream(), |config| unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f.cu_function(), config) }.result())?;
        if n < 1 {
            return Err(GpuError::Input(format!("no cluster of {cluster} persistent blocks fits on this GPU (WS_CLUSTER)")));
        }
        Ok(n as usize)
    }

    /// The most clusters of persistent kernel `name` resident at once (clusters of more than one block only).
    pub(super) fn max_clusters(&self, name: &str) -> usize {
        self.max_clusters.get(name).copied().unwrap_or(self.sms / self.cluster(name))
    }

    /// Blocks per cluster of persistent GEMM `name` (1: not clustered).
    pub fn cluster(&self, name: &str) -> usize {
        self.clusters.get(name).copied().unwrap_or(1)
    }

    /// Whether persistent GEMM `name` takes its tiles from the layer's global counter (dynamic scheduler).
    pub(super) fn dynamic(&self, name: &str) -> bool {
        self.dynamic.contains(&name)
    }

    /// Blocks sharing the loads of each B tile of persistent GEMM `name`.
    pub(super) fn b_share(&self, name: &str) -> usize {
        if self.no_multicast {
            1
        } else {
            self.cluster(name)
        }
    }

    pub(super) fn f(&self, name: &str) -> &CudaFunction {
        &self.functions[name]
    }
    pub(super) fn smem(&self) -> u32 {
        (2 * self.stages * TILE_BYTES) as u32
    }
}

/// The driver's launch configuration of `grid_x` persistent GEMM blocks (WS_THREADS threads, WS_SMEM bytes of
/// dynamic shared memory each) in clusters of `cluster` on `stream`, handed to `f`: cudarc's launch builder has
/// no cluster attribute, and the configuration points at the attribute, which lives only during the call.
pub(super) fn with_cluster_config<R>(cluster: usize, grid_x: u32, stream: sys::CUstream, f: impl FnOnce(&sys::CUlaunchConfig) -> R) -> R {
    // SAFETY: CUlaunchAttribute is a plain C struct (an id and a union of plain values); all zeros is valid.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: cluster as u32, y: 1, z: 1 };
    let config = sys::CUlaunchConfig {
        gridDimX: grid_x,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: source::WS_THREADS,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: source::WS_SMEM as u32,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    f(&config)
}

/// The persistent GEMMs launched in clusters of two (B multicast): all of them when the defines have
/// WS_CLUSTER=2 (`cluster`), else those named in `list` (MOE_FAST_CLUSTERED: a comma list of
/// `source::WS_GEMMS` names, `all`, or `none`), by default `DEFAULT_CLUSTERED`.
fn parse_clustered(cluster: usize, list: Option<&str>) -> Result<Vec<&'static str>, GpuError> {
    if cluster == 2 {
        return Ok(source::WS_GEMMS.to_vec());
    }
    parse_gemms("MOE_FAST_CLUSTERED", list, DEFAULT_CLUSTERED)
}

/// A choice of persistent GEMMs by the setting `var`: a comma list of `source::WS_GEMMS` names, `all`, or
/// `none`; unset: `default`.
fn parse_gemms(var: &str, list: Option<&str>, default: &[&'static str]) -> Result<Vec<&'static str>, GpuError> {
    let Some(list) = list else {
        return Ok(default.to_vec());
    };
    match list.trim() {
        "all" => return Ok(source::WS_GEMMS.to_vec()),
        "none" | "" => return Ok(Vec::new()),
        _ => {}
    }
    list.split(',')
        .map(|n| {
            let n = n.trim();
            source::WS_GEMMS.iter().copied().find(|k| *k == n).ok_or_else(|| GpuError::Input(format!("{var}: {n:?} is not a persistent GEMM (one of {})", source::WS_GEMMS.join(", "))))
        })
        .collect()
}

/// The persistent GEMMs clustered by default.
const DEFAULT_CLUSTERED: &[&str] = &[];

/// The persistent GEMMs with the dynamic tile scheduler by default: GEMM1, GEMM2 and dX (ws_rows: the
/// transposed-weights variant of the last two). Session 14 on qwen3-235b-a22b (H100, `bench-gpu --ab`): gemm1
/// 7.742 -> 6.593 ms, gemm2 4.111 -> 3.226, dX 8.938 -> 6.479 with it, but dA_raw (then ws_rows_bmn_f32) 3.014 ->
/// 3.281 and the weight gradients (ws_wgrad) 3-4% slower; on 30b every GEMM within 2%. Since session 17 dA_raw
/// is bf16 and runs on ws_rows_bmn, so it takes its tiles from the queue too (235b: 3.175 -> 3.084 ms with the
/// bf16 stores, s17c).
const DEFAULT_DYNAMIC: &[&str] = &["ws_gemm1_swiglu", "ws_rows", "ws_rows_bmn"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clustered_kernels_are_chosen_by_name() {
        assert_eq!(parse_clustered(1, Some("ws_wgrad, ws_gemm1_swiglu")).unwrap(), ["ws_wgrad", "ws_gemm1_swiglu"]);
        assert_eq!(parse_clustered(1, Some("none")).unwrap(), Vec::<&str>::new());
        assert_eq!(parse_clustered(1, Some("all")).unwrap(), source::WS_GEMMS);
        assert_eq!(parse_clustered(2, Some("none")).unwrap(), source::WS_GEMMS, "WS_CLUSTER=2 clusters every persistent GEMM");
        assert_eq!(parse_clustered(1, None).unwrap(), DEFAULT_CLUSTERED);
        let err = parse_clustered(1, Some("ws_wgrad,wgrad")).unwrap_err().to_string();
        assert!(err.contains("MOE_FAST_CLUSTERED: \"wgrad\" is not a persistent GEMM"), "{err}");
        assert_eq!(parse_gemms("MOE_FAST_DYNAMIC", None, DEFAULT_DYNAMIC).unwrap(), DEFAULT_DYNAMIC);
        assert_eq!(parse_gemms("MOE_FAST_DYNAMIC", Some("ws_wgrad"), DEFAULT_DYNAMIC).unwrap(), ["ws_wgrad"]);
        let err = parse_gemms("MOE_FAST_DYNAMIC", Some("dX"), DEFAULT_DYNAMIC).unwrap_err().to_string();
        assert!(err.contains("MOE_FAST_DYNAMIC: \"dX\" is not a persistent GEMM"), "{err}");
    }

    #[test]
    fn settings_take_assignments_by_variable_name() {
        let base = KernelSettings { defines: "WS_EXP_CLOCKS".into(), ..Default::default() };
        let b = base.with(&[("MOE_FAST_DEFINES".into(), "WS_CLUSTER=2 WS_EXP_CLOCKS".into()), ("MOE_FAST_CLUSTERED".into(), "ws_wgrad".into())]).unwrap();
        assert_eq!(b, KernelSettings { defines: "WS_CLUSTER=2 WS_EXP_CLOCKS".into(), clustered: Some("ws_wgrad".into()), clusters: None, dynamic: None, lineinfo: false });
        assert_eq!(base.with(&[]).unwrap(), base);
        assert!(base.with(&[("MOE_FAST_CLUSTERS".into(), "x".into())]).unwrap_err().to_string().contains("not a count"));
        assert!(base.with(&[("MOE_FAST_GATHER".into(), "0".into())]).unwrap_err().to_string().contains("not a kernel setting"));
    }
}
