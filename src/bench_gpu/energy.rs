//! bench-gpu's energy measurements: `--heat-ms` (the timed work run back to back before it is timed, with
//! its joules per pass) and `--kernel-energy-ms` (joules per launch of each kernel).
//!
//! Why: under the power cap a pass's time is its energy divided by the cap (kernels/cuda/fast/NOTES.md,
//! sessions 27-28), so what a kernel costs is its joules. NVML's counter moves every few milliseconds, too
//! coarse for one launch: each kernel is launched back to back for about a second inside one pass
//! (`FastLayer::set_repeat`, which leaves the outputs unchanged), and a plain pass's share is subtracted.

use moe_kernels::energy::{energy_summary, per_extra_launch, EnergyMeter, Span};
use moe_kernels::fast::{FastLayer, NOT_REPEATABLE};
use moe_kernels::{Gpu, GpuError};

use super::{fail, fwd_bwd, gpu_err};
use crate::cli::CliError;

/// Kernels shorter than this are not metered: back to back, their launches would time the launch path.
const MIN_KERNEL_MS: f32 = 0.05;

/// `--heat-ms`: how long to run the timed work before timing it, and the GPU's energy counter (None when NVML
/// is not there: the heat still runs, without joules).
pub(super) struct Heat {
    ms: u64,
    meter: Option<EnergyMeter>,
}

impl Heat {
    /// Opens the energy counter when there is heat to measure or `want_meter`; says once why there are no
    /// joules.
    pub(super) fn new(gpu: &Gpu, ms: u64, want_meter: bool) -> Heat {
        if ms == 0 && !want_meter {
            return Heat { ms, meter: None };
        }
        let meter = match EnergyMeter::open(gpu) {
            Ok(m) => Some(m),
            Err(e) => {
                println!("energy: not measured ({e})");
                None
            }
        };
        Heat { ms, meter }
    }

    /// Run `work` back to back until `ms` milliseconds have passed; prints how many passes that took and, with
    /// the counter, the energy they used. Returns the joules per pass, if metered.
    pub(super) fn run<F: FnMut(&mut FastLayer) -> Result<(), GpuError>>(&self, layer: &mut FastLayer, work: F) -> Result<Option<f64>, CliError> {
        if self.ms == 0 {
            return Ok(None);
        }
        let (passes, ms, mj) = metered(layer, self.meter.as_ref(), self.ms, work)?;
        let energy = mj.map(|mj| format!(": {}", energy_summary(passes, ms, mj))).unwrap_or_default();
        println!("heat: {passes} passes in {ms:.0} ms before the timed reps{energy}");
        Ok(mj.map(|mj| Span { passes, ms, mj }.per_pass().1))
    }
}

/// The joules per pass of a `heat:` line (`energy_summary`'s "..., X J per pass, ..."), if it has them.
pub(super) fn joules_per_pass(line: &str) -> Option<f64> {
    let head = line.split(" J per pass").next().filter(|h| h.len() < line.len())?;
    head.rsplit([' ', ',']).next()?.parse().ok()
}

/// The line comparing joules per pass, (forward, forward+backward), ours against the baseline's.
pub(super) fn energy_ratio_line(ours: (f64, f64), base: (f64, f64)) -> String {
    format!(
        "energy per pass vs the faster baseline (over the heats): forward {:.3} J against {:.3} J ({:.2}x less), forward+backward {:.3} J against {:.3} J ({:.2}x less)",
        ours.0,
        base.0,
        base.0 / ours.0,
        ours.1,
        base.1,
        base.1 / ours.1
    )
}

/// Run `work` back to back, each pass synchronised as the timed reps are, at least once and until `ms`
/// milliseconds have passed: (passes, milliseconds, millijoules if the counter could be read around it).
fn metered<F: FnMut(&mut FastLayer) -> Result<(), GpuError>>(layer: &mut FastLayer, meter: Option<&EnergyMeter>, ms: u64, mut work: F) -> Result<(u64, f64, Option<u64>), CliError> {
    let read = || meter.and_then(|m| m.millijoules().map_err(|e| println!("energy: {e}")).ok());
    let (start, mut passes, mj0) = (std::time::Instant::now(), 0u64, read());
    loop {
        work(layer).map_err(gpu_err)?;
        layer.sync().map_err(gpu_err)?;
        passes += 1;
        if start.elapsed().as_millis() >= ms as u128 {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64() * 1e3;
    let mj = match (mj0, read()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    Ok((passes, elapsed, mj))
}

/// Forward+backward passes for at least `ms` milliseconds (one pass at least), metered.
fn pass_span(layer: &mut FastLayer, meter: &EnergyMeter, ms: u64) -> Result<Span, CliError> {
    match metered(layer, Some(meter), ms, fwd_bwd)? {
        (passes, ms, Some(mj)) => Ok(Span { passes, ms, mj }),
        _ => Err(fail("the energy counter could not be read".into())),
    }
}

/// `--kernel-energy-ms`: joules, milliseconds and watts per launch of each kernel in `per` (label, profiled
/// median ms) of at least MIN_KERNEL_MS, each launched back to back for about `window_ms` inside one pass,
/// less a plain pass's share; pJ per FLOP for those `flops` names.
pub(super) fn per_kernel(layer: &mut FastLayer, heat: &Heat, per: &[(&'static str, f32)], window_ms: u64, flops: impl Fn(&str) -> Option<f64>) -> Result<(), CliError> {
    let Some(meter) = heat.meter.as_ref() else {
        println!("energy per kernel: not measured (no energy counter)");
        return Ok(());
    };
    let every = match meter.update_interval_ms(200).map_err(fail)? {
        Some(v) => format!("updated every {v:.1} ms"),
        None => "not moving in 200 ms".into(),
    };
    // plain passes before and after the kernels, their sum subtracted: the GPU's state drifts over the dozen
    // seconds this takes, and the two show by how much
    let before = pass_span(layer, meter, window_ms)?;
    let mut repeated = Vec::new();
    for &(name, ms) in per.iter().filter(|(n, ms)| *ms >= MIN_KERNEL_MS && !NOT_REPEATABLE.contains(n)) {
        let times = (window_ms as f64 / ms as f64).ceil().clamp(2.0, 1e6) as usize;
        layer.set_repeat(Some((name, times))).map_err(gpu_err)?;
        let span = pass_span(layer, meter, 0);
        layer.set_repeat(None).map_err(gpu_err)?;
        repeated.push((name, times, span?));
    }
    let after = pass_span(layer, meter, window_ms)?;
    let plain = Span { passes: before.passes + after.passes, ms: before.ms + after.ms, mj: before.mj + after.mj };
    let (pm, pj) = plain.per_pass();
    println!(
        "energy per kernel (NVML's counter, {every}): each kernel launched back to back for ~{window_ms} ms inside one forward+backward pass, less a plain pass ({pm:.3} ms, {pj:.3} J; plain passes before the kernels {:.3} J, after {:.3} J)",
        before.per_pass().1,
        after.per_pass().1
    );
    println!("  kernel             ms/launch  J/launch  mean W");
    let mut sum = (0.0, 0.0);
    for (name, times, span) in repeated {
        let Some((ms, j)) = per_extra_launch(plain, span, times as u64) else {
            println!("  {name:<18} not resolved ({times} launches: one pass of {:.0} ms, {} mJ)", span.ms, span.mj);
            continue;
        };
        sum = (sum.0 + ms, sum.1 + j);
        let line = format!("  {name:<18} {ms:9.3} {j:9.4} {:7.0}", j / (ms * 1e-3));
        match flops(name) {
            Some(f) => println!("{line}   {:.2} pJ/FLOP at {:.0} TFLOP/s", j / f * 1e12, f / (ms * 1e-3) / 1e12),
            None => println!("{line}"),
        }
    }
    println!("  (the metered kernels add up to {:.3} ms and {:.3} J of the plain pass's {pm:.3} ms and {pj:.3} J)", sum.0, sum.1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_lines_give_their_joules_per_pass() {
        let ours = format!("heat: 374 passes in 3000 ms before the timed reps: {}", energy_summary(374, 3000.0, 2_092_530));
        assert_eq!(joules_per_pass(&ours), Some(5.595));
        // the baseline wrapper's line, as forwarded
        assert_eq!(joules_per_pass("heat: 221 passes in 3003 ms before the timed reps: 2054.0 J, 9.294 J per pass, 684 W mean"), Some(9.294));
        assert_eq!(joules_per_pass("heat: 221 passes in 3003 ms before the timed reps"), None);
        assert_eq!(joules_per_pass("energy: not measured (no NVML library)"), None);
    }

    #[test]
    fn the_energy_ratio_is_the_baselines_joules_over_ours() {
        let line = energy_ratio_line((1.863, 5.595), (3.777, 9.294));
        assert!(line.contains("forward 1.863 J against 3.777 J (2.03x less)"), "{line}");
        assert!(line.contains("forward+backward 5.595 J against 9.294 J (1.66x less)"), "{line}");
    }
}
