//! Opens the metastore the settings name.

use std::sync::Arc;

use anyhow::Context;
use strata_metastore::{KvStore, Metastore, SqliteStore};

use crate::config::{MetastoreKind, Settings};

/// Key prefix of everything this cluster keeps in the metastore (FoundationDB adds its
/// own subspace, `fdb_prefix`, in front).
pub(crate) const PREFIX: &[u8] = b"strata";

pub fn open(settings: &Settings) -> anyhow::Result<Metastore> {
    Ok(Metastore::new(open_store(settings)?, PREFIX))
}

/// The backend the settings name, without the typed layer.
pub fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn KvStore>> {
    let kv: Arc<dyn KvStore> = match settings.metastore {
        MetastoreKind::Embedded => {
            let path = settings.metastore_path();
            Arc::new(
                SqliteStore::open(&path)
                    .with_context(|| format!("cannot open metastore {}", path.display()))?,
            )
        }
        MetastoreKind::Fdb => open_fdb(settings)?,
    };
    Ok(kv)
}

fn open_fdb(settings: &Settings) -> anyhow::Result<Arc<dyn KvStore>> {
    let cluster_file = match &settings.fdb_cluster_file {
        Some(path) => Some(
            path.to_str()
                .with_context(|| format!("fdb_cluster_file {} is not UTF-8", path.display()))?,
        ),
        None => None,
    };
    strata_metastore::open_fdb(cluster_file, &settings.fdb_prefix)
        .context("cannot open the FoundationDB metastore")
}

/// Releases process-wide metastore resources (FoundationDB's network thread); call as the
/// process ends, after every agent has stopped.
pub fn close() {
    strata_metastore::close();
}

#[cfg(all(test, not(feature = "fdb")))]
mod tests {
    use super::*;

    #[test]
    fn fdb_without_the_feature_is_refused_with_the_way_out() {
        let settings = Settings {
            metastore: MetastoreKind::Fdb,
            ..Settings::default()
        };
        let message = format!("{:#}", open(&settings).expect_err("no fdb in this build"));
        assert!(message.contains("--features fdb"), "{message}");
    }
}
