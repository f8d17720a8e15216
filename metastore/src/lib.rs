//! strata's metastore: everything that must be authoritative.
//!
//! [`kv`] is the small contract every backend implements (FoundationDB's model);
//! [`topics`] is the typed layer written once on top of it; [`sqlite`] is the embedded
//! backend.

pub mod error;
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
