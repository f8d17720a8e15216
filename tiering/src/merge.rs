//! Merging small archived objects (from low-traffic partitions) into bigger ones. The
//! objects are downloaded, merged ([`crate::codec::merge_objects`]: rows as they are,
//! checksums included) and the result uploaded under a fresh name; publishing it in
//! place of the old entries is the caller's (one metastore transaction,
//! `Metastore::replace_archived`), so that nothing is deleted before the new object is
//! named, and a crash before the swap leaves an orphan for collection.

use bytes::Bytes;
use object_store::path::Path;
use strata_core::background::{Background, Kind};
use strata_metastore::ManifestEntry;

use crate::codec::{Summary, merge_objects};
use crate::error::{Error, Result};
use crate::store::Archive;

/// Downloads the objects of `run` (adjacent entries of one partition, oldest first),
/// merges them (on the background pool) and uploads the result; returns its manifest
/// entry.
pub async fn merge_and_upload(
    archive: &Archive,
    background: &Background,
    topic: &str,
    partition: i32,
    run: &[ManifestEntry],
) -> Result<ManifestEntry> {
    let mut files = Vec::with_capacity(run.len());
    for e in run {
        let bytes = download(archive, e).await?;
        if crc32c::crc32c(&bytes) != e.checksum {
            return Err(Error::Corrupt {
                path: e.path.clone(),
                reason: "its bytes do not match the manifest's checksum; not merged".to_string(),
            });
        }
        files.push(bytes);
    }
    let bytes = files.iter().map(|f| f.len() as u64).sum();
    let (merged, summary) = background
        .run(Kind::Compaction, bytes, move || merge_objects(&files))
        .await
        .map_err(|e| Error::Codec(e.to_string()))??;
    let (first, last) = (run[0].first_offset, run[run.len() - 1].last_offset);
    let entry = upload(archive, topic, partition, (first, last), merged, &summary).await?;
    Ok(ManifestEntry {
        aborted: run.iter().flat_map(|e| e.aborted.iter().copied()).collect(),
        ..entry
    })
}

/// Uploads a rewritten object (merged or compacted) under a fresh name; returns its
/// manifest entry, which covers `range` (the offsets of the entries it replaces, so
/// the manifest stays contiguous where compaction left gaps).
pub async fn upload(
    archive: &Archive,
    topic: &str,
    partition: i32,
    range: (i64, i64),
    object: Vec<u8>,
    summary: &Summary,
) -> Result<ManifestEntry> {
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let path = archive.object_path(topic, partition, range.0, range.1, &unique);
    let entry = ManifestEntry {
        first_offset: range.0,
        last_offset: range.1,
        min_timestamp_ms: summary.min_timestamp_ms,
        max_timestamp_ms: summary.max_timestamp_ms,
        record_count: summary.record_count,
        size_bytes: object.len() as u64,
        path: path.to_string(),
        checksum: crc32c::crc32c(&object),
        aborted: Vec::new(),
    };
    archive.put(&path, Bytes::from(object)).await?;
    Ok(entry)
}

/// Downloads the object of a manifest entry.
pub async fn download(archive: &Archive, entry: &ManifestEntry) -> Result<Bytes> {
    archive.get(&Path::from(entry.path.as_str())).await
}
