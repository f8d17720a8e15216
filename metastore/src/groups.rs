//! Consumer-group offsets and producer-id blocks in the metastore.
//!
//! | key                                          | value            | written by                |
//! |----------------------------------------------|------------------|---------------------------|
//! | (prefix, "group", group)                     | GroupRecord      | the group's coordinator   |
//! | (prefix, "offset", group, topic, partition)  | CommittedOffset  | the group's coordinator   |
//! | (prefix, "producer_ids")                     | next id (i64 BE) | any agent, a block a time |
//!
//! Each operation is one transaction that derives its writes from its reads (or
//! overwrites), so running it twice after an unknown commit result is harmless: a commit
//! writes the same offsets again; a producer-id block read twice only skips ids.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::keys::Key;
use crate::kv::prefix_end;
use crate::topics::{Metastore, decode, encode};

/// That a group exists (it has committed offsets at some point).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub protocol_type: String,
}

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp_ms: i64,
}

/// `(topic, partition)`.
pub type TopicPartition = (String, i32);

impl Metastore {
    fn group_key(&self, group: &str) -> Key {
        self.key().str("group").str(group)
    }

    fn offset_prefix(&self, group: &str) -> Key {
        self.key().str("offset").str(group)
    }

    /// Stores offsets for a group in one transaction.
    pub async fn commit_offsets(
        &self,
        group: &str,
        protocol_type: &str,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
    ) -> Result<()> {
        let this = self.clone();
        let (group, protocol_type) = (group.to_string(), protocol_type.to_string());
        self.transact(move |txn| {
            let (this, group, protocol_type, offsets) = (
                this.clone(),
                group.clone(),
                protocol_type.clone(),
                offsets.clone(),
            );
            async move {
                let gk = this.group_key(&group).into_bytes();
                if txn.get(&gk).await?.is_none() {
                    txn.set(&gk, &encode(&GroupRecord { protocol_type }));
                }
                for ((topic, partition), committed) in &offsets {
                    let k = this
                        .offset_prefix(&group)
                        .str(topic)
                        .u32(*partition as u32)
                        .into_bytes();
                    txn.set(&k, &encode(committed));
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Every committed offset of a group.
    pub async fn group_offsets(
        &self,
        group: &str,
    ) -> Result<BTreeMap<TopicPartition, CommittedOffset>> {
        let this = self.clone();
        let group = group.to_string();
        self.transact(move |txn| {
            let (this, group) = (this.clone(), group.clone());
            async move {
                let begin = this.offset_prefix(&group).into_bytes();
                let mut out = BTreeMap::new();
                for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    let tp = decode_topic_partition(&k[begin.len()..]).ok_or_else(|| {
                        Error::Corrupt {
                            key: String::from_utf8_lossy(&k).into_owned(),
                            reason: "offset key does not end in (topic, partition)".to_string(),
                        }
                    })?;
                    out.insert(tp, decode(&k, &v)?);
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    /// Groups that have a record (have committed offsets), with their protocol type.
    pub async fn groups(&self) -> Result<Vec<(String, GroupRecord)>> {
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            async move {
                let begin = this.key().str("group").into_bytes();
                let mut out = Vec::new();
                for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    let (name, rest) =
                        decode_str(&k[begin.len()..]).ok_or_else(|| Error::Corrupt {
                            key: String::from_utf8_lossy(&k).into_owned(),
                            reason: "group key does not end in a string".to_string(),
                        })?;
                    if rest.is_empty() {
                        out.push((name, decode(&k, &v)?));
                    }
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    /// Deletes a group's record and all its offsets. `false` if it had none.
    pub async fn delete_group(&self, group: &str) -> Result<bool> {
        let this = self.clone();
        let group = group.to_string();
        // Whether an earlier attempt saw the group, in case it committed unseen.
        let existed_before = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.transact(move |txn| {
            let (this, group, existed_before) =
                (this.clone(), group.clone(), Arc::clone(&existed_before));
            async move {
                let gk = this.group_key(&group).into_bytes();
                let existed = txn.get(&gk).await?.is_some()
                    || existed_before.load(std::sync::atomic::Ordering::SeqCst);
                existed_before.store(existed, std::sync::atomic::Ordering::SeqCst);
                txn.clear(&gk);
                let begin = this.offset_prefix(&group).into_bytes();
                txn.clear_range(&begin, &prefix_end(&begin));
                Ok(existed)
            }
            .boxed()
        })
        .await
    }

    /// Deletes some of a group's offsets.
    pub async fn delete_offsets(&self, group: &str, partitions: Vec<TopicPartition>) -> Result<()> {
        let this = self.clone();
        let group = group.to_string();
        self.transact(move |txn| {
            let (this, group, partitions) = (this.clone(), group.clone(), partitions.clone());
            async move {
                for (topic, partition) in &partitions {
                    txn.clear(
                        this.offset_prefix(&group)
                            .str(topic)
                            .u32(*partition as u32)
                            .bytes(),
                    );
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Reserves `count` producer ids for this agent.
    pub async fn allocate_producer_ids(&self, count: i64) -> Result<Range<i64>> {
        let key = self.key().str("producer_ids").into_bytes();
        self.transact(move |txn| {
            let key = key.clone();
            async move {
                let next = match txn.get(&key).await? {
                    Some(v) => {
                        i64::from_be_bytes(v.as_slice().try_into().map_err(|_| Error::Corrupt {
                            key: "producer_ids".to_string(),
                            reason: format!("{} bytes, not 8", v.len()),
                        })?)
                    }
                    None => 0,
                };
                let end = next
                    .checked_add(count)
                    .ok_or_else(|| Error::Invalid("producer ids exhausted".to_string()))?;
                txn.set(&key, &end.to_be_bytes());
                Ok(next..end)
            }
            .boxed()
        })
        .await
    }
}

/// Decodes one tuple string element at the start of `b`; returns it and the rest.
pub(crate) fn decode_str(b: &[u8]) -> Option<(String, &[u8])> {
    let body = b.strip_prefix(&[0x02])?;
    let mut out = Vec::new();
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            0 if body.get(i + 1) == Some(&0xff) => {
                out.push(0);
                i += 2;
            }
            0 => return Some((String::from_utf8(out).ok()?, &body[i + 1..])),
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    None
}

pub(crate) fn decode_topic_partition(b: &[u8]) -> Option<TopicPartition> {
    let (topic, rest) = decode_str(b)?;
    let n = rest.strip_prefix(&[0x15])?;
    let partition = u32::from_be_bytes(n.try_into().ok()?);
    Some((topic, partition as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(n: i64) -> CommittedOffset {
        CommittedOffset {
            offset: n,
            leader_epoch: 0,
            metadata: Some("m".to_string()),
            commit_timestamp_ms: 5,
        }
    }

    #[tokio::test]
    async fn offsets_groups_and_producer_ids() {
        for (_, m, _dir) in crate::test_metastores() {
            offsets_groups_and_producer_ids_on(m).await;
        }
    }

    async fn offsets_groups_and_producer_ids_on(m: Metastore) {
        m.commit_offsets(
            "g1",
            "consumer",
            vec![(("t".into(), 0), offset(5)), (("t".into(), 10), offset(7))],
        )
        .await
        .expect("commit");
        m.commit_offsets("g1", "consumer", vec![(("t".into(), 0), offset(6))])
            .await
            .expect("commit");
        m.commit_offsets("g2", "consumer", vec![(("u".into(), 1), offset(1))])
            .await
            .expect("commit");
        let o = m.group_offsets("g1").await.expect("fetch");
        assert_eq!(o.len(), 2);
        assert_eq!(o[&("t".to_string(), 0)].offset, 6);
        assert_eq!(o[&("t".to_string(), 10)].offset, 7);
        let names: Vec<_> = m
            .groups()
            .await
            .expect("groups")
            .into_iter()
            .map(|g| g.0)
            .collect();
        assert_eq!(names, ["g1", "g2"]);
        m.delete_offsets("g1", vec![("t".into(), 10)])
            .await
            .expect("delete offsets");
        assert_eq!(m.group_offsets("g1").await.expect("fetch").len(), 1);
        assert!(m.delete_group("g1").await.expect("delete"));
        assert!(!m.delete_group("g1").await.expect("delete again"));
        assert!(m.group_offsets("g1").await.expect("fetch").is_empty());
        assert_eq!(m.groups().await.expect("groups").len(), 1);
        // Blocks never overlap (a retried allocation may skip a block, never repeat one).
        let a = m.allocate_producer_ids(1000).await.expect("block");
        let b = m.allocate_producer_ids(1000).await.expect("block");
        assert_eq!((a.end - a.start, b.end - b.start), (1000, 1000));
        assert!(b.start >= a.end);
    }
}
