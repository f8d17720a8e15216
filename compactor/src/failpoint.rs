//! Crash points for fault tests: with `STRATA_FAILPOINT_CRASH=<name>` in its
//! environment, the process aborts at the point of that name, as if SIGKILLed there (no
//! destructor runs, nothing is flushed). The points are between the steps whose order
//! the crash-consistency arguments rely on (see [`crate::gc`] and the agent's lifecycle
//! service).

/// Aborts the process if `STRATA_FAILPOINT_CRASH` names `point`.
pub fn crash(point: &str) {
    if std::env::var("STRATA_FAILPOINT_CRASH").is_ok_and(|v| v == point) {
        tracing::error!(failpoint = point, "failpoint: crashing here");
        std::process::abort();
    }
}
