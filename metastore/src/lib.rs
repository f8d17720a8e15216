//! strata's metastore: everything that must be authoritative.
//!
//! [`kv`] is the small contract every backend implements (FoundationDB's model);
//! [`topics`] is the typed layer written once on top of it; [`sqlite`] is the embedded
//! backend.

pub mod conformance;
pub mod error;
pub mod fault;
pub mod groups;
pub mod keys;
pub mod kv;
pub mod manifest;
pub mod sqlite;
pub mod topics;

pub use error::{Error, Result};
pub use groups::{CommittedOffset, GroupRecord, TopicPartition};
pub use kv::{KvStore, KvTransaction, transact};
pub use manifest::{ManifestEntry, Published};
pub use sqlite::SqliteStore;
pub use topics::{ClusterRecord, Metastore, NewTopic, PartitionRecord, TopicRecord};

/// Metastores for the typed layer's tests: plain SQLite, and SQLite behind the
/// fault-injecting wrapper (conflicts and "maybe committed" results on 40% of commits).
#[cfg(test)]
pub(crate) fn test_metastores() -> Vec<(&'static str, Metastore, tempfile::TempDir)> {
    use std::sync::Arc;
    let plain_dir = tempfile::tempdir().expect("tempdir");
    let plain = SqliteStore::open(&plain_dir.path().join("m.sqlite")).expect("open");
    let faulty_dir = tempfile::tempdir().expect("tempdir");
    let faulty = fault::FaultyStore::new(
        SqliteStore::open(&faulty_dir.path().join("m.sqlite")).expect("open"),
        fault::FaultRates {
            conflict_percent: 20,
            maybe_committed_percent: 20,
        },
        0x5eed,
    );
    vec![
        (
            "sqlite",
            Metastore::new(Arc::new(plain), b"strata"),
            plain_dir,
        ),
        (
            "faulty sqlite",
            Metastore::new(Arc::new(faulty), b"strata"),
            faulty_dir,
        ),
    ]
}
