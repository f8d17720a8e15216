//! Compaction of an archived object against a model: random histories of keys, values
//! and tombstones in batches of every codec, archived as Parquet, compacted by the
//! newest-offset rule, read back. Checked: what stays is exactly the newest record of
//! each key, at its offset, with its contents; the new object's rows carry valid
//! checksums (it rebuilds without damage); nothing stays when nothing should.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record};
use proptest::prelude::*;
use strata_log::batch::{encode_records, plain_record};
use strata_tiering::codec::{compact_object, encode_segment, for_each_archived_batch};

type Op = (u8, Option<u16>);
/// `(offset, key, value)` of one record.
type Rec = (i64, Bytes, Option<Bytes>);

/// A segment of `batches`, offsets from 0, as the log stores it.
fn segment(batches: &[(Vec<Op>, usize)]) -> (Vec<u8>, Vec<Rec>) {
    const CODECS: [Compression; 3] = [Compression::None, Compression::Snappy, Compression::Zstd];
    let mut seg = Vec::new();
    let mut all = Vec::new();
    let mut next = 0i64;
    for (ops, codec) in batches {
        let records: Vec<Record> = ops
            .iter()
            .enumerate()
            .map(|(i, (k, v))| {
                plain_record(
                    i as i64,
                    1_000 + next + i as i64,
                    Some(Bytes::from(format!("key-{k}"))),
                    v.map(|v| Bytes::from(format!("value-{v}"))),
                )
            })
            .collect();
        for (i, r) in records.iter().enumerate() {
            all.push((
                next + i as i64,
                r.key.clone().unwrap_or_default(),
                r.value.clone(),
            ));
        }
        let mut bytes = encode_records(&records, CODECS[*codec]);
        strata_log::batch::assign(
            &mut bytes,
            next,
            0,
            strata_log::TimestampType::CreateTime,
            0,
        );
        seg.extend_from_slice(&bytes);
        next += ops.len() as i64;
    }
    (seg, all)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_compacted_object_holds_the_newest_record_of_each_key(
        batches in prop::collection::vec(
            (prop::collection::vec((0u8..10, prop::option::weighted(0.8, 0u16..1000)), 1..6), 0usize..3),
            1..40,
        ),
    ) {
        let (seg, all) = segment(&batches);
        let (file, _) = encode_segment(&seg).expect("archive");
        let mut newest: BTreeMap<Bytes, i64> = BTreeMap::new();
        for (o, k, _) in &all {
            newest.insert(k.clone(), *o);
        }
        let compacted = compact_object(&Bytes::from(file), |seen| {
            seen.key.is_none_or(|k| newest.get(k) == Some(&seen.offset))
        })
        .expect("compact");
        let want: Vec<&Rec> =
            all.iter().filter(|(o, k, _)| newest.get(k) == Some(o)).collect();
        prop_assert_eq!(compacted.records_in, all.len() as u64);
        prop_assert_eq!(compacted.records_kept, want.len() as u64);
        let (object, summary) = compacted.object.expect("the newest records stay");
        prop_assert_eq!(summary.record_count, want.len() as i64);
        let mut got = Vec::new();
        for_each_archived_batch(&Bytes::from(object), |_, bytes| {
            for r in strata_log::batch::decode_records(bytes).expect("decode") {
                got.push((r.offset, r.key.unwrap_or_default(), r.value));
            }
            Ok(())
        })
        .expect("the compacted object rebuilds without damage");
        let want: Vec<Rec> = want.into_iter().cloned().collect();
        prop_assert_eq!(got, want);
    }
}
