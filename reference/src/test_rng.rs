//! A small deterministic generator for the crate's unit tests (xorshift64), so that failures reproduce.

/// xorshift64 from a non-zero seed.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}
