//! The compactor: the data lifecycle of a partition across the local log and the
//! archive.
//!
//! - [`retention`]: where `retention.ms` and `retention.bytes` put the log start, over
//!   the archived objects and the local segments as one log (Kafka's rules: whole
//!   segments or objects, oldest first, never the active segment);
//! - [`gc`]: deleting archived objects that no manifest names any more, once a grace
//!   period for readers that planned on them has passed (the crash-consistency argument
//!   is in its module docs).
//!
//! - [`compaction`]: log compaction (`cleanup.policy=compact`) of a replica's local log.
//!
//! The compaction of archived objects and the merging of small ones are not built yet
//! (issue 15).

pub mod compaction;
pub mod failpoint;
pub mod gc;
pub mod retention;

pub use compaction::{Cleaned, CompactionPolicy, KeyMap, compact};
pub use gc::{Collected, collect_garbage, collect_orphans};
pub use retention::{Policy, Unit, retention_start};
