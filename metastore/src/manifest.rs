//! The manifest of archived segments: per partition, one entry per Parquet object in
//! object storage, contiguous in offsets.
//!
//! Invariant 5 (DESIGN.md): an object is uploaded first and then published here by one
//! short transaction. Publishing is idempotent: an entry whose offsets are already covered
//! is not added again (the object it names becomes an orphan for the compactor), so a
//! crash or retry between upload and publish leaves neither a gap nor a double entry.

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kv::prefix_end;
use crate::topics::{Metastore, decode, encode};

/// One archived object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub first_offset: i64,
    pub last_offset: i64,
    pub min_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
    pub record_count: i64,
    pub size_bytes: u64,
    /// Object path relative to the store's root.
    pub path: String,
    /// CRC32C of the object's bytes.
    pub checksum: u32,
}

/// What publishing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    Added,
    /// The offsets were already archived (a retried upload); nothing changed.
    AlreadyCovered,
}

impl Metastore {
    fn manifest_prefix(&self, topic: &str, partition: i32) -> Vec<u8> {
        self.key()
            .str("manifest")
            .str(topic)
            .u32(partition as u32)
            .into_bytes()
    }

    /// Publishes an uploaded object. It must continue the manifest (start right after the
    /// last entry), or start it.
    pub async fn publish_archived(
        &self,
        topic: &str,
        partition: i32,
        entry: ManifestEntry,
    ) -> Result<Published> {
        let prefix = self.manifest_prefix(topic, partition);
        let key = self
            .key()
            .str("manifest")
            .str(topic)
            .u32(partition as u32)
            .u64(entry.first_offset as u64)
            .into_bytes();
        self.transact(move |txn| {
            let (prefix, key, entry) = (prefix.clone(), key.clone(), entry.clone());
            async move {
                let last = txn.get_range(&prefix, &prefix_end(&prefix), 1, true).await?;
                if let Some((k, v)) = last.first() {
                    let last: ManifestEntry = decode(k, v)?;
                    if entry.last_offset <= last.last_offset {
                        return Ok(Published::AlreadyCovered);
                    }
                    if entry.first_offset != last.last_offset + 1 {
                        return Err(Error::Invalid(format!(
                            "archived object {}..={} does not continue the manifest, which ends at {}",
                            entry.first_offset, entry.last_offset, last.last_offset
                        )));
                    }
                }
                txn.set(&key, &encode(&entry));
                Ok(Published::Added)
            }
            .boxed()
        })
        .await
    }

    /// A partition's manifest, in offset order.
    pub async fn manifest(&self, topic: &str, partition: i32) -> Result<Vec<ManifestEntry>> {
        let prefix = self.manifest_prefix(topic, partition);
        self.transact(move |txn| {
            let prefix = prefix.clone();
            async move {
                let mut out = Vec::new();
                for (k, v) in txn
                    .get_range(&prefix, &prefix_end(&prefix), 0, false)
                    .await?
                {
                    out.push(decode(&k, &v)?);
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(first: i64, last: i64) -> ManifestEntry {
        ManifestEntry {
            first_offset: first,
            last_offset: last,
            min_timestamp_ms: 0,
            max_timestamp_ms: 0,
            record_count: last - first + 1,
            size_bytes: 10,
            path: format!("p/{first}"),
            checksum: 0,
        }
    }

    #[tokio::test]
    async fn publishing_is_contiguous_and_idempotent() {
        for (_, m, _dir) in crate::test_metastores() {
            publishing_on(m).await;
        }
    }

    async fn publishing_on(m: Metastore) {
        // Under injected "maybe committed" faults, a first publish can find that its own
        // earlier attempt already covered the offsets.
        let first = m
            .publish_archived("t", 0, entry(0, 99))
            .await
            .expect("first");
        assert!(matches!(
            first,
            Published::Added | Published::AlreadyCovered
        ));
        assert_eq!(
            m.publish_archived("t", 0, entry(0, 99))
                .await
                .expect("retry"),
            Published::AlreadyCovered
        );
        assert!(
            m.publish_archived("t", 0, entry(150, 199)).await.is_err(),
            "a gap"
        );
        m.publish_archived("t", 0, entry(100, 199))
            .await
            .expect("next");
        m.publish_archived("t", 1, entry(0, 5))
            .await
            .expect("other partition");
        let got: Vec<i64> = m
            .manifest("t", 0)
            .await
            .expect("read")
            .iter()
            .map(|e| e.first_offset)
            .collect();
        assert_eq!(got, [0, 100]);
    }
}
