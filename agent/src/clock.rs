//! Time, in the one place the agent reads clocks: wall-clock milliseconds for record
//! timestamps and segment age, and tokio's clock for I/O deadlines.
//!
//! Code that decides correctness (the membership lease, the controller's lease, the ISR
//! lag, group sessions and rebalances) takes a [`Clock`] instead ([`SystemClock`] in production, `strata_core::clock::ManualClock` in
//! tests). The workspace's `clippy.toml` bans `SystemTime::now`, `Instant::now` and
//! tokio's sleeps everywhere else, so a new reading of the system clocks has to come
//! through here.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use strata_core::clock::{Clock, Sleep, SystemClock};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Now, on tokio's clock: for deadlines of I/O (a frame's arrival, a long poll), which
/// decide no correctness.
pub fn instant() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// Sleeps on tokio's clock, for pauses between retries (which decide nothing).
pub async fn pause(d: Duration) {
    tokio::time::sleep(d).await
}

/// Sleeps until `deadline` on tokio's clock (a long poll's end).
pub async fn pause_until(deadline: tokio::time::Instant) {
    tokio::time::sleep_until(deadline).await
}
