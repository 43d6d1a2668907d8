//! The check report: per tensor the numbers and the worst element, as JSON (serde) and as a human summary.
//! In JSON an infinite ratio (a NaN or infinity in the candidate, or an error where the bound is zero)
//! is written as `null`, JSON having no infinity.

use std::fmt::Write;

use serde::Serialize;

use super::coords::Coords;

/// The worst element of a tensor (largest error/bound).
#[derive(Clone, Debug, Serialize)]
pub struct Worst {
    #[serde(flatten)]
    pub at: Coords,
    pub got: f64,
    pub exact: f64,
    pub bound: f64,
    pub ratio: f64,
}

/// One checked tensor.
#[derive(Clone, Debug, Serialize)]
pub struct TensorResult {
    pub name: String,
    /// `pass` or `fail`.
    pub verdict: &'static str,
    pub elements: usize,
    /// Elements with |got − exact| > bound (NaN and infinities included).
    pub violations: usize,
    /// NaN or infinite elements in the candidate.
    pub non_finite: usize,
    pub max_abs_error: f64,
    /// max |got − exact| / bound.
    pub max_ratio: f64,
    pub median_ratio: f64,
    pub p99_ratio: f64,
    pub worst: Option<Worst>,
}

/// A tensor that was not compared, and why.
#[derive(Clone, Debug, Serialize)]
pub struct NotChecked {
    pub name: String,
    pub why: String,
}

/// The whole report of `check`.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub case: String,
    pub candidate: String,
    pub recipe: String,
    /// `pass` or `fail`.
    pub verdict: &'static str,
    pub tensors: Vec<TensorResult>,
    pub not_checked: Vec<NotChecked>,
    /// Tensors in the candidate that check accepts but does not compare (inputs, quantised copies,
    /// bounds ...).
    pub ignored: Vec<String>,
}

/// The accepted but not compared tensors, short: names, with `q.*`, `bound.*` and `emulated.*` as counts.
pub fn not_compared(names: &[String]) -> String {
    let mut items: Vec<String> = Vec::new();
    let mut groups: Vec<(&str, usize)> = Vec::new();
    for n in names {
        match crate::case::ANNEX_PREFIXES.iter().find(|p| n.starts_with(*p)) {
            Some(p) => match groups.iter_mut().find(|(g, _)| g == p) {
                Some((_, c)) => *c += 1,
                None => groups.push((p, 1)),
            },
            None => items.push(n.clone()),
        }
    }
    items.extend(groups.into_iter().map(|(p, c)| format!("{p}* ({c})")));
    items.join(", ")
}

fn num(v: f64) -> String {
    if v.is_infinite() {
        "inf".into()
    } else {
        format!("{v:.3e}")
    }
}

impl Worst {
    pub fn human(&self) -> String {
        format!(
            "{}: got {}, exact {}, bound {}",
            self.at.human(),
            if self.got.is_finite() { format!("{:.6e}", self.got) } else { format!("{}", self.got) },
            num(self.exact),
            num(self.bound)
        )
    }
}

impl CheckReport {
    /// The summary printed on stdout.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "moe-oracle check {} --candidate {} (recipe {}): {}",
            self.case,
            self.candidate,
            self.recipe,
            if self.verdict == "pass" { "PASS" } else { "FAIL" }
        );
        let _ = writeln!(s, "  {:<20} {:<7} {:>11} {:>14} {:>12} {:>10}", "tensor", "verdict", "max |err|", "max err/bound", "violations", "elements");
        for t in &self.tensors {
            let _ = writeln!(
                s,
                "  {:<20} {:<7} {:>11} {:>14} {:>12} {:>10}",
                t.name,
                if t.violations == 0 { "pass" } else { "FAIL" },
                num(t.max_abs_error),
                num(t.max_ratio),
                t.violations,
                t.elements
            );
            if let Some(w) = t.worst.as_ref().filter(|_| t.violations > 0) {
                let _ = writeln!(s, "      worst: {}", w.human());
            }
        }
        if !self.not_checked.is_empty() {
            let items: Vec<String> = self.not_checked.iter().map(|n| format!("{} ({})", n.name, n.why)).collect();
            let _ = writeln!(s, "  not checked: {}", items.join(", "));
        }
        if !self.ignored.is_empty() {
            let _ = writeln!(s, "  not compared: {}", not_compared(&self.ignored));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn not_compared_counts_quantised_copies_bounds_and_emulated_results() {
        let n: Vec<String> = ["bound.y", "bound.grad.x", "dy", "q.x", "q.x.scale", "x", "emulated.y"].map(String::from).to_vec();
        assert_eq!(super::not_compared(&n), "dy, x, bound.* (2), q.* (2), emulated.* (1)");
    }
}
