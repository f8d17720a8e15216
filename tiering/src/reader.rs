//! Reads of archived offsets: find the manifest entry, fetch the Parquet footer and only
//! the row groups that can hold the wanted offsets (ranged reads), rebuild Kafka batches.
//!
//! Parquet metadata and rebuilt row groups are cached with `moka`, bounded in bytes. A
//! read that failed (an unreadable footer or row group, a store that timed out) is
//! remembered for [`FAILED_READ_TTL`], so a consumer retrying the same offsets does not
//! send the store a request per retry; a batch whose rows fail their checksums (see
//! [`crate::codec`]) is an error for the offsets it holds, never bytes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::ops::Range;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, TryStreamExt};
use moka::future::Cache;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::statistics::Statistics;
use strata_metastore::{ManifestEntry, Metastore};

use crate::codec::{RebuiltBatch, rebuild};
use crate::error::{Error, Result};
use crate::store::{Archive, CALL_TIMEOUT};

type PartitionKey = (String, i32);

/// How long a failed read of an object (its footer, or one row group) is answered from
/// memory before the store is asked again.
pub const FAILED_READ_TTL: Duration = Duration::from_secs(5);

/// The footer's place in the failure cache (row groups use their index).
const FOOTER: usize = usize::MAX;

pub struct ArchiveReader {
    archive: Archive,
    metastore: Metastore,
    manifests: Mutex<HashMap<PartitionKey, Arc<Vec<ManifestEntry>>>>,
    metadata: Cache<String, ArrowReaderMetadata>,
    row_groups: Cache<(String, usize), Arc<Vec<RebuiltBatch>>>,
    failed: Cache<(String, usize), Arc<Error>>,
    /// Reads of the store that failed, and batches found damaged, since the start.
    failures: AtomicU64,
}

impl std::fmt::Debug for ArchiveReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveReader")
            .field("archive", &self.archive.url)
            .finish_non_exhaustive()
    }
}

fn i64_range(stats: Option<&Statistics>) -> Option<(i64, i64)> {
    match stats? {
        Statistics::Int64(s) => Some((*s.min_opt()?, *s.max_opt()?)),
        _ => None,
    }
}

impl ArchiveReader {
    /// `cache_bytes` bounds the cached row groups; metadata gets an eighth of it more.
    pub fn new(archive: Archive, metastore: Metastore, cache_bytes: u64) -> ArchiveReader {
        ArchiveReader {
            archive,
            metastore,
            manifests: Mutex::new(HashMap::new()),
            metadata: Cache::builder()
                .max_capacity((cache_bytes / 8).max(1 << 20))
                .weigher(|_, m: &ArrowReaderMetadata| {
                    m.metadata().memory_size().min(u32::MAX as usize) as u32
                })
                .build(),
            row_groups: Cache::builder()
                .max_capacity(cache_bytes.max(1 << 20))
                .weigher(|_, v: &Arc<Vec<RebuiltBatch>>| {
                    v.iter()
                        .map(|b| b.bytes.len())
                        .sum::<usize>()
                        .min(u32::MAX as usize) as u32
                })
                .build(),
            failed: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(FAILED_READ_TTL)
                .build(),
            failures: AtomicU64::new(0),
        }
    }

    /// Failed reads of archived objects, and damaged batches, since the start.
    pub fn read_failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Answers a read remembered as failed, or runs it and remembers a failure.
    async fn remembered<T>(
        &self,
        key: (String, usize),
        read: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        if let Some(e) = self.failed.get(&key).await {
            return Err(clone_error(&e));
        }
        let out = read.await;
        if let Err(e) = &out {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(object = %key.0, error = %e, "archive read failed; remembered for {FAILED_READ_TTL:?}");
            self.failed.insert(key, Arc::new(clone_error(e))).await;
        }
        out
    }

    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// The partition's manifest; read from the metastore when not cached or `refresh`.
    pub async fn manifest(
        &self,
        topic: &str,
        partition: i32,
        refresh: bool,
    ) -> Result<Arc<Vec<ManifestEntry>>> {
        let key = (topic.to_string(), partition);
        if !refresh
            && let Some(m) = self
                .manifests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
        {
            return Ok(Arc::clone(m));
        }
        let m = Arc::new(self.metastore.manifest(topic, partition).await?);
        self.manifests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Arc::clone(&m));
        Ok(m)
    }

    /// Forgets a partition's cached manifest (after publishing to it).
    pub fn invalidate(&self, topic: &str, partition: i32) {
        self.manifests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(topic.to_string(), partition));
    }

    /// The first archived offset, if anything is archived.
    pub async fn start_offset(&self, topic: &str, partition: i32) -> Result<Option<i64>> {
        Ok(self
            .manifest(topic, partition, false)
            .await?
            .first()
            .map(|e| e.first_offset))
    }

    /// The aborted transactions of the archive with records in `[from, upto)`: those
    /// whose abort markers were archived at or after `from` and that began below
    /// `upto` (a read_committed fetch of archived offsets returns them).
    pub async fn aborted_between(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        upto: i64,
    ) -> Result<Vec<strata_log::txn::AbortedTxn>> {
        let m = self.manifest(topic, partition, false).await?;
        let start = m.partition_point(|e| e.last_offset < from);
        Ok(m[start..]
            .iter()
            .flat_map(|e| e.aborted.iter())
            .filter(|a| a.last_offset >= from && a.first_offset < upto)
            .map(|a| strata_log::txn::AbortedTxn {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
                last_offset: a.last_offset,
                last_stable_offset: a.last_stable_offset,
            })
            .collect())
    }

    /// The entry holding `offset`, refreshing the manifest once if it is not found.
    async fn entry_for(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Option<ManifestEntry>> {
        for refresh in [false, true] {
            let m = self.manifest(topic, partition, refresh).await?;
            if let Some(e) = m
                .iter()
                .find(|e| e.first_offset <= offset && offset <= e.last_offset)
            {
                return Ok(Some(e.clone()));
            }
        }
        Ok(None)
    }

    async fn metadata(&self, entry: &ManifestEntry) -> Result<(ObjectReader, ArrowReaderMetadata)> {
        let path = Path::from(entry.path.as_str());
        let reader = ObjectReader {
            store: Arc::clone(&self.archive.store),
            path,
            size: entry.size_bytes,
        };
        let load = self.metadata.try_get_with(entry.path.clone(), async {
            let mut r = reader.clone();
            let load = ArrowReaderMetadata::load_async(
                &mut r,
                ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional),
            );
            match tokio::time::timeout(CALL_TIMEOUT, load).await {
                Ok(Ok(m)) => Ok(m),
                Ok(Err(e)) => Err(Error::Corrupt {
                    path: entry.path.clone(),
                    reason: format!("footer: {e}"),
                }),
                Err(_) => Err(Error::Timeout(format!("read footer of {}", entry.path))),
            }
        });
        let meta = self
            .remembered((entry.path.clone(), FOOTER), async {
                load.await.map_err(|e: Arc<Error>| clone_error(&e))
            })
            .await?;
        Ok((reader, meta))
    }

    async fn row_group(
        &self,
        entry: &ManifestEntry,
        reader: &ObjectReader,
        meta: &ArrowReaderMetadata,
        index: usize,
    ) -> Result<Arc<Vec<RebuiltBatch>>> {
        let rows = (meta.metadata().row_group(index).num_rows().max(1)) as usize;
        let load = self
            .row_groups
            .try_get_with((entry.path.clone(), index), async {
                let stream = ParquetRecordBatchStreamBuilder::new_with_metadata(
                    reader.clone(),
                    meta.clone(),
                )
                .with_row_groups(vec![index])
                // The whole row group in one Arrow batch: Kafka batches never span row
                // groups, but they do span the default 1024-row Arrow batches.
                .with_batch_size(rows)
                .build()
                .map_err(|e| Error::Corrupt {
                    path: entry.path.clone(),
                    reason: e.to_string(),
                })?;
                let read = stream.try_collect::<Vec<_>>();
                let batches = match tokio::time::timeout(CALL_TIMEOUT, read).await {
                    Ok(Ok(b)) => b,
                    Ok(Err(e)) => {
                        return Err(Error::Corrupt {
                            path: entry.path.clone(),
                            reason: e.to_string(),
                        });
                    }
                    Err(_) => {
                        return Err(Error::Timeout(format!(
                            "read {} row group {index}",
                            entry.path
                        )));
                    }
                };
                let mut out = Vec::new();
                for b in &batches {
                    out.extend(rebuild(b)?);
                }
                for b in out.iter().filter(|b| b.damage.is_some()) {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(object = %entry.path, first_offset = b.base_offset, last_offset = b.last_offset, damage = b.damage.as_deref().unwrap_or(""), "archived batch is damaged: its offsets are answered with an error");
                }
                Ok(Arc::new(out))
            });
        self.remembered((entry.path.clone(), index), async {
            load.await.map_err(|e: Arc<Error>| clone_error(&e))
        })
        .await
    }

    /// Rebuilt batches from the one holding `offset`: at most `max_bytes`, but always at
    /// least one batch. `None` if `offset` is not archived.
    pub async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> Result<Option<Vec<u8>>> {
        let Some(mut entry) = self.entry_for(topic, partition, offset).await? else {
            return Ok(None);
        };
        // A compacted object may hold no record at or after `offset` (its range ends
        // in a gap), or none at all: the read goes on in the next object. Empty when
        // the archive holds nothing more from `offset` on.
        loop {
            let out = self.read_entry(&entry, offset, max_bytes).await?;
            if !out.is_empty() {
                return Ok(Some(out));
            }
            match self
                .entry_for(topic, partition, entry.last_offset + 1)
                .await?
            {
                Some(next) => entry = next,
                None => return Ok(Some(out)),
            }
        }
    }

    /// The batches of one object from the one holding `offset` (see [`Self::read`]).
    async fn read_entry(
        &self,
        entry: &ManifestEntry,
        offset: i64,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        if entry.record_count == 0 {
            return Ok(Vec::new());
        }
        let (reader, meta) = self.metadata(entry).await?;
        let offset_column = meta
            .parquet_schema()
            .columns()
            .iter()
            .position(|c| c.name() == "offset")
            .unwrap_or(0);
        let mut out = Vec::new();
        for (i, rg) in meta.metadata().row_groups().iter().enumerate() {
            if i64_range(rg.column(offset_column).statistics()).is_some_and(|(_, max)| max < offset)
            {
                continue;
            }
            for b in self.row_group(entry, &reader, &meta, i).await?.iter() {
                if b.last_offset < offset {
                    continue;
                }
                if let Some(damage) = &b.damage {
                    if out.is_empty() {
                        return Err(damaged(entry, b, damage));
                    }
                    // What comes before it now; the damaged offsets on the next read.
                    return Ok(out);
                }
                if !out.is_empty() && out.len() + b.bytes.len() > max_bytes {
                    return Ok(out);
                }
                out.extend_from_slice(&b.bytes);
            }
            if out.len() >= max_bytes {
                break;
            }
        }
        Ok(out)
    }

    /// The first archived record at or after `target_ms`, as `(offset, timestamp)`.
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        target_ms: i64,
    ) -> Result<Option<(i64, i64)>> {
        let manifest = self.manifest(topic, partition, true).await?;
        for entry in manifest
            .iter()
            .filter(|e| e.max_timestamp_ms >= target_ms && e.record_count > 0)
        {
            let (reader, meta) = self.metadata(entry).await?;
            let ts_column = meta
                .parquet_schema()
                .columns()
                .iter()
                .position(|c| c.name() == "timestamp")
                .unwrap_or(1);
            for (i, rg) in meta.metadata().row_groups().iter().enumerate() {
                if i64_range(rg.column(ts_column).statistics())
                    .is_some_and(|(_, max)| max < target_ms)
                {
                    continue;
                }
                for b in self.row_group(entry, &reader, &meta, i).await?.iter() {
                    // A damaged batch may hold the answer: no guess past it.
                    if let Some(damage) = &b.damage {
                        return Err(damaged(entry, b, damage));
                    }
                    if b.max_timestamp_ms < target_ms {
                        continue;
                    }
                    if let Some(found) =
                        strata_log::batch::first_record_at_or_after(&b.bytes, target_ms)
                            .map_err(|e| Error::Codec(e.to_string()))?
                    {
                        return Ok(Some(found));
                    }
                }
            }
        }
        Ok(None)
    }
}

/// Ranged reads of one archived object, each bounded by [`CALL_TIMEOUT`].
#[derive(Debug, Clone)]
struct ObjectReader {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
}

fn parquet_error(e: impl std::error::Error + Send + Sync + 'static) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for ObjectReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            match tokio::time::timeout(CALL_TIMEOUT, self.store.get_range(&self.path, range)).await
            {
                Ok(r) => r.map_err(parquet_error),
                Err(e) => Err(parquet_error(e)),
            }
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            match tokio::time::timeout(CALL_TIMEOUT, self.store.get_ranges(&self.path, &ranges))
                .await
            {
                Ok(r) => r.map_err(parquet_error),
                Err(e) => Err(parquet_error(e)),
            }
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

fn damaged(entry: &ManifestEntry, b: &RebuiltBatch, damage: &str) -> Error {
    Error::Corrupt {
        path: entry.path.clone(),
        reason: format!("offsets {}..={}: {damage}", b.base_offset, b.last_offset),
    }
}

/// Errors come out of the cache shared; rebuild an owned one with the same meaning.
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Timeout(s) => Error::Timeout(s.clone()),
        Error::Corrupt { path, reason } => Error::Corrupt {
            path: path.clone(),
            reason: reason.clone(),
        },
        Error::Codec(s) => Error::Codec(s.clone()),
        other => Error::Codec(other.to_string()),
    }
}
