//! strata's metastore: everything that must be authoritative.
//!
//! [`kv`] is the small contract every backend implements (FoundationDB's model);
//! [`topics`] is the typed layer written once on top of it; [`sqlite`] is the embedded
//! backend; [`agents`] and [`controller`] hold the leases that say who is in the
//! cluster and who runs elections.

pub mod acls;
pub mod agents;
pub mod configs;
pub mod conformance;
pub mod controller;
pub mod credentials;
pub mod error;
pub mod fault;
#[cfg(feature = "fdb")]
pub mod fdb;
pub mod groups;
pub mod keys;
pub mod kv;
pub mod manifest;
pub mod quotas;
pub mod sqlite;
pub mod topics;
pub mod transactions;

pub use acls::AclRecord;
pub use agents::{AgentRecord, DrainRecord, ListenerAddress, Roster};
pub use configs::{BrokerConfigs, ConfigScope};
pub use controller::ControllerLease;
pub use credentials::{ScramCredential, UserCredentials};
pub use error::{Error, Result};
pub use groups::{CommittedOffset, GroupRecord, TopicPartition};
pub use kv::{CallLimits, KvStore, KvTransaction, transact, transact_within};
pub use manifest::{ArchiveCleaner, ArchivedAbort, Garbage, ManifestEntry, Published};
pub use quotas::{QuotaChange, QuotaEntity, QuotaRecord};
pub use sqlite::SqliteStore;
pub use strata_core::{LiveAgent, LiveAgents};
pub use topics::{ClusterRecord, Metastore, NewTopic, PartitionRecord, TopicRecord};
pub use transactions::{Change, Settle, TxnRecord, TxnState};

/// The FoundationDB backend on the cluster `cluster_file` names (the client's default
/// file when `None`), its keys under the subspace `(prefix,)`. A build without the `fdb`
/// feature answers an error that names the way out.
pub fn open_fdb(cluster_file: Option<&str>, prefix: &str) -> Result<std::sync::Arc<dyn KvStore>> {
    #[cfg(feature = "fdb")]
    {
        Ok(std::sync::Arc::new(fdb::FdbStore::open(
            cluster_file,
            prefix,
        )?))
    }
    #[cfg(not(feature = "fdb"))]
    {
        let _ = (cluster_file, prefix);
        Err(Error::Invalid(
            "metastore = \"fdb\" needs a strata built with FoundationDB support: \
             `cargo build --release --features fdb` (with libfdb_c 7.3 installed); \
             this binary has only the embedded metastore"
                .to_string(),
        ))
    }
}

/// Releases process-wide backend resources (FoundationDB's network thread, when this
/// build has it); call as the process ends, after every user of the metastore stopped.
pub fn close() {
    #[cfg(feature = "fdb")]
    fdb::stop_network();
}

/// Metastores for the typed layer's tests: plain SQLite, and SQLite behind the
/// fault-injecting wrapper (conflicts and "maybe committed" results on 40% of commits);
/// with the `fdb` feature and `FDB_CLUSTER_FILE` set, FoundationDB both ways as well.
#[cfg(test)]
pub(crate) fn test_metastores() -> Vec<(&'static str, Metastore, tempfile::TempDir)> {
    use std::sync::Arc;
    let faults = fault::FaultRates {
        conflict_percent: 20,
        maybe_committed_percent: 20,
    };
    let plain_dir = tempfile::tempdir().expect("tempdir");
    let plain = SqliteStore::open(&plain_dir.path().join("m.sqlite")).expect("open");
    let faulty_dir = tempfile::tempdir().expect("tempdir");
    let faulty = fault::FaultyStore::new(
        SqliteStore::open(&faulty_dir.path().join("m.sqlite")).expect("open"),
        faults,
        0x5eed,
    );
    #[allow(unused_mut)]
    let mut stores = vec![
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
    ];
    #[cfg(feature = "fdb")]
    if let Some(file) = fdb::tests::cluster_file() {
        let plain = fdb::tests::fresh(&file);
        let faulty = fault::FaultyStore::new(fdb::tests::fresh(&file), faults, 0x5eed);
        stores.push((
            "fdb",
            Metastore::new(Arc::new(plain), b"strata"),
            tempfile::tempdir().expect("tempdir"),
        ));
        stores.push((
            "faulty fdb",
            Metastore::new(Arc::new(faulty), b"strata"),
            tempfile::tempdir().expect("tempdir"),
        ));
    }
    stores
}
