//! Re-verification of a partition's archive against its manifest, for an operator who
//! suspects the object store (`POST /v1/topics/{topic}/partitions/{p}/verify`).
//!
//! Every object the manifest names is read back whole and checked: its CRC32C against
//! the manifest's, then every Kafka batch rebuilt from its rows (row and batch CRCs),
//! and the offsets and record count it covers against the manifest entry. The manifest
//! itself must cover a contiguous run of offsets. Objects in the partition's directory
//! that the manifest does not name are listed too: most are garbage waiting out its
//! grace period, so they are reported, never called damage.

use bytes::Bytes;
use object_store::path::Path;
use serde::{Deserialize, Serialize};
use strata_metastore::ManifestEntry;
use utoipa::ToSchema;

use crate::codec::for_each_archived_batch;
use crate::store::Archive;
use crate::{Error, Result};

/// What a verification found.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct Verification {
    pub topic: String,
    pub partition: i32,
    /// Manifest entries
    pub entries: usize,
    /// Objects read back and checked
    pub verified: usize,
    pub bytes_read: u64,
    /// The offsets the manifest covers; null when it is empty
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
    pub mismatches: Vec<Mismatch>,
    /// Objects in the partition's directory that the manifest does not name (most are
    /// garbage awaiting collection)
    pub unreferenced: Vec<String>,
}

/// One disagreement between the manifest and the store.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Mismatch {
    /// The object's path, or `manifest` for a gap or an overlap between entries
    pub object: String,
    pub problem: String,
}

impl Verification {
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Verifies the archive of `topic`'s `partition` as described by `manifest` (oldest
/// entry first). Store errors other than a missing object are errors: a
/// verification that could not look is not a clean one.
pub async fn verify_partition(
    archive: &Archive,
    topic: &str,
    partition: i32,
    manifest: &[ManifestEntry],
) -> Result<Verification> {
    let mut v = Verification {
        topic: topic.to_string(),
        partition,
        entries: manifest.len(),
        first_offset: manifest.first().map(|e| e.first_offset),
        last_offset: manifest.last().map(|e| e.last_offset),
        ..Verification::default()
    };
    for pair in manifest.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.first_offset != a.last_offset + 1 {
            v.mismatches.push(Mismatch {
                object: "manifest".to_string(),
                problem: format!(
                    "{} ends at offset {} but the next entry, {}, starts at {}: {}",
                    a.path,
                    a.last_offset,
                    b.path,
                    b.first_offset,
                    if b.first_offset <= a.last_offset {
                        "they overlap"
                    } else {
                        "a gap"
                    }
                ),
            });
        }
    }
    for entry in manifest {
        let bytes = match archive.get(&Path::from(entry.path.as_str())).await {
            Ok(b) => b,
            Err(Error::Store {
                source: object_store::Error::NotFound { .. },
                ..
            }) => {
                v.mismatches.push(Mismatch {
                    object: entry.path.clone(),
                    problem: "the object is missing from the store".to_string(),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        v.bytes_read += bytes.len() as u64;
        if let Some(problem) = check_object(entry, &bytes) {
            v.mismatches.push(Mismatch {
                object: entry.path.clone(),
                problem,
            });
        }
        v.verified += 1;
    }
    let named: std::collections::HashSet<&str> = manifest.iter().map(|e| e.path.as_str()).collect();
    let mut unreferenced: Vec<String> = archive
        .list(&archive.partition_dir(topic, partition))
        .await?
        .into_iter()
        .map(|o| o.location.to_string())
        .filter(|p| !named.contains(p.as_str()))
        .collect();
    unreferenced.sort();
    v.unreferenced = unreferenced;
    Ok(v)
}

/// What is wrong with an object's bytes, as the manifest entry describes them.
fn check_object(entry: &ManifestEntry, bytes: &Bytes) -> Option<String> {
    if bytes.len() as u64 != entry.size_bytes {
        return Some(format!(
            "the object holds {} bytes, the manifest says {}",
            bytes.len(),
            entry.size_bytes
        ));
    }
    let crc = crc32c::crc32c(bytes);
    if crc != entry.checksum {
        return Some(format!(
            "CRC32C {crc:#010x}, the manifest says {:#010x}",
            entry.checksum
        ));
    }
    let mut records = 0i64;
    let mut span: Option<(i64, i64)> = None;
    let read = for_each_archived_batch(bytes, |header, _| {
        records += i64::from(header.record_count);
        let (first, last) = span.get_or_insert((header.base_offset, header.last_offset()));
        *first = (*first).min(header.base_offset);
        *last = (*last).max(header.last_offset());
        Ok(())
    });
    if let Err(e) = read {
        return Some(format!("cannot be read back: {e}"));
    }
    if records != entry.record_count {
        return Some(format!(
            "holds {records} records, the manifest says {}",
            entry.record_count
        ));
    }
    // Compaction keeps batch offsets and drops records, so the first and last record
    // lie within the batches' span rather than at its ends.
    match span {
        Some((first, last)) if first <= entry.first_offset && entry.last_offset <= last => None,
        Some((first, last)) => Some(format!(
            "holds batches over offsets {first}..={last}, the manifest says {}..={}",
            entry.first_offset, entry.last_offset
        )),
        None => Some("holds no batch".to_string()),
    }
}
