//! The fast layer's outputs downloaded from the device (`FastLayer::trace`), and the bitwise comparison of two
//! of them: run-to-run determinism, and the same bits from two engines or configurations.

/// Everything the layer wrote, downloaded (bf16 tensors as raw bits), for the checker.
pub struct FastTrace {
    pub row_token: Vec<i32>,
    pub row_slot: Vec<i32>,
    pub offsets: Vec<i32>,
    pub slot_row: Vec<i32>,
    pub h: Vec<u16>,
    pub a: Vec<u16>,
    pub o: Vec<u16>,
    pub y: Vec<u16>,
    pub dh: Vec<u16>,
    /// A' = w·A, the dW2 operand
    pub aw: Vec<u16>,
    pub dx_rows: Vec<u16>,
    pub grad_x: Vec<u16>,
    pub grad_w13: Vec<u16>,
    pub grad_w2: Vec<u16>,
    pub grad_topk_weights: Vec<f32>,
}

impl FastTrace {
    /// The first output tensor in which two traces differ bitwise (grad.topk_weights by its f32 bits) and
    /// the flat index of its first differing element; `None` when every output is the same: run-to-run
    /// determinism, and the same bits from two engines or configurations.
    pub fn first_difference(&self, other: &FastTrace) -> Option<(&'static str, usize)> {
        // (lengths that differ: the first index past the shorter one)
        fn at<T: PartialEq>(x: &[T], y: &[T]) -> Option<usize> {
            (x != y).then(|| x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(x.len().min(y.len())))
        }
        let bf16: [(&'static str, &Vec<u16>, &Vec<u16>); 10] = [
            ("h", &self.h, &other.h),
            ("a", &self.a, &other.a),
            ("o", &self.o, &other.o),
            ("y", &self.y, &other.y),
            ("dh", &self.dh, &other.dh),
            ("a_weighted", &self.aw, &other.aw),
            ("dx_rows", &self.dx_rows, &other.dx_rows),
            ("grad.x", &self.grad_x, &other.grad_x),
            ("grad.w13", &self.grad_w13, &other.grad_w13),
            ("grad.w2", &self.grad_w2, &other.grad_w2),
        ];
        if let Some(d) = bf16.iter().find_map(|(name, x, y)| at(x, y).map(|i| (*name, i))) {
            return Some(d);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        at(&bits(&self.grad_topk_weights), &bits(&other.grad_topk_weights)).map(|i| ("grad.topk_weights", i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_names_the_tensor_and_index() {
        let t = || FastTrace {
            row_token: vec![0],
            row_slot: vec![0],
            offsets: vec![0, 1],
            slot_row: vec![0],
            h: vec![1, 2, 3],
            a: vec![4],
            o: vec![5],
            y: vec![6],
            dh: vec![7],
            aw: vec![8],
            dx_rows: vec![9],
            grad_x: vec![10],
            grad_w13: vec![11, 12],
            grad_w2: vec![13],
            grad_topk_weights: vec![0.5, -0.0],
        };
        assert_eq!(t().first_difference(&t()), None);
        let mut b = t();
        b.grad_w13[1] = 0x7fc0;
        b.h.push(0);
        assert_eq!(t().first_difference(&b), Some(("h", 3)));
        b.h.pop();
        assert_eq!(t().first_difference(&b), Some(("grad.w13", 1)));
        let mut c = t();
        c.grad_topk_weights[1] = 0.0; // +0 against -0: equal as floats, not as bits
        assert_eq!(t().first_difference(&c), Some(("grad.topk_weights", 1)));
    }
}
