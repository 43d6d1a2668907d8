//! The GPU's energy counter, read through NVML (`libnvidia-ml`, loaded at run time like the CUDA libraries).
//!
//! Why: the fused GEMMs run at the GPU's power cap, where what sets a pass's time is the energy it needs, not
//! its latency (kernels/cuda/fast/NOTES.md, sessions 7 and 27). `bench-gpu --heat-ms` reads this counter around
//! its heat loop, so the log gives joules per pass for our layer and, through `torch_moe_heated.py`, for the
//! PyTorch baseline: the ratio that decides who is faster in a training run's steady state.
//!
//! `nvmlDeviceGetTotalEnergyConsumption` counts millijoules since the driver was loaded (Volta and later). Its
//! update interval is tens of milliseconds, so read it around seconds of work, not around one pass.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use crate::Gpu;

type NvmlDevice = *mut c_void;

/// An open NVML handle on the device a [`Gpu`] runs on (matched by UUID, so `CUDA_VISIBLE_DEVICES` cannot
/// make it read another GPU's counter).
pub struct EnergyMeter {
    device: NvmlDevice,
    total_mj: unsafe extern "C" fn(NvmlDevice, *mut u64) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    shutdown: unsafe extern "C" fn() -> c_int,
    _lib: libloading::Library,
}

/// NVML's UUID spelling of a CUDA device UUID: `GPU-` and the 16 bytes as 8-4-4-4-12 hex digits.
pub fn nvml_uuid(bytes: &[u8; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", hex[0..4].concat(), hex[4..6].concat(), hex[6..8].concat(), hex[8..10].concat(), hex[10..16].concat())
}

impl EnergyMeter {
    /// Open the counter of `gpu`'s device. Err names why not (no NVML library, no counter on this GPU, ...):
    /// callers report it and go on without energy figures.
    pub fn open(gpu: &Gpu) -> Result<EnergyMeter, String> {
        let uuid = gpu.ctx.uuid().map_err(|e| format!("the device's UUID: {e:?}"))?;
        let bytes: [u8; 16] = uuid.bytes.map(|b| b as u8);
        Self::open_uuid(&nvml_uuid(&bytes))
    }

    /// Open the counter of the device with NVML UUID `uuid` (`GPU-xxxxxxxx-...`).
    pub fn open_uuid(uuid: &str) -> Result<EnergyMeter, String> {
        let names = ["libnvidia-ml.so.1", "libnvidia-ml.so", "nvml.dll"];
        // SAFETY: loading NVML runs its initialisers; it is the driver's own management library.
        let lib = names
            .iter()
            .find_map(|n| unsafe { libloading::Library::new(*n) }.ok())
            .ok_or_else(|| format!("no NVML library ({})", names.join(", ")))?;
        Self::with_library(lib, uuid)
    }

    /// Open the counter of device `uuid` through the NVML library at `path` (one outside the loader's search
    /// path, or the tests' stand-in, tests/support/nvml_stub.c).
    pub fn open_library(path: &std::path::Path, uuid: &str) -> Result<EnergyMeter, String> {
        // SAFETY: as in `open_uuid`; the caller names an NVML library.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| format!("NVML library {}: {e}", path.display()))?;
        Self::with_library(lib, uuid)
    }

    fn with_library(lib: libloading::Library, uuid: &str) -> Result<EnergyMeter, String> {
        /// A function pointer from `lib`; `T` must be the symbol's C signature.
        unsafe fn sym<T: Copy>(lib: &libloading::Library, name: &[u8]) -> Result<T, String> {
            // SAFETY: the caller's `T` is the symbol's type
            unsafe { lib.get::<T>(name) }.map(|s| *s).map_err(|e| format!("NVML: {e}"))
        }
        let c_uuid = CString::new(uuid).map_err(|_| format!("UUID {uuid:?} holds a NUL"))?;
        // SAFETY: the types are NVML's C signatures (nvml.h); the pointers stay valid while `lib` lives, and the
        // struct keeps `lib`.
        unsafe {
            let init: unsafe extern "C" fn() -> c_int = sym(&lib, b"nvmlInit_v2\0")?;
            let by_uuid: unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> c_int = sym(&lib, b"nvmlDeviceGetHandleByUUID\0")?;
            let total_mj = sym(&lib, b"nvmlDeviceGetTotalEnergyConsumption\0")?;
            let error_string: unsafe extern "C" fn(c_int) -> *const c_char = sym(&lib, b"nvmlErrorString\0")?;
            let shutdown = sym(&lib, b"nvmlShutdown\0")?;
            let describe = |rc: c_int| CStr::from_ptr(error_string(rc)).to_string_lossy().into_owned();
            let rc = init();
            if rc != 0 {
                return Err(format!("nvmlInit: {}", describe(rc)));
            }
            // from here the meter owns the init: its drop shuts NVML down, on the error paths too
            let mut device: NvmlDevice = std::ptr::null_mut();
            let rc = by_uuid(c_uuid.as_ptr(), &mut device);
            let meter = EnergyMeter { device, total_mj, error_string, shutdown, _lib: lib };
            if rc != 0 {
                return Err(format!("NVML has no device {uuid}: {}", describe(rc)));
            }
            meter.millijoules()?; // e.g. NOT_SUPPORTED before Volta: say so now, not in the middle of a bench
            Ok(meter)
        }
    }

    /// The counter: millijoules since the driver was loaded.
    pub fn millijoules(&self) -> Result<u64, String> {
        let mut mj = 0u64;
        // SAFETY: `device` came from NVML for this library instance, which is still initialised.
        let rc = unsafe { (self.total_mj)(self.device, &mut mj) };
        if rc != 0 {
            // SAFETY: nvmlErrorString returns a static NUL-terminated string for any code.
            let msg = unsafe { CStr::from_ptr((self.error_string)(rc)) }.to_string_lossy().into_owned();
            return Err(format!("nvmlDeviceGetTotalEnergyConsumption: {msg}"));
        }
        Ok(mj)
    }

    /// How often the counter moves: the mean time between changes while polling it for `window_ms`, or None
    /// if it did not change twice. (Tens of milliseconds on the H100s seen; what a span's joules are exact to.)
    pub fn update_interval_ms(&self, window_ms: u64) -> Result<Option<f64>, String> {
        let start = std::time::Instant::now();
        let (mut last, mut first_change, mut changes) = (self.millijoules()?, None, 0u32);
        let mut last_change = start;
        while start.elapsed().as_millis() < window_ms as u128 {
            let now = self.millijoules()?;
            if now != last {
                last = now;
                last_change = std::time::Instant::now();
                first_change.get_or_insert(last_change);
                changes += 1;
            }
        }
        // between the first and the last change lie changes - 1 whole intervals
        Ok(first_change.filter(|_| changes >= 2).map(|f| (last_change - f).as_secs_f64() * 1e3 / (changes - 1) as f64))
    }
}

impl Drop for EnergyMeter {
    fn drop(&mut self) {
        // SAFETY: balances the nvmlInit of `open_uuid` (NVML counts them).
        unsafe { (self.shutdown)() };
    }
}

/// Work run back to back and metered as one span: `passes` passes in `ms` milliseconds using `mj`
/// millijoules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    pub passes: u64,
    pub ms: f64,
    pub mj: u64,
}

impl Span {
    /// Milliseconds and joules per pass.
    pub fn per_pass(&self) -> (f64, f64) {
        let n = self.passes.max(1) as f64;
        (self.ms / n, self.mj as f64 / 1e3 / n)
    }
}

/// One kernel's time and energy per launch (ms, J) from passes in which it ran `times` times in a row
/// (`repeated`) and plain passes (`plain`): what a repeated pass took beyond a plain one, per extra launch.
/// None when `times` < 2 or either difference is not positive (a span too short for the counter's updates).
pub fn per_extra_launch(plain: Span, repeated: Span, times: u64) -> Option<(f64, f64)> {
    let ((pm, pj), (rm, rj)) = (plain.per_pass(), repeated.per_pass());
    let extra = times.checked_sub(1).filter(|&n| n > 0)? as f64;
    let (ms, j) = ((rm - pm) / extra, (rj - pj) / extra);
    (ms > 0.0 && j > 0.0).then_some((ms, j))
}

/// The energy line for `passes` passes that took `ms` milliseconds and `mj` millijoules: total joules, joules
/// per pass and the mean power.
pub fn energy_summary(passes: u64, ms: f64, mj: u64) -> String {
    let j = mj as f64 / 1e3;
    format!("{j:.1} J, {:.3} J per pass, {:.0} W mean", j / passes.max(1) as f64, if ms > 0.0 { j / (ms / 1e3) } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_spelling_is_nvmls() {
        let b: [u8; 16] = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
        assert_eq!(nvml_uuid(&b), "GPU-12345678-9abc-def0-0123-456789abcdef");
    }

    #[test]
    fn summary_divides_by_passes_and_seconds() {
        assert_eq!(energy_summary(400, 2000.0, 1_300_000), "1300.0 J, 3.250 J per pass, 650 W mean");
        assert_eq!(energy_summary(0, 0.0, 0), "0.0 J, 0.000 J per pass, 0 W mean");
    }

    #[test]
    fn a_kernels_share_is_the_repeated_pass_beyond_the_plain_one_per_extra_launch() {
        // plain: 10 passes, 80 ms, 56 J -> 8 ms, 5.6 J a pass; repeated 5 times: one pass of 12 ms and 8.4 J,
        // so 4 extra launches of 1 ms and 0.7 J each
        let plain = Span { passes: 10, ms: 80.0, mj: 56_000 };
        let (ms, j) = per_extra_launch(plain, Span { passes: 1, ms: 12.0, mj: 8_400 }, 5).expect("resolved");
        assert!((ms - 1.0).abs() < 1e-12 && (j - 0.7).abs() < 1e-12, "{ms} ms {j} J");
        // two repeated passes count as the mean of the two
        let (ms, j) = per_extra_launch(plain, Span { passes: 2, ms: 24.0, mj: 16_800 }, 5).expect("resolved");
        assert!((ms - 1.0).abs() < 1e-12 && (j - 0.7).abs() < 1e-12, "{ms} ms {j} J");
        // a single launch has no extra ones; a counter that did not move for the repeats resolves nothing
        assert_eq!(per_extra_launch(plain, Span { passes: 1, ms: 12.0, mj: 8_400 }, 1), None);
        assert_eq!(per_extra_launch(plain, Span { passes: 1, ms: 12.0, mj: 5_600 }, 5), None);
        assert_eq!(per_extra_launch(plain, Span { passes: 1, ms: 7.0, mj: 8_400 }, 5), None);
    }

    #[test]
    fn a_bad_uuid_or_a_missing_library_is_an_error_not_a_panic() {
        // without NVML (CI): "no NVML library"; with it: no device of that UUID
        let err = EnergyMeter::open_uuid("GPU-00000000-0000-0000-0000-000000000000").err().expect("no GPU has the zero UUID");
        assert!(err.contains("NVML"), "{err}");
    }
}
