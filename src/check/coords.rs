//! Where an element of a case-format tensor sits in the model: token, slot, expert, hidden or
//! intermediate feature, gate or up half, and (for per-row intermediates) its dispatched row in the
//! oracle's order and in the kernel's.

use moe_reference::dispatch::RowMap;
use ndarray::Array2;
use serde::Serialize;

/// Model coordinates of one element; absent fields do not apply to the tensor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Coords {
    /// The element's index in the tensor (oracle row order for per-row tensors).
    pub index: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert: Option<usize>,
    /// Dispatched row, oracle (expert-major) order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row: Option<usize>,
    /// The same row in the candidate's own order (when it gave `fwd.row_token`/`fwd.row_slot`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_row: Option<usize>,
    /// `gate` or `up` (tensors with a 2I axis).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub half: Option<&'static str>,
    /// Feature index along H.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<usize>,
    /// Feature index along I (within its half).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intermediate: Option<usize>,
}

/// Row-major multi-index of a flat position.
pub fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = flat % n;
            flat /= n;
        }
    }
    idx
}

/// The expert of each dispatched row.
pub fn row_experts(rows: &RowMap) -> Vec<usize> {
    let mut out = vec![0; rows.rows()];
    for e in 0..rows.experts {
        for r in rows.expert_rows(e) {
            out[r] = e;
        }
    }
    out
}

/// The expert of dispatched row `r` (rows are expert-major: the expert whose offsets contain `r`).
pub fn expert_of_row(rows: &RowMap, r: usize) -> usize {
    rows.expert_offsets.partition_point(|&o| o <= r) - 1
}

/// What the layer needs to name coordinates.
pub struct Layout<'a> {
    pub rows: &'a RowMap,
    pub topk_ids: &'a Array2<i32>,
    pub intermediate: usize,
    pub kernel_row: Option<&'a [usize]>,
}

impl Layout<'_> {
    /// `(half, intermediate)` of an index along a 2I axis.
    fn split(&self, c: usize) -> (&'static str, usize) {
        let i = self.intermediate;
        if c < i {
            ("gate", c)
        } else {
            ("up", c - i)
        }
    }

    /// The coordinates of element `flat` of tensor `name` with shape `shape`.
    pub fn describe(&self, name: &str, flat: usize, shape: &[usize]) -> Coords {
        let index = unflatten(flat, shape);
        let mut c = Coords { index: index.clone(), ..Coords::default() };
        match name {
            "y" | "grad.x" => {
                c.token = Some(index[0]);
                c.hidden = Some(index[1]);
            }
            "grad.topk_weights" => {
                let (t, j) = (index[0], index[1]);
                c.token = Some(t);
                c.slot = Some(j);
                let id = self.topk_ids[[t, j]];
                c.expert = (id >= 0).then_some(id as usize);
            }
            "grad.router.weight" => {
                c.expert = Some(index[0]);
                c.hidden = Some(index[1]);
            }
            "grad.w13" => {
                let (h, i) = self.split(index[1]);
                c.expert = Some(index[0]);
                c.half = Some(h);
                c.intermediate = Some(i);
                c.hidden = Some(index[2]);
            }
            "grad.w2" => {
                c.expert = Some(index[0]);
                c.hidden = Some(index[1]);
                c.intermediate = Some(index[2]);
            }
            _ => {
                let r = index[0];
                c.row = Some(r);
                c.kernel_row = self.kernel_row.map(|k| k[r]);
                c.token = Some(self.rows.row_token[r]);
                c.slot = Some(self.rows.row_slot[r]);
                c.expert = Some(expert_of_row(self.rows, r));
                match name {
                    "fwd.h" | "bwd.dh" => {
                        let (h, i) = self.split(index[1]);
                        c.half = Some(h);
                        c.intermediate = Some(i);
                    }
                    "fwd.a" | "bwd.da" => c.intermediate = Some(index[1]),
                    _ => c.hidden = Some(index[1]),
                }
            }
        }
        c
    }
}

impl Coords {
    /// One line for humans: `token 3, slot 1, expert 5, up half, intermediate 7`.
    pub fn human(&self) -> String {
        let opt = |k: &str, v: Option<usize>| v.map(|v| format!("{k} {v}"));
        let parts: Vec<String> = [
            opt("token", self.token),
            opt("slot", self.slot),
            opt("expert", self.expert),
            opt("row", self.row),
            opt("kernel row", self.kernel_row),
            self.half.map(|h| format!("{h} half")),
            opt("intermediate", self.intermediate),
            opt("hidden", self.hidden),
        ]
        .into_iter()
        .flatten()
        .collect();
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unflatten_is_row_major() {
        assert_eq!(unflatten(0, &[2, 3, 4]), vec![0, 0, 0]);
        assert_eq!(unflatten(23, &[2, 3, 4]), vec![1, 2, 3]);
        assert_eq!(unflatten(5, &[2, 3]), vec![1, 2]);
    }

    #[test]
    fn rows_name_token_slot_expert_and_half() {
        // 3 tokens, k = 2, 3 experts; token 1's slot 1 is unused.
        let ids = ndarray::array![[2, 0], [1, -1], [0, 1]];
        let rows = RowMap::build(ids.view(), 3);
        // Expert-major rows: e0: (0,1), (2,0); e1: (1,0), (2,1); e2: (0,0).
        let l = Layout { rows: &rows, topk_ids: &ids, intermediate: 4, kernel_row: None };
        let c = l.describe("fwd.h", 3 * 8 + 6, &[5, 8]);
        assert_eq!((c.token, c.slot, c.expert, c.half, c.intermediate), (Some(2), Some(1), Some(1), Some("up"), Some(2)));
        let c = l.describe("fwd.o", 4 * 16 + 9, &[5, 16]);
        assert_eq!((c.token, c.slot, c.expert, c.hidden), (Some(0), Some(0), Some(2), Some(9)));
        let c = l.describe("grad.topk_weights", 1, &[3, 2]);
        assert_eq!((c.token, c.slot, c.expert), (Some(0), Some(1), Some(0)));
        let c = l.describe("grad.topk_weights", 3, &[3, 2]);
        assert_eq!(c.expert, None, "an unused slot has no expert");
        let c = l.describe("grad.w13", 2 * 8 * 16 + 3 * 16 + 5, &[3, 8, 16]);
        assert_eq!((c.expert, c.half, c.intermediate, c.hidden), (Some(2), Some("gate"), Some(3), Some(5)));
    }
}
