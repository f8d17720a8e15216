//! Deleting archived objects that no manifest names.
//!
//! Two kinds of object are collected:
//! - **garbage**: objects retired from a manifest (retention moved the log start past
//!   them, or their topic was deleted). The metastore lists them with the time they
//!   left the manifest ([`strata_metastore::Garbage`]).
//! - **orphans**: objects uploaded and never published (a tiering worker that crashed or
//!   failed between upload and publish, or whose publish found the offsets already
//!   covered). Only a listing of the store finds them.
//!
//! Either is deleted only once `grace_ms` has passed: since it left the manifest for
//! garbage, since it was written for an orphan.
//!
//! ## Crash consistency
//! Every step is one of: a metastore transaction, or an object-store call that is
//! idempotent. The order is (1) the manifest stops naming the object and the garbage
//! list names it, in one transaction (retention, topic deletion); (2) after the grace
//! period, the object is deleted; (3) the garbage entry is removed. A crash before (1)
//! leaves the old state whole; between (1) and (2) a garbage entry whose object is still
//! there, deleted on a later pass; between (2) and (3) an entry whose object is gone,
//! which the next pass deletes again (a missing object counts as deleted) and forgets.
//! No step deletes an object a manifest names, so no reader ever finds a hole in the
//! log: what a manifest names is in the store.
//!
//! The grace period covers two things: reads in flight that planned on the manifest
//! before (1) (reads below the log start are refused before they reach the archive, so
//! only those already past that check), and, for orphans, an upload whose publish is
//! still on its way: both are bounded by the object-store and metastore call timeouts
//! (a minute each), so the grace period must be longer than that.

use std::collections::BTreeSet;

use object_store::path::Path;
use strata_metastore::Metastore;
use strata_tiering::Archive;

/// Garbage entries read per pass.
const GARBAGE_BATCH: usize = 1_000;

/// What a collection deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    pub objects: usize,
    pub bytes: u64,
}

impl Collected {
    pub fn add(&mut self, other: Collected) {
        self.objects += other.objects;
        self.bytes += other.bytes;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Metastore(#[from] strata_metastore::Error),
    #[error(transparent)]
    Archive(#[from] strata_tiering::Error),
}

/// Deletes the garbage that has been out of every manifest for `grace_ms` at `now_ms`.
pub async fn collect_garbage(
    metastore: &Metastore,
    archive: &Archive,
    now_ms: i64,
    grace_ms: i64,
) -> Result<Collected, Error> {
    let mut done = Collected::default();
    let mut forgotten = Vec::new();
    for g in metastore.garbage(GARBAGE_BATCH).await? {
        if now_ms.saturating_sub(g.retired_at_ms) < grace_ms {
            continue;
        }
        archive.delete(&Path::from(g.path.as_str())).await?;
        tracing::info!(topic = %g.topic, partition = g.partition, object = %g.path, bytes = g.size_bytes, "deleted an archived object past retention");
        done.add(Collected {
            objects: 1,
            bytes: g.size_bytes,
        });
        forgotten.push(g.path);
        crate::failpoint::crash("gc.after_object_delete");
    }
    if !forgotten.is_empty() {
        metastore.forget_garbage(&forgotten).await?;
    }
    Ok(done)
}

/// Deletes the objects in a partition's directory of the store that neither the
/// partition's manifest nor the garbage list names and that were written at least
/// `grace_ms` before `now_ms`.
pub async fn collect_orphans(
    metastore: &Metastore,
    archive: &Archive,
    topic: &str,
    partition: i32,
    now_ms: i64,
    grace_ms: i64,
) -> Result<Collected, Error> {
    // Listed before the manifest is read: an object published meanwhile is then named.
    let listed = archive
        .list(&archive.partition_dir(topic, partition))
        .await?;
    let mut named: BTreeSet<String> = metastore
        .manifest(topic, partition)
        .await?
        .into_iter()
        .map(|e| e.path)
        .collect();
    named.extend(
        metastore
            .garbage(usize::MAX)
            .await?
            .into_iter()
            .map(|g| g.path),
    );
    let mut done = Collected::default();
    for o in listed {
        let age = now_ms.saturating_sub(o.last_modified.timestamp_millis());
        if named.contains(o.location.as_ref()) || age < grace_ms {
            continue;
        }
        archive.delete(&o.location).await?;
        tracing::info!(topic, partition, object = %o.location, bytes = o.size, "deleted an archived object no manifest names");
        done.add(Collected {
            objects: 1,
            bytes: o.size,
        });
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use strata_metastore::{ManifestEntry, SqliteStore};

    fn entry(archive: &Archive, first: i64, last: i64, unique: &str) -> ManifestEntry {
        ManifestEntry {
            first_offset: first,
            last_offset: last,
            min_timestamp_ms: 0,
            max_timestamp_ms: 0,
            record_count: last - first + 1,
            size_bytes: 3,
            path: archive.object_path("t", 0, first, last, unique).to_string(),
            checksum: 0,
            aborted: Vec::new(),
        }
    }

    /// Retired objects wait out the grace period, then go; what the manifest names and
    /// recent orphans stay; old orphans go; a pass repeated after a crash is harmless.
    #[tokio::test]
    async fn only_unnamed_objects_past_the_grace_period_are_deleted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("m.sqlite")).expect("open");
        let m = Metastore::new(std::sync::Arc::new(store), b"strata");
        let root = dir.path().join("archive");
        let archive = Archive::from_url(&format!("file://{}", root.display())).expect("archive");
        let (a, b) = (entry(&archive, 0, 9, "a"), entry(&archive, 10, 19, "b"));
        let orphan = archive.object_path("t", 0, 10, 19, "orphan");
        for path in [&a.path, &b.path, &orphan.to_string()] {
            archive
                .put(&Path::from(path.as_str()), Bytes::from_static(b"abc"))
                .await
                .expect("put");
        }
        m.publish_archived("t", 0, a.clone())
            .await
            .expect("publish");
        m.publish_archived("t", 0, b.clone())
            .await
            .expect("publish");
        m.advance_log_start("t", 0, 10, 1_000)
            .await
            .expect("retire a");
        let exists = |p: &str| root.join(p).exists();
        let grace = 60_000;

        assert_eq!(
            collect_garbage(&m, &archive, 1_000 + grace - 1, grace)
                .await
                .expect("gc"),
            Collected::default(),
            "within the grace period"
        );
        assert!(exists(&a.path));
        let got = collect_garbage(&m, &archive, 1_000 + grace, grace)
            .await
            .expect("gc");
        assert_eq!(
            got,
            Collected {
                objects: 1,
                bytes: 3
            }
        );
        assert!(!exists(&a.path) && exists(&b.path));
        assert!(m.garbage(10).await.expect("list").is_empty());

        let written = std::fs::metadata(root.join(orphan.as_ref()))
            .and_then(|md| md.modified())
            .expect("mtime")
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        let young = collect_orphans(&m, &archive, "t", 0, written + 10, grace)
            .await
            .expect("orphans");
        assert_eq!(
            young,
            Collected::default(),
            "a young orphan may be an upload in flight"
        );
        let old = collect_orphans(&m, &archive, "t", 0, written + grace + 1_000, grace)
            .await
            .expect("orphans");
        assert_eq!(
            old,
            Collected {
                objects: 1,
                bytes: 3
            }
        );
        assert!(
            !exists(orphan.as_ref()) && exists(&b.path),
            "the named object stays"
        );

        // A crash between deleting and forgetting: the next pass deletes again.
        m.advance_log_start("t", 0, 20, 2_000)
            .await
            .expect("retire b");
        archive
            .delete(&Path::from(b.path.as_str()))
            .await
            .expect("early delete");
        let again = collect_garbage(&m, &archive, 2_000 + grace, grace)
            .await
            .expect("gc");
        assert_eq!(again.objects, 1);
        assert!(m.garbage(10).await.expect("list").is_empty());
    }
}
