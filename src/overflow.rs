//! The exact oracle rounds each value correctly from its exact sum, so with finite inputs a NaN or an
//! infinity in its results means that a value left f64's range: an exact result beyond it (inputs near
//! 1e300, or a SwiGLU of such), or normalised routing weights of scores that underflowed to zero. That is
//! not a result to write or check against: it is reported as bad input, naming the first tensor in
//! pipeline order and the element where it happens.

use moe_reference::layer::named_tensor;
use moe_reference::{Backward, Forward};

use crate::check::candidate::CHECKED;
use crate::check::coords::unflatten;

/// The first of the run's tensors (pipeline order) holding a NaN or an infinity, as one line naming it
/// and the element; `None` when every value is finite.
pub fn first_non_finite(fwd: &Forward, bwd: Option<&Backward>) -> Option<String> {
    CHECKED.iter().find_map(|&name| {
        let a = named_tensor(fwd, bwd, name)?;
        let i = a.iter().position(|v| !v.is_finite())?;
        let at = unflatten(i, a.shape());
        let v = a[ndarray::IxDyn(&at)];
        Some(format!(
            "the exact `{name}` is {v} at {at:?}: the case's values leave f64's range (an exact result beyond \
             ±1.8e308, or a quotient of values that underflow to zero, e.g. sigmoid scores of logits below -745)"
        ))
    })
}
