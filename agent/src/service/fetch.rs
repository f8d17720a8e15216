//! Reading a partition, for consumers and for followers.
//!
//! A consumer reads committed records (below the high watermark), from the archive
//! when the offset lies below the local log. A follower (a replica id of 0 or more)
//! reads the local log up to its end, and its fetch offset tells the leader how far the
//! follower's copy reaches, which may move the watermark; that bookkeeping happens here,
//! before the read. A `current_leader_epoch` (-1: not given) is checked against the
//! replica's (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, KIP-320).
//!
//! The service decides who may read: nothing is read without a [`Permit`], and only
//! [`Fetching::permit`] makes one, for a consumer with READ on the topic or a follower
//! with CLUSTER_ACTION on the cluster, as Kafka's broker checks a Fetch. The Kafka
//! Fetch and the HTTP consume and read all ask it.

use std::sync::Arc;

use tokio::sync::watch;

use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::partition::{Bound, Offsets, Partition, ReadOutcome};
use crate::peers::Peers;
use crate::replicas::{ReplicaManager, TopicState};

/// Who reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    Consumer,
    /// The follower on agent `node_id`.
    Follower(i32),
}

/// A read that failed, with what the reader should still be told of the partition.
#[derive(Debug)]
pub struct Failed {
    pub error: Error,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

/// Leave for one caller to read one topic, as consumer or follower, from
/// [`Fetching::permit`].
#[derive(Debug, Clone)]
pub struct Permit {
    topic: String,
    reader: Reader,
}

impl Permit {
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The same leave, to read as a consumer: an older Fetch (before v9) that names a
    /// replica is authorized as a follower's and served as a consumer's.
    pub fn as_consumer(self) -> Permit {
        Permit {
            reader: Reader::Consumer,
            ..self
        }
    }
}

/// The fetch service.
pub struct Fetching {
    replicas: Arc<ReplicaManager>,
    authorizer: Arc<Authorizer>,
    peers: Arc<Peers>,
}

/// A record as a consumer reading over HTTP is given it.
#[derive(Debug, Clone)]
pub struct Message {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<bytes::Bytes>,
    pub value: Option<bytes::Bytes>,
    pub headers: Vec<(String, Option<bytes::Bytes>)>,
}

/// The records of a read (`records`, whole batches) that a consumer sees from
/// `position` on, at most `room` of them, and the position after them. Control batches
/// are skipped, and so are the records of the aborted transactions `aborted` lists as
/// `(producer id, first offset)` (a read-committed read's; empty otherwise). A batch
/// that does not decode ends the walk there.
pub fn messages(
    records: &[u8],
    aborted: &[(i64, i64)],
    mut position: i64,
    room: usize,
) -> (Vec<Message>, i64) {
    let mut aborted = aborted.to_vec();
    aborted.sort_by_key(|a| a.1);
    let mut aborted = aborted.into_iter().peekable();
    let mut aborting: std::collections::HashSet<i64> = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (header, batch) in strata_log::batch::BatchIter::new(records) {
        if header.last_offset() < position {
            continue;
        }
        while let Some(&(producer, first)) = aborted.peek() {
            if first > header.last_offset() {
                break;
            }
            aborting.insert(producer);
            aborted.next();
        }
        if header.is_control() {
            aborting.remove(&header.producer_id);
            position = header.next_offset();
            continue;
        }
        if header.is_transactional() && aborting.contains(&header.producer_id) {
            position = header.next_offset();
            continue;
        }
        let Ok(decoded) = strata_log::batch::decode_records(batch) else {
            break;
        };
        for r in decoded {
            if r.offset < position {
                continue;
            }
            if out.len() == room {
                return (out, position);
            }
            position = r.offset + 1;
            out.push(Message {
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            });
        }
        position = header.next_offset();
    }
    (out, position)
}

/// How a read at a partition's leader asks ([`Fetching::read_at_leader`]).
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    /// At most this many bytes, unless the first batch alone is larger.
    pub max_bytes: usize,
    /// Up to the last stable offset only.
    pub read_committed: bool,
    /// How long a leader elsewhere may wait for a first record.
    pub remote_wait: std::time::Duration,
}

/// What a read at a partition's leader gave ([`Fetching::read_at_leader`]).
#[derive(Debug)]
pub struct LeaderRead {
    pub records: bytes::Bytes,
    pub high_watermark: i64,
    /// `(producer id, first offset)` of the aborted transactions in the records.
    pub aborted: Vec<(i64, i64)>,
}

impl std::fmt::Debug for Fetching {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetching").finish_non_exhaustive()
    }
}

impl Fetching {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        authorizer: Arc<Authorizer>,
        peers: Arc<Peers>,
    ) -> Fetching {
        Fetching {
            replicas,
            authorizer,
            peers,
        }
    }

    /// Reads `partition` of the permit's topic from `offset` as a consumer, as `asked`,
    /// for a caller that is not a Kafka consumer (the HTTP consume and read): here when
    /// this agent leads it (`watch` is then set to a receiver that changes when its
    /// offsets do), else at its leader over a Kafka Fetch.
    pub async fn read_at_leader(
        &self,
        permit: &Permit,
        partition: i32,
        offset: i64,
        asked: Asked,
        watch: &mut Option<watch::Receiver<Offsets>>,
    ) -> std::result::Result<LeaderRead, Failed> {
        let Asked {
            max_bytes,
            read_committed,
            remote_wait,
        } = asked;
        let topic = permit.topic();
        let unread = |error: Error| Failed {
            error,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
        };
        let leader = self.replicas.leader_of(topic, partition);
        let membership = self.replicas.membership();
        if leader == membership.node_id() {
            let (replica, rx) = self.subscribe(permit, partition).map_err(unread)?;
            *watch = Some(rx);
            let out = self
                .read(&replica, permit, -1, offset, max_bytes, read_committed)
                .await?;
            crate::metrics::fetched(topic, out.records.len(), false);
            return Ok(LeaderRead {
                records: bytes::Bytes::from(out.records),
                high_watermark: out.high_watermark,
                aborted: out
                    .aborted
                    .iter()
                    .map(|a| (a.producer_id, a.first_offset))
                    .collect(),
            });
        }
        if leader < 0 {
            return Err(unread(Error::LeaderNotAvailable {
                topic: topic.to_string(),
                partition,
            }));
        }
        let fetched = self
            .peers
            .fetch(
                membership,
                leader,
                topic,
                partition,
                offset,
                max_bytes,
                remote_wait,
                read_committed,
            )
            .await
            .map_err(unread)?;
        match fetched.refused {
            Some(error) => Err(Failed {
                error,
                high_watermark: fetched.high_watermark,
                last_stable_offset: -1,
                log_start_offset: fetched.log_start_offset,
            }),
            None => Ok(LeaderRead {
                records: fetched.records,
                high_watermark: fetched.high_watermark,
                aborted: fetched.aborted,
            }),
        }
    }

    /// May `who` read `topic` as `reader`? A consumer needs READ on the topic; a
    /// follower CLUSTER_ACTION on the cluster, and without it is refused every topic
    /// (TOPIC_AUTHORIZATION_FAILED, as Kafka answers). Denials are logged and counted by
    /// the authorizer.
    pub fn permit(&self, who: &Caller, reader: Reader, topic: &str) -> Result<Permit> {
        let (operation, resource, name) = match reader {
            Reader::Consumer => (Operation::Read, ResourceType::Topic, topic),
            Reader::Follower(_) => (
                Operation::ClusterAction,
                ResourceType::Cluster,
                CLUSTER_NAME,
            ),
        };
        if !self
            .authorizer
            .allows(who.authz(), operation, resource, name)
        {
            return Err(Error::denied(who, operation, ResourceType::Topic, topic));
        }
        Ok(Permit {
            topic: topic.to_string(),
            reader,
        })
    }

    /// How many partitions `topic` has, as this agent knows it; `None` if it knows no
    /// such topic.
    pub fn partitions(&self, topic: &str) -> Option<i32> {
        self.replicas
            .topic(topic)
            .map(|t| t.record.partitions.len() as i32)
    }

    /// The replica to read `partition` of the permit's topic from (this agent must lead it), and a
    /// receiver, subscribed before any read, that changes when its offsets do (for long
    /// polls: no append between a read and the wait is missed).
    pub fn subscribe(
        &self,
        permit: &Permit,
        partition: i32,
    ) -> Result<(Arc<Partition>, watch::Receiver<Offsets>)> {
        let topic = permit.topic();
        let state = self.replicas.topic(topic);
        let replica = TopicState::served_in(state.as_ref(), topic, partition)?;
        let mut rx = replica.watch();
        rx.borrow_and_update();
        Ok((Arc::clone(replica), rx))
    }

    /// Reads from `offset`, at most `max_bytes` (unless the first batch alone is larger);
    /// a consumer with `read_committed` up to the last stable offset only.
    pub async fn read(
        &self,
        replica: &Arc<Partition>,
        permit: &Permit,
        current_leader_epoch: i32,
        offset: i64,
        max_bytes: usize,
        read_committed: bool,
    ) -> Result<ReadOutcome, Failed> {
        let reader = permit.reader;
        let checked = match reader {
            Reader::Follower(id) => replica.on_replica_fetch(
                id,
                current_leader_epoch,
                offset,
                self.replicas.membership().clock().wall_ms(),
            ),
            Reader::Consumer => replica.check_epoch(current_leader_epoch),
        };
        let read = match checked {
            Err(e) => {
                return Err(Failed {
                    error: e.into(),
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                });
            }
            Ok(()) => match reader {
                Reader::Follower(_) => replica.read(offset, max_bytes, Bound::LogEnd).await,
                Reader::Consumer => {
                    let bound = if read_committed {
                        Bound::LastStable
                    } else {
                        Bound::HighWatermark
                    };
                    self.replicas.read(replica, offset, max_bytes, bound).await
                }
            },
        };
        match read {
            Ok(out) => Ok(out),
            Err(e) => Err(Failed {
                error: e.into(),
                high_watermark: replica.high_watermark(),
                last_stable_offset: replica.last_stable_offset(),
                log_start_offset: match reader {
                    Reader::Follower(_) => replica.log_start_offset(),
                    Reader::Consumer => self.replicas.log_start_offset(replica).await,
                },
            }),
        }
    }
}
