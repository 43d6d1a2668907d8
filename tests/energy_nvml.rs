//! `kernels/src/energy.rs` against a stand-in libnvidia-ml (tests/support/nvml_stub.c): the FFI's signatures,
//! the UUID lookup, the error path and the balance of nvmlInit and nvmlShutdown, on machines without a GPU.
//! (On the GPU machine, `bench-gpu --heat-ms` reads the real counter.)

mod support;

use moe_kernels::energy::EnergyMeter;
use support::{build_nvml_stub, STUB_UUID};

/// The stub, loaded by the test itself for the whole test: dlopen of one path returns one instance while any
/// handle holds it, so the test sees the meter's nvmlInit and nvmlShutdown (without this handle, the meter's
/// drop would unload the stub and a later load would start from fresh counters).
fn hold(lib: &std::path::Path) -> libloading::Library {
    // SAFETY: the stub has no initialisers.
    unsafe { libloading::Library::new(lib) }.unwrap()
}

/// The stub built into a fresh directory (kept while the library is in use) and held loaded (`hold`); None,
/// after a SKIP line, without a C compiler.
fn loaded_stub() -> Option<(tempfile::TempDir, std::path::PathBuf, libloading::Library)> {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_nvml_stub(dir.path(), "energy_nvml")?;
    let stub = hold(&lib);
    Some((dir, lib, stub))
}

/// How many of the stub's nvmlInit calls no nvmlShutdown has balanced.
fn open_inits(stub: &libloading::Library) -> i32 {
    // SAFETY: the stub's `int stub_open_inits(void)`.
    unsafe { stub.get::<unsafe extern "C" fn() -> i32>(b"stub_open_inits\0").unwrap()() }
}

#[test]
fn the_meter_reads_the_counter_of_the_device_with_its_uuid() {
    let Some((_dir, lib, stub)) = loaded_stub() else { return };
    {
        let m = EnergyMeter::open_library(&lib, STUB_UUID).expect("the stub's device");
        // the stub's counter grows by 1000 mJ a read (open read it once, to see that it exists)
        let (a, b) = (m.millijoules().unwrap(), m.millijoules().unwrap());
        assert_eq!((a, b - a), (6000, 1000));
        assert_eq!(open_inits(&stub), 1, "one init while the meter is open");
    }
    assert_eq!(open_inits(&stub), 0, "dropping the meter shuts NVML down");
}

#[test]
fn an_unknown_uuid_is_an_error_with_nvmls_reason_and_leaves_nvml_shut_down() {
    let Some((dir, lib, stub)) = loaded_stub() else { return };
    let uuid = "GPU-00000000-0000-0000-0000-000000000000";
    let err = EnergyMeter::open_library(&lib, uuid).err().expect("no such device");
    assert_eq!(err, format!("NVML has no device {uuid}: Not Found"));
    assert_eq!(open_inits(&stub), 0, "the failed open shut NVML down again");
    let missing = EnergyMeter::open_library(&dir.path().join("nope.so"), STUB_UUID).err().unwrap();
    assert!(missing.starts_with("NVML library ") && missing.contains("nope.so"), "{missing}");
}

#[test]
fn the_update_interval_is_the_time_between_the_counters_changes() {
    let Some((_dir, lib, _stub)) = loaded_stub() else { return };
    let m = EnergyMeter::open_library(&lib, STUB_UUID).expect("the stub's device");
    // the stub's counter moves at every read: the interval is one poll, far below the 50 ms window
    let every = m.update_interval_ms(50).unwrap().expect("it changed");
    assert!(every > 0.0 && every < 5.0, "{every} ms");
    // a zero window polls nothing after the first read: no interval
    assert_eq!(m.update_interval_ms(0).unwrap(), None);
}
