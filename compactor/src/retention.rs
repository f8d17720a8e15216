//! Time and size retention (`cleanup.policy=delete`), as Kafka applies them, over the
//! whole log of a partition: the archived objects that are no longer on local disk,
//! then the local segments.
//!
//! - `retention.ms`: the oldest units whose newest record is older than `retention.ms`
//!   go, up to the first that is not (Kafka's `deleteRetentionMsBreachedSegments`).
//! - `retention.bytes`: of what is left, the oldest units go while the log without them
//!   is still at least `retention.bytes` (Kafka's `deleteRetentionSizeBreachedSegments`:
//!   the log may stay above the limit by less than one unit).
//! - `-1` means unlimited for both. Only whole units go, and only units the caller
//!   offers: sealed, committed segments and published objects, never the active segment
//!   (whose size counts, but which is never deleted).
//!
//! The answer is a new log start: the first offset of the first unit kept.

/// A segment or an archived object, as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub first_offset: i64,
    /// One past its last offset.
    pub next_offset: i64,
    /// Its newest record's timestamp (-1 if it has none).
    pub max_timestamp_ms: i64,
    pub size_bytes: u64,
}

/// A topic's retention settings (Kafka's names; -1: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub retention_ms: i64,
    pub retention_bytes: i64,
}

/// Where retention puts the log start: `units` are what may go, oldest first and
/// contiguous; `kept_bytes` is the size of what never goes (the active segment).
/// `None`: nothing is due.
pub fn retention_start(
    units: &[Unit],
    kept_bytes: u64,
    now_ms: i64,
    policy: Policy,
) -> Option<i64> {
    let mut gone = 0;
    if policy.retention_ms >= 0 {
        gone = units
            .iter()
            .take_while(|u| now_ms.saturating_sub(u.max_timestamp_ms) > policy.retention_ms)
            .count();
    }
    if policy.retention_bytes >= 0 {
        let rest = &units[gone..];
        let total: u64 = kept_bytes + rest.iter().map(|u| u.size_bytes).sum::<u64>();
        let mut excess = total as i128 - policy.retention_bytes as i128;
        for u in rest {
            if excess - (u.size_bytes as i128) < 0 {
                break;
            }
            excess -= u.size_bytes as i128;
            gone += 1;
        }
    }
    match gone {
        0 => None,
        n => Some(units[n - 1].next_offset),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn units(sizes_and_times: &[(u64, i64)]) -> Vec<Unit> {
        let mut next = 0;
        sizes_and_times
            .iter()
            .map(|&(size, ts)| {
                let u = Unit {
                    first_offset: next,
                    next_offset: next + 10,
                    max_timestamp_ms: ts,
                    size_bytes: size,
                };
                next += 10;
                u
            })
            .collect()
    }

    const UNLIMITED: Policy = Policy {
        retention_ms: -1,
        retention_bytes: -1,
    };

    #[test]
    fn time_retention_stops_at_the_first_recent_unit() {
        let log = units(&[(100, 1_000), (100, 5_000), (100, 7_000), (100, 2_000)]);
        let policy = Policy {
            retention_ms: 4_000,
            ..UNLIMITED
        };
        // At 9_500 the first two are older than 4 s; the fourth is too, but comes after
        // one that is not (Kafka stops there as well).
        assert_eq!(retention_start(&log, 0, 9_500, policy), Some(20));
        assert_eq!(
            retention_start(&log, 0, 5_000, policy),
            None,
            "exactly 4 s is kept"
        );
        assert_eq!(retention_start(&log, 0, 100_000, policy), Some(40));
        assert_eq!(retention_start(&log, 0, 100_000, UNLIMITED), None);
    }

    #[test]
    fn size_retention_counts_the_active_segment_and_keeps_at_least_the_limit() {
        let log = units(&[(100, 0), (100, 0), (100, 0)]);
        let bytes = |b| Policy {
            retention_bytes: b,
            ..UNLIMITED
        };
        // 300 + 50 active: 350 - 300 = 50 over; dropping one unit would leave 250 < 300.
        assert_eq!(retention_start(&log, 50, 0, bytes(300)), None);
        assert_eq!(retention_start(&log, 50, 0, bytes(250)), Some(10));
        assert_eq!(retention_start(&log, 50, 0, bytes(0)), Some(30));
        assert_eq!(
            retention_start(&[], 500, 0, bytes(0)),
            None,
            "never the active segment"
        );
    }

    proptest! {
        /// Whatever the units and settings: the start is a unit boundary; every unit
        /// before it breached the time limit, or had to go for size; what is kept is at
        /// least the size limit, unless everything offered went.
        #[test]
        fn the_start_is_a_boundary_and_keeps_what_the_limits_allow(
            log in prop::collection::vec((1u64..1_000, 0i64..10_000), 0..20),
            kept in 0u64..2_000,
            now in 0i64..20_000,
            ms in -1i64..10_000,
            bytes in -1i64..10_000,
        ) {
            let log = units(&log);
            let policy = Policy { retention_ms: ms, retention_bytes: bytes };
            let Some(start) = retention_start(&log, kept, now, policy) else {
                return Ok(());
            };
            let gone = log.iter().position(|u| u.next_offset == start).map(|i| i + 1);
            prop_assert!(gone.is_some(), "start {start} is not a boundary");
            let gone = gone.unwrap_or(0);
            let kept_bytes = kept + log[gone..].iter().map(|u| u.size_bytes).sum::<u64>();
            let by_time = log.iter().take_while(|u| ms >= 0 && now - u.max_timestamp_ms > ms).count();
            if gone > by_time {
                prop_assert!(bytes >= 0);
                prop_assert!(kept_bytes as i64 >= bytes, "kept {kept_bytes} < {bytes}");
            }
        }
    }
}
