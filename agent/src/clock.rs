//! Time, in the one place the agent reads clocks: wall-clock milliseconds for record
//! timestamps and segment age, and a monotonic clock for timeouts (group sessions and
//! rebalances), which must not jump when the wall clock is set.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Milliseconds on a monotonic clock that starts near zero when the process does.
pub fn monotonic_ms() -> i64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as i64 + 1
}
