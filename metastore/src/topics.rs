//! The typed layer: the cluster record, topics, their partitions and configs, written
//! once on top of [`KvStore`] so every backend behaves the same.
//!
//! Each operation is one small transaction that derives everything it writes from what
//! it read, so a retried transaction cannot apply twice: creating a topic that exists
//! fails, deleting one that is gone fails, and setting configs overwrites.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

pub use strata_core::PartitionRecord;

use crate::error::{Error, Result};
use crate::keys::Key;
use crate::kv::{CallLimits, KvStore, KvTransaction, Watch, prefix_end, transact_within};
use futures::future::BoxFuture;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRecord {
    pub cluster_id: String,
}

/// A topic as the metastore holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub name: String,
    /// 16 bytes, Kafka's topic id.
    pub id: [u8; 16],
    pub replication_factor: i16,
    /// Configs set explicitly on the topic (Kafka names); defaults are not stored.
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<PartitionRecord>,
    /// Partitions an operator disabled for writes (reads go on), with the reason given.
    pub disabled: BTreeMap<u32, String>,
}

/// The part of [`TopicRecord`] stored under the topic key.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TopicValue {
    id: [u8; 16],
    replication_factor: i16,
    configs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    disabled: BTreeMap<u32, String>,
}

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// Replica lists, one per partition; the first replica is the initial leader.
    pub assignments: Vec<Vec<i32>>,
}

/// The typed metastore.
#[derive(Debug, Clone)]
pub struct Metastore {
    kv: Arc<dyn KvStore>,
    prefix: Vec<u8>,
    limits: CallLimits,
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| Error::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("metastore records always serialize")
}

impl Metastore {
    pub fn new(kv: Arc<dyn KvStore>, prefix: &[u8]) -> Metastore {
        Metastore {
            kv,
            prefix: prefix.to_vec(),
            limits: CallLimits::default(),
        }
    }

    /// This metastore with every call bounded by `limits` (an overall deadline, and a
    /// token that abandons calls in flight).
    pub fn with_limits(&self, limits: CallLimits) -> Metastore {
        Metastore {
            limits,
            ..self.clone()
        }
    }

    /// Runs one call's transaction within this metastore's limits.
    pub(crate) async fn transact<T, F>(&self, body: F) -> Result<T>
    where
        T: Send,
        F: for<'t> FnMut(&'t mut dyn KvTransaction) -> BoxFuture<'t, Result<T>> + Send,
    {
        transact_within(self.kv.as_ref(), &self.limits, body).await
    }

    pub fn kv(&self) -> &Arc<dyn KvStore> {
        &self.kv
    }

    pub(crate) fn key(&self) -> Key {
        Key::new(&self.prefix)
    }

    /// The cluster's id, created by whoever asks first.
    pub async fn cluster(&self) -> Result<ClusterRecord> {
        let key = self.key().str("cluster").into_bytes();
        self.transact(|txn| {
            let key = key.clone();
            async move {
                if let Some(v) = txn.get(&key).await? {
                    return decode(&key, &v);
                }
                let record = ClusterRecord {
                    cluster_id: uuid::Uuid::new_v4().simple().to_string(),
                };
                txn.set(&key, &encode(&record));
                Ok(record)
            }
            .boxed()
        })
        .await
    }

    async fn read_topic(
        &self,
        txn: &mut dyn KvTransaction,
        name: &str,
    ) -> Result<Option<TopicRecord>> {
        let key = self.key().str("topic").str(name).into_bytes();
        let Some(v) = txn.get(&key).await? else {
            return Ok(None);
        };
        let value: TopicValue = decode(&key, &v)?;
        let begin = self.key().str("partition").str(name).into_bytes();
        let end = prefix_end(&begin);
        let mut partitions = Vec::new();
        for (k, v) in txn.get_range(&begin, &end, 0, false).await? {
            partitions.push(decode::<PartitionRecord>(&k, &v)?);
        }
        Ok(Some(TopicRecord {
            name: name.to_string(),
            id: value.id,
            replication_factor: value.replication_factor,
            configs: value.configs,
            partitions,
            disabled: value.disabled,
        }))
    }

    /// Bumped (by an atomic add, which never conflicts) by every change to a topic or
    /// partition record, so that agents can watch one key for all of them.
    fn topics_version_key(&self) -> Vec<u8> {
        self.key().str("topics-version").into_bytes()
    }

    pub(crate) fn touch_topics(&self, txn: &mut dyn KvTransaction) {
        txn.atomic_add(&self.topics_version_key(), 1);
    }

    /// Starts a watch that resolves after any topic or partition record changes.
    pub async fn watch_topics(&self) -> Result<Watch> {
        self.kv.watch(&self.topics_version_key()).await
    }

    fn write_topic_value(&self, txn: &mut dyn KvTransaction, topic: &TopicRecord) {
        self.touch_topics(txn);
        let key = self.key().str("topic").str(&topic.name).into_bytes();
        let value = TopicValue {
            id: topic.id,
            replication_factor: topic.replication_factor,
            configs: topic.configs.clone(),
            disabled: topic.disabled.clone(),
        };
        txn.set(&key, &encode(&value));
    }

    fn write_partition(&self, txn: &mut dyn KvTransaction, topic: &str, p: &PartitionRecord) {
        self.touch_topics(txn);
        let key = self
            .key()
            .str("partition")
            .str(topic)
            .u32(p.index)
            .into_bytes();
        txn.set(&key, &encode(p));
    }

    pub async fn topic(&self, name: &str) -> Result<Option<TopicRecord>> {
        let name = name.to_string();
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            let name = name.clone();
            async move { this.read_topic(txn, &name).await }.boxed()
        })
        .await
    }

    /// Every topic, by name.
    pub async fn topics(&self) -> Result<Vec<TopicRecord>> {
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            async move {
                let begin = this.key().str("topic").into_bytes();
                let end = prefix_end(&begin);
                let mut names = Vec::new();
                for (k, _) in txn.get_range(&begin, &end, 0, false).await? {
                    names.push(decode_last_str(&k[begin.len()..]).ok_or_else(|| {
                        Error::Corrupt {
                            key: String::from_utf8_lossy(&k).into_owned(),
                            reason: "topic key does not end in a string".to_string(),
                        }
                    })?);
                }
                let mut topics = Vec::with_capacity(names.len());
                for name in names {
                    if let Some(t) = this.read_topic(txn, &name).await? {
                        topics.push(t);
                    }
                }
                Ok(topics)
            }
            .boxed()
        })
        .await
    }

    pub async fn create_topic(&self, new: NewTopic) -> Result<TopicRecord> {
        if new.assignments.is_empty() {
            return Err(Error::Invalid(
                "a topic needs at least one partition".to_string(),
            ));
        }
        let id = *uuid::Uuid::new_v4().as_bytes();
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            let new = new.clone();
            async move {
                if let Some(existing) = this.read_topic(txn, &new.name).await? {
                    // Our own earlier attempt may have committed ("maybe committed").
                    if existing.id == id {
                        return Ok(existing);
                    }
                    return Err(Error::TopicExists(new.name));
                }
                let partitions = new
                    .assignments
                    .iter()
                    .enumerate()
                    .map(|(i, replicas)| PartitionRecord::new(i as u32, replicas.clone()))
                    .collect();
                let topic = TopicRecord {
                    name: new.name,
                    id,
                    replication_factor: new.replication_factor,
                    configs: new.configs,
                    partitions,
                    disabled: BTreeMap::new(),
                };
                this.write_topic_value(txn, &topic);
                for p in &topic.partitions {
                    this.write_partition(txn, &topic.name, p);
                }
                Ok(topic)
            }
            .boxed()
        })
        .await
    }

    /// Deletes a topic at `now_ms`: its record, partitions and log starts; its archived
    /// objects become [`crate::Garbage`] for the compactor to delete.
    pub async fn delete_topic(&self, name: &str, now_ms: i64) -> Result<TopicRecord> {
        let name = name.to_string();
        let this = self.clone();
        // What an earlier attempt deleted, in case it committed but said it might not have.
        let deleted: Arc<std::sync::Mutex<Option<TopicRecord>>> = Arc::default();
        self.transact(move |txn| {
            let deleted = Arc::clone(&deleted);
            let this = this.clone();
            let name = name.clone();
            async move {
                let Some(topic) = this.read_topic(txn, &name).await? else {
                    let earlier = deleted.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    return earlier.ok_or(Error::UnknownTopic(name));
                };
                *deleted.lock().unwrap_or_else(|p| p.into_inner()) = Some(topic.clone());
                this.touch_topics(txn);
                txn.clear(this.key().str("topic").str(&name).bytes());
                let begin = this.key().str("partition").str(&name).into_bytes();
                txn.clear_range(&begin, &prefix_end(&begin));
                // The archive's manifest goes with the topic; its objects become
                // garbage that the compactor deletes after the grace period.
                let begin = this.key().str("manifest").str(&name).into_bytes();
                for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    let e: crate::ManifestEntry = decode(&k, &v)?;
                    let Some(p) = crate::keys::u32_at(&k, begin.len()) else {
                        return Err(Error::Corrupt {
                            key: String::from_utf8_lossy(&k).into_owned(),
                            reason: "a manifest key without a partition".to_string(),
                        });
                    };
                    this.retire_in(txn, &name, p as i32, &[e], now_ms);
                }
                txn.clear_range(&begin, &prefix_end(&begin));
                for kind in ["logstart", "archivecleaner", "compactorlease"] {
                    let begin = this.key().str(kind).str(&name).into_bytes();
                    txn.clear_range(&begin, &prefix_end(&begin));
                }
                Ok(topic)
            }
            .boxed()
        })
        .await
    }

    /// Reads partition `index` of `topic` and, in the same transaction, writes what
    /// `change` makes of it (`None`: leave it). Returns the record as it is afterwards
    /// (`None` if the partition does not exist), so that a caller whose earlier attempt
    /// may have committed sees its own change there: compare it with what you wanted,
    /// rather than trusting whether `change` ran.
    ///
    /// This is the compare-and-set behind elections and ISR changes: `change` checks the
    /// leader epoch it expects before it changes anything.
    pub async fn update_partition<F>(
        &self,
        topic: &str,
        index: u32,
        change: F,
    ) -> Result<Option<PartitionRecord>>
    where
        F: Fn(&PartitionRecord) -> Option<PartitionRecord> + Send + Sync + 'static,
    {
        let topic = topic.to_string();
        let this = self.clone();
        let change = Arc::new(change);
        self.transact(move |txn| {
            let this = this.clone();
            let topic = topic.clone();
            let change = Arc::clone(&change);
            async move { this.change_partition_in(txn, &topic, index, &*change).await }.boxed()
        })
        .await
    }

    /// The body of [`Metastore::update_partition`], inside a transaction of the caller's.
    pub(crate) async fn change_partition_in(
        &self,
        txn: &mut dyn KvTransaction,
        topic: &str,
        index: u32,
        change: &(dyn Fn(&PartitionRecord) -> Option<PartitionRecord> + Send + Sync),
    ) -> Result<Option<PartitionRecord>> {
        let key = self
            .key()
            .str("partition")
            .str(topic)
            .u32(index)
            .into_bytes();
        let Some(v) = txn.get(&key).await? else {
            return Ok(None);
        };
        let current: PartitionRecord = decode(&key, &v)?;
        match change(&current) {
            Some(next) if next != current => {
                if next.index != index {
                    return Err(Error::Invalid(format!(
                        "partition {index} cannot become partition {}",
                        next.index
                    )));
                }
                self.write_partition(txn, topic, &next);
                Ok(Some(next))
            }
            _ => Ok(Some(current)),
        }
    }

    /// Replaces the topic's explicit configs.
    pub async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicRecord> {
        let name = name.to_string();
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            let (name, configs) = (name.clone(), configs.clone());
            async move {
                let Some(mut topic) = this.read_topic(txn, &name).await? else {
                    return Err(Error::UnknownTopic(name));
                };
                topic.configs = configs;
                this.write_topic_value(txn, &topic);
                Ok(topic)
            }
            .boxed()
        })
        .await
    }

    /// Disables writes to partition `index` of topic `name` (`reason`: why, shown to the
    /// producers refused) or, with `None`, enables them again.
    pub async fn set_partition_disabled(
        &self,
        name: &str,
        index: u32,
        reason: Option<String>,
    ) -> Result<TopicRecord> {
        let name = name.to_string();
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            let (name, reason) = (name.clone(), reason.clone());
            async move {
                let Some(mut topic) = this.read_topic(txn, &name).await? else {
                    return Err(Error::UnknownTopic(name));
                };
                if index as usize >= topic.partitions.len() {
                    return Err(Error::Invalid(format!(
                        "topic {name} has {} partitions, so no partition {index}",
                        topic.partitions.len()
                    )));
                }
                let changed = match reason {
                    Some(reason) => topic.disabled.insert(index, reason.clone()) != Some(reason),
                    None => topic.disabled.remove(&index).is_some(),
                };
                if changed {
                    this.write_topic_value(txn, &topic);
                }
                Ok(topic)
            }
            .boxed()
        })
        .await
    }

    /// Adds partitions with the given replica lists after the existing ones.
    pub async fn add_partitions(
        &self,
        name: &str,
        expected_count: usize,
        new: Vec<Vec<i32>>,
    ) -> Result<TopicRecord> {
        let name = name.to_string();
        let this = self.clone();
        self.transact(move |txn| {
            let this = this.clone();
            let (name, new) = (name.clone(), new.clone());
            async move {
                let Some(mut topic) = this.read_topic(txn, &name).await? else {
                    return Err(Error::UnknownTopic(name));
                };
                // Our own earlier attempt may have committed ("maybe committed").
                let tail: Vec<&Vec<i32>> = topic
                    .partitions
                    .iter()
                    .skip(expected_count)
                    .map(|p| &p.replicas)
                    .collect();
                if topic.partitions.len() == expected_count + new.len()
                    && tail.iter().zip(&new).all(|(a, b)| *a == b)
                {
                    return Ok(topic);
                }
                if topic.partitions.len() != expected_count {
                    return Err(Error::Invalid(format!(
                        "topic '{name}' has {} partitions, not {expected_count}",
                        topic.partitions.len()
                    )));
                }
                for replicas in new {
                    let p = PartitionRecord::new(topic.partitions.len() as u32, replicas);
                    this.write_partition(txn, &name, &p);
                    topic.partitions.push(p);
                }
                Ok(topic)
            }
            .boxed()
        })
        .await
    }
}

/// Decodes a key suffix that is exactly one tuple string element.
fn decode_last_str(suffix: &[u8]) -> Option<String> {
    let body = suffix.strip_prefix(&[0x02])?.strip_suffix(&[0x00])?;
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        out.push(body[i]);
        if body[i] == 0 {
            if body.get(i + 1) != Some(&0xff) {
                return None;
            }
            i += 1;
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteStore;

    fn new_topic(name: &str, partitions: usize) -> NewTopic {
        NewTopic {
            name: name.to_string(),
            replication_factor: 1,
            configs: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
            assignments: vec![vec![1]; partitions],
        }
    }

    #[tokio::test]
    async fn topic_lifecycle() {
        for (name, m, _dir) in crate::test_metastores() {
            lifecycle(m).await;
            eprintln!("topic lifecycle ok on {name}");
        }
    }

    /// Every kind of topic change resolves a topic watch started before it.
    #[tokio::test]
    async fn topic_changes_resolve_the_topic_watch() {
        use std::time::Duration;
        for (name, m, _dir) in crate::test_metastores() {
            let wait = |w: Watch, what: &'static str| async move {
                tokio::time::timeout(Duration::from_secs(10), w)
                    .await
                    .unwrap_or_else(|_| panic!("{name}: no watch event after {what}"))
                    .expect("watch");
            };
            let w = m.watch_topics().await.expect("watch");
            m.create_topic(new_topic("w", 1)).await.expect("create");
            wait(w, "create").await;
            let w = m.watch_topics().await.expect("watch");
            m.set_topic_configs("w", BTreeMap::new())
                .await
                .expect("configs");
            wait(w, "configs").await;
            let w = m.watch_topics().await.expect("watch");
            m.add_partitions("w", 1, vec![vec![1]]).await.expect("add");
            wait(w, "add partitions").await;
            let w = m.watch_topics().await.expect("watch");
            m.set_partition_disabled("w", 0, Some("test".to_string()))
                .await
                .expect("disable");
            wait(w, "disable a partition").await;
            let w = m.watch_topics().await.expect("watch");
            m.delete_topic("w", 0).await.expect("delete");
            wait(w, "delete").await;
        }
    }

    /// The compare-and-set behind elections: concurrent bumps of one epoch each apply
    /// once, a change based on a stale epoch applies never, and a watch fires.
    #[tokio::test]
    async fn partition_updates_are_compare_and_set() {
        for (name, m, _dir) in crate::test_metastores() {
            m.create_topic(NewTopic {
                assignments: vec![vec![1, 2, 3]],
                ..new_topic("cas", 1)
            })
            .await
            .expect("create");
            let bump = |seen: i32| {
                let m = m.clone();
                async move {
                    m.update_partition("cas", 0, move |cur| {
                        (cur.leader_epoch == seen).then(|| PartitionRecord {
                            leader_epoch: seen + 1,
                            leader: 2,
                            ..cur.clone()
                        })
                    })
                    .await
                    .expect("update")
                    .expect("exists")
                }
            };
            let w = m.watch_topics().await.expect("watch");
            let (a, b) = tokio::join!(bump(0), bump(0));
            assert_eq!((a.leader_epoch, b.leader_epoch), (1, 1), "{name}");
            tokio::time::timeout(std::time::Duration::from_secs(10), w)
                .await
                .unwrap_or_else(|_| panic!("{name}: no watch event"))
                .expect("watch");
            let stale = bump(0).await;
            assert_eq!(
                stale.leader_epoch, 1,
                "{name}: a stale epoch changes nothing"
            );
            let now = m.topic("cas").await.expect("read").expect("exists");
            assert_eq!(now.partitions[0].leader_epoch, 1, "{name}");
            assert_eq!(now.partitions[0].leader, 2, "{name}");
            assert_eq!(
                m.update_partition("cas", 7, |c| Some(c.clone()))
                    .await
                    .expect("update"),
                None,
                "{name}: no such partition"
            );
            let renumber = m
                .update_partition("cas", 0, |c| {
                    Some(PartitionRecord {
                        index: 5,
                        ..c.clone()
                    })
                })
                .await;
            assert!(matches!(renumber, Err(Error::Invalid(_))), "{name}");
        }
    }

    async fn lifecycle(m: Metastore) {
        let cluster = m.cluster().await.expect("cluster");
        assert_eq!(m.cluster().await.expect("cluster again"), cluster);
        let t = m
            .create_topic(new_topic("orders", 3))
            .await
            .expect("create");
        assert_eq!(t.partitions.len(), 3);
        assert!(matches!(
            m.create_topic(new_topic("orders", 1)).await,
            Err(Error::TopicExists(_))
        ));
        m.create_topic(new_topic("a.b-c_d", 1))
            .await
            .expect("create");
        let names: Vec<_> = m
            .topics()
            .await
            .expect("list")
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["a.b-c_d", "orders"]);
        let t = m
            .add_partitions("orders", 3, vec![vec![1], vec![1]])
            .await
            .expect("add");
        assert_eq!(
            t.partitions.iter().map(|p| p.index).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert!(
            m.add_partitions("orders", 3, vec![vec![1]]).await.is_err(),
            "stale expected count"
        );
        let t = m
            .set_topic_configs("orders", BTreeMap::new())
            .await
            .expect("configs");
        assert!(t.configs.is_empty());
        assert_eq!(m.topic("orders").await.expect("get"), Some(t));
        let t = m
            .set_partition_disabled("orders", 4, Some("incident 7".to_string()))
            .await
            .expect("disable");
        assert_eq!(t.disabled, BTreeMap::from([(4, "incident 7".to_string())]));
        assert_eq!(m.topic("orders").await.expect("get"), Some(t));
        assert!(matches!(
            m.set_partition_disabled("orders", 5, Some("x".to_string()))
                .await,
            Err(Error::Invalid(_))
        ));
        let t = m
            .set_partition_disabled("orders", 4, None)
            .await
            .expect("enable");
        assert!(t.disabled.is_empty());
        assert_eq!(m.topic("orders").await.expect("get"), Some(t));
        m.delete_topic("orders", 0).await.expect("delete");
        assert!(matches!(
            m.delete_topic("orders", 0).await,
            Err(Error::UnknownTopic(_))
        ));
        assert_eq!(m.topic("orders").await.expect("get"), None);
        assert_eq!(m.topics().await.expect("list").len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_handles_on_one_file_serialize() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        let a: Arc<dyn KvStore> = Arc::new(SqliteStore::open(&path).expect("a"));
        let b: Arc<dyn KvStore> = Arc::new(SqliteStore::open(&path).expect("b"));
        let mut tasks = Vec::new();
        for store in [a.clone(), b.clone(), a, b] {
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    crate::transact(store.as_ref(), |txn| {
                        async move {
                            let n = txn
                                .get(b"n")
                                .await?
                                .map_or(0, |v| u64::from_be_bytes(v.try_into().expect("8 bytes")));
                            txn.set(b"n", &(n + 1).to_be_bytes());
                            Ok(())
                        }
                        .boxed()
                    })
                    .await
                    .expect("transact");
                }
            }));
        }
        for t in tasks {
            t.await.expect("join");
        }
        let store = SqliteStore::open(&path).expect("c");
        let mut txn = store.begin().await.expect("begin");
        let v = txn.get(b"n").await.expect("get").expect("set");
        assert_eq!(u64::from_be_bytes(v.try_into().expect("8 bytes")), 200);
    }
}
