//! Archive integrity: damaged archived objects give errors for the offsets they hold,
//! never wrong bytes; objects next to them read as archived; a failed read is
//! remembered instead of being sent to the store again at once.
//!
//! Every case is its own object, holding its own offsets: a byte flipped in the middle
//! of each column chunk in turn (every leaf column, headers' included), a truncated
//! object and a garbage object, between clean objects.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record};
use parquet::file::metadata::ParquetMetaDataReader;
use strata_log::batch::{encode_records, plain_record};
use strata_metastore::{ManifestEntry, Metastore, SqliteStore};
use strata_tiering::codec::encode_segment;
use strata_tiering::{Archive, ArchiveReader};

const RECORDS: i64 = 30;

/// A segment of three uncompressed batches and two zstd ones, from `base`.
fn segment(base: i64) -> Vec<u8> {
    let mut seg = Vec::new();
    for (b, compression) in [
        Compression::None,
        Compression::None,
        Compression::Zstd,
        Compression::None,
        Compression::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let first = base + 6 * b as i64;
        let records: Vec<Record> = (0..6)
            .map(|i| Record {
                headers: vec![(
                    StrBytes::from_static_str("h"),
                    Some(Bytes::from(format!("header-{}", first + i))),
                )],
                ..plain_record(
                    i,
                    1_700_000_000_000 + first + i,
                    Some(Bytes::from(format!("key-{}", first + i))),
                    Some(Bytes::from(format!(
                        "value-{}-{}",
                        first + i,
                        "x".repeat(40)
                    ))),
                )
            })
            .collect();
        let mut bytes = encode_records(&records, compression);
        strata_log::batch::assign(
            &mut bytes,
            first,
            0,
            strata_log::TimestampType::CreateTime,
            0,
        );
        seg.extend_from_slice(&bytes);
    }
    seg
}

/// How an object is damaged before anyone reads it.
#[derive(Debug, Clone, Copy)]
enum Damage {
    None,
    /// One byte flipped in the middle of the first row group's chunk of this leaf column.
    Column(usize),
    Truncated,
    Garbage,
}

fn damage(file: &mut Vec<u8>, how: Damage) {
    match how {
        Damage::None => {}
        Damage::Column(c) => {
            let meta = ParquetMetaDataReader::new()
                .parse_and_finish(&Bytes::from(file.clone()))
                .expect("footer");
            let (start, len) = meta.row_group(0).column(c).byte_range();
            file[(start + len / 2) as usize] ^= 0x5a;
        }
        Damage::Truncated => file.truncate(file.len() / 2),
        Damage::Garbage => {
            let n = file.len();
            *file = (0..n).map(|i| (i * 7919 % 251) as u8).collect();
        }
    }
}

struct Archived {
    reader: ArchiveReader,
    /// Per object: its first offset, the damage done, what it reads as undamaged.
    objects: Vec<(i64, Damage, Vec<u8>)>,
    _dir: tempfile::TempDir,
}

/// One clean object, then each damaged one followed by a clean one.
async fn archive() -> Archived {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("m.sqlite")).expect("metastore");
    let metastore = Metastore::new(Arc::new(store), b"strata");
    let url = format!("file://{}", dir.path().join("archive").display());
    let archive = Archive::from_url(&url).expect("archive");
    let columns = {
        let (file, _) = encode_segment(&segment(0)).expect("encode");
        ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(file))
            .expect("footer")
            .row_group(0)
            .num_columns()
    };
    let mut plan = vec![Damage::None];
    for how in (0..columns)
        .map(Damage::Column)
        .chain([Damage::Truncated, Damage::Garbage])
    {
        plan.push(how);
        plan.push(Damage::None);
    }
    let clean = ArchiveReader::new(archive.clone(), metastore.clone(), 1 << 24);
    let mut objects = Vec::new();
    for (i, how) in plan.into_iter().enumerate() {
        let first = i as i64 * RECORDS;
        let (mut file, summary) = encode_segment(&segment(first)).expect("encode");
        let path = archive.object_path("t", 0, first, summary.last_offset, "x");
        let entry = ManifestEntry {
            first_offset: first,
            last_offset: summary.last_offset,
            min_timestamp_ms: summary.min_timestamp_ms,
            max_timestamp_ms: summary.max_timestamp_ms,
            record_count: summary.record_count,
            size_bytes: file.len() as u64,
            path: path.to_string(),
            checksum: crc32c::crc32c(&file),
            aborted: Vec::new(),
        };
        // What the object reads as before it is damaged (through a reader of its own,
        // whose caches the damaged reads never see).
        archive
            .put(&path, Bytes::from(file.clone()))
            .await
            .expect("put");
        metastore
            .publish_archived("t", 0, entry)
            .await
            .expect("publish");
        let want = clean
            .read("t", 0, first, 1 << 20)
            .await
            .expect("clean read")
            .expect("archived");
        damage(&mut file, how);
        // The manifest keeps the size it had: a truncated object is shorter than named.
        archive.put(&path, Bytes::from(file)).await.expect("put");
        objects.push((first, how, want));
    }
    Archived {
        reader: ArchiveReader::new(archive, metastore, 1 << 24),
        objects,
        _dir: dir,
    }
}

/// The batches of `read` (as a clean read answered) from the one holding `offset`.
fn from_offset(read: &[u8], offset: i64) -> Vec<u8> {
    strata_log::batch::BatchIter::new(read)
        .filter(|(h, _)| h.last_offset() >= offset)
        .flat_map(|(_, b)| b.to_vec())
        .collect()
}

#[tokio::test]
async fn damaged_objects_are_errors_for_their_offsets_only() {
    let a = archive().await;
    let mut refused: Vec<String> = Vec::new();
    for (first, how, want) in &a.objects {
        let mut refusals = 0;
        // From each batch of the object.
        for offset in (0..5).map(|b| first + 6 * b) {
            match a.reader.read("t", 0, offset, 1 << 20).await {
                Ok(Some(got)) => {
                    // Whatever is answered is what was archived, byte for byte (a read
                    // may stop before a damaged batch).
                    assert!(
                        !got.is_empty() && from_offset(want, offset).starts_with(&got),
                        "{how:?} at {offset}: bytes that were never archived"
                    );
                }
                Ok(None) => panic!("{how:?} at {offset}: not archived"),
                Err(e) => {
                    assert!(
                        !matches!(how, Damage::None),
                        "clean object at {offset}: {e}"
                    );
                    refusals += 1;
                }
            }
        }
        match how {
            Damage::Truncated | Damage::Garbage => {
                assert_eq!(refusals, 5, "{how:?}: every offset refused")
            }
            Damage::Column(_) if refusals > 0 => refused.push(format!("{how:?}")),
            _ => {}
        }
    }
    // A flipped byte in the values is never read back as a value.
    assert!(
        refused.iter().any(|how| how == "Column(4)"),
        "the damaged value column was read: refused only {refused:?}"
    );
    eprintln!("damaged columns refused somewhere in their object: {refused:?}");
}

#[tokio::test]
async fn a_failed_read_is_remembered_briefly() {
    let a = archive().await;
    let (first, _, _) = a
        .objects
        .iter()
        .find(|(_, how, _)| matches!(how, Damage::Garbage))
        .expect("a garbage object");
    assert!(a.reader.read("t", 0, *first, 1 << 20).await.is_err());
    let failures = a.reader.read_failures();
    assert!(failures >= 1);
    for _ in 0..50 {
        assert!(a.reader.read("t", 0, *first, 1 << 20).await.is_err());
    }
    assert_eq!(
        a.reader.read_failures(),
        failures,
        "retries within the TTL did not go to the store"
    );
    // The object next to it is unaffected.
    assert!(
        a.reader
            .read("t", 0, first + RECORDS, 1 << 20)
            .await
            .expect("read")
            .is_some()
    );
}
