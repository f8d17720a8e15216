//! Log lines a client can cause at any rate (bad frames, refused writes) are throttled:
//! at most one a second per kind, the next one saying how many were left out.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

#[derive(Debug)]
pub struct Throttle {
    every_ms: i64,
    last_ms: AtomicI64,
    skipped: AtomicU64,
}

impl Throttle {
    pub const fn per_second() -> Throttle {
        Throttle {
            every_ms: 1000,
            last_ms: AtomicI64::new(i64::MIN),
            skipped: AtomicU64::new(0),
        }
    }

    /// `Some(left out since the last line)` when a line may be logged now.
    pub fn allow(&self) -> Option<u64> {
        let now = crate::clock::now_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != i64::MIN && now - last < self.every_ms {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // One caller wins the slot; the others count as left out.
        match self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Some(self.skipped.swap(0, Ordering::Relaxed)),
            Err(_) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_then_the_count_of_those_left_out() {
        let t = Throttle::per_second();
        assert_eq!(t.allow(), Some(0));
        assert_eq!(t.allow(), None);
        assert_eq!(t.allow(), None);
        t.last_ms.fetch_sub(1000, Ordering::Relaxed);
        assert_eq!(t.allow(), Some(2));
    }
}
