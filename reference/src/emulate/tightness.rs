//! How an emulated (or kernel) result sits inside its bounds: per tensor, the distribution of
//! `|result − exact| / bound`. Soundness is `max ≤ 1`; a useful bound has its median well above zero
//! (a bound a thousand times too loose catches nothing).

use ndarray::ArrayViewD;

/// `|result − exact| / bound` statistics of one tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Tightness {
    pub name: String,
    pub elements: usize,
    /// Elements with `|result − exact| > bound` (or a non-finite result where the exact one is finite).
    pub violations: usize,
    pub max: f64,
    pub median: f64,
    pub p99: f64,
    /// Flat index of the largest ratio.
    pub worst: Option<usize>,
}

/// The statistics of `got` against `exact` under `bound` (same shapes; elements whose bound and error
/// are both zero count as ratio 0).
pub fn tightness(name: &str, got: ArrayViewD<f64>, exact: ArrayViewD<f64>, bound: ArrayViewD<f64>) -> Tightness {
    assert_eq!(got.shape(), exact.shape(), "{name}: shapes differ");
    assert_eq!(got.shape(), bound.shape(), "{name}: bound shape differs");
    let mut ratios: Vec<f64> = Vec::with_capacity(got.len());
    let (mut violations, mut max, mut worst) = (0usize, 0.0f64, None);
    for (i, ((&g, &x), &b)) in got.iter().zip(exact.iter()).zip(bound.iter()).enumerate() {
        let err = (g - x).abs();
        let r = if err == 0.0 { 0.0 } else if b > 0.0 { err / b } else { f64::INFINITY };
        let r = if r.is_nan() { f64::INFINITY } else { r };
        if r > 1.0 {
            violations += 1;
        }
        if r > max || worst.is_none() {
            max = max.max(r);
            worst = Some(i);
        }
        ratios.push(r);
    }
    ratios.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| if ratios.is_empty() { 0.0 } else { ratios[((ratios.len() - 1) as f64 * p).round() as usize] };
    Tightness { name: name.into(), elements: ratios.len(), violations, max, median: q(0.5), p99: q(0.99), worst }
}
