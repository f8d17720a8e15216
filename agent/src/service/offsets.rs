//! Looking up offsets in a partition this agent leads: ListOffsets (the log start, the
//! end, the record with the largest timestamp, the first record at or after a time) and
//! OffsetForLeaderEpoch (where a leader epoch ends, KIP-101 and KIP-320).
//!
//! The log start and a lookup by time look in the archive too; the largest timestamp
//! looks at the local log only. A new leader answers OFFSET_NOT_AVAILABLE until its
//! watermark reached the start of its epoch (KIP-207), so that offsets never go
//! backwards across a leader change.
//!
//! The service decides who may look: every lookup takes a [`Permit`], which only
//! [`Offsets::permit`] makes, for a caller with DESCRIBE on the topic (or, asking where
//! an epoch ends as a follower, CLUSTER_ACTION on the cluster), as Kafka's broker checks
//! ListOffsets and OffsetForLeaderEpoch.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::partition::{Partition, PartitionError};
use crate::peers::Peers;
use crate::replicas::{ReplicaManager, TopicState};

/// Which offset a lookup asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// The log start, the archive included.
    Earliest,
    /// The high watermark; with `read_committed`, the last stable offset.
    Latest { read_committed: bool },
    /// The record with the largest timestamp in the local log.
    MaxTimestamp,
    /// The first record whose timestamp is at or after this one (ms); a negative one
    /// (other than Kafka's -1, -2 and -3) is refused, INVALID_REQUEST.
    AtOrAfter(i64),
}

impl Query {
    /// As Kafka's ListOffsets `timestamp` says it.
    pub fn to_kafka(self) -> i64 {
        match self {
            Query::Latest { .. } => -1,
            Query::Earliest => -2,
            Query::MaxTimestamp => -3,
            Query::AtOrAfter(t) => t,
        }
    }

    /// Kafka's ListOffsets `timestamp`: -2 earliest, -1 latest, -3 max timestamp, a time
    /// otherwise.
    pub fn from_kafka(timestamp: i64, read_committed: bool) -> Query {
        match timestamp {
            -1 => Query::Latest { read_committed },
            -2 => Query::Earliest,
            -3 => Query::MaxTimestamp,
            t => Query::AtOrAfter(t),
        }
    }
}

/// Who looks: a client (DESCRIBE on the topic) or a follower (CLUSTER_ACTION on the
/// cluster, or else DESCRIBE on the topic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    Client,
    Follower,
}

/// Leave for one caller to look up offsets of one topic, from [`Offsets::permit`].
#[derive(Debug)]
pub struct Permit {
    topic: String,
}

impl Permit {
    pub fn topic(&self) -> &str {
        &self.topic
    }
}

/// The offsets service.
pub struct Offsets<'a> {
    pub(crate) replicas: &'a Arc<ReplicaManager>,
    pub(crate) authorizer: &'a Authorizer,
    pub(crate) peers: &'a Peers,
}

impl Offsets<'_> {
    /// May `who` look up offsets of `topic`? DESCRIBE on the topic (TOPIC_AUTHORIZATION_
    /// FAILED), or for a follower CLUSTER_ACTION on the cluster, as Kafka checks. Denials
    /// are logged and counted by the authorizer.
    pub fn permit(&self, who: &Caller, asker: Asker, topic: &str) -> Result<Permit> {
        let az = self.authorizer;
        let replica = asker == Asker::Follower
            && az.decide(
                who.authz(),
                Operation::ClusterAction,
                ResourceType::Cluster,
                CLUSTER_NAME,
            );
        if !replica && !az.allows(who.authz(), Operation::Describe, ResourceType::Topic, topic) {
            return Err(Error::denied(
                who,
                Operation::Describe,
                ResourceType::Topic,
                topic,
            ));
        }
        Ok(Permit {
            topic: topic.to_string(),
        })
    }

    /// The replica of `partition` this agent leads, its epoch checked against
    /// `current_leader_epoch` (-1: not given).
    fn led(
        &self,
        permit: &Permit,
        partition: i32,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>> {
        let topic = permit.topic();
        let state = self.replicas.topic(topic);
        let replica = TopicState::served_in(state.as_ref(), topic, partition)?;
        replica.check_epoch(current_leader_epoch)?;
        Ok(Arc::clone(replica))
    }

    /// `(offset, timestamp)` for `query` on `partition`; `(-1, -1)` when no record
    /// matches (a timestamp of -1 when the query does not name one).
    pub async fn lookup(
        &self,
        permit: &Permit,
        partition: i32,
        current_leader_epoch: i32,
        query: Query,
    ) -> Result<(i64, i64)> {
        let replica = self.led(permit, partition, current_leader_epoch)?;
        replica.offsets_settled()?;
        let replicas = self.replicas;
        Ok(match query {
            Query::Latest {
                read_committed: true,
            } => (replica.last_stable_offset(), -1),
            Query::Latest { .. } => (replica.high_watermark(), -1),
            Query::Earliest => (replicas.log_start_offset(&replica).await, -1),
            Query::MaxTimestamp => replica.max_timestamp_record().await?.unwrap_or((-1, -1)),
            Query::AtOrAfter(t) if t < 0 => {
                return Err(Error::InvalidRequest(format!(
                    "invalid timestamp {t}: -1 (latest), -2 (earliest), -3 (max timestamp) or a time in ms"
                )));
            }
            Query::AtOrAfter(t) => {
                let start = replicas.log_start_offset(&replica).await;
                // The archive holds the older offsets, so a match there comes first.
                let archived = if start < replica.log_start_offset() {
                    replicas
                        .archive()
                        .offset_for_timestamp(&replica.topic, replica.index, t)
                        .await
                        .map_err(|e| PartitionError::Archive(e.to_string()))?
                } else {
                    None
                };
                let found = match archived {
                    Some(found) => Some(found),
                    None => replica.offset_for_timestamp(t).await?,
                };
                // A match inside the first object or segment may lie below the log
                // start, as in Kafka: the first offset still held is the answer then.
                match found {
                    Some((offset, ts)) => {
                        let start = replicas.log_start_offset(&replica).await;
                        (offset.max(start), ts)
                    }
                    None => (-1, -1),
                }
            }
        })
    }

    /// The offset `query` finds in each of `partitions`, asked of
    /// each partition's leader: this agent's looked up here, the others' over their
    /// Kafka listener (one request per leader).
    pub async fn lookup_at_leaders(
        &self,
        permit: &Permit,
        partitions: &[i32],
        query: Query,
    ) -> BTreeMap<i32, Result<i64>> {
        let topic = permit.topic();
        let mut out = BTreeMap::new();
        let state = self.replicas.topic(topic);
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for &p in partitions {
            match state
                .as_ref()
                .and_then(|s| s.record.partitions.get(p as usize))
            {
                Some(r) if r.leader >= 0 => by_leader.entry(r.leader).or_default().push(p),
                Some(_) => {
                    let none = Error::LeaderNotAvailable {
                        topic: topic.to_string(),
                        partition: p,
                    };
                    out.insert(p, Err(none));
                }
                None => {
                    let unknown = Error::UnknownTopicOrPartition {
                        topic: topic.to_string(),
                        partition: p,
                    };
                    out.insert(p, Err(unknown));
                }
            }
        }
        let membership = self.replicas.membership();
        for (leader, indexes) in by_leader {
            if leader == membership.node_id() {
                for p in indexes {
                    let found = self.lookup(permit, p, -1, query).await;
                    out.insert(p, found.map(|(offset, _)| offset));
                }
                continue;
            }
            let asked = self
                .peers
                .list_offsets(
                    membership,
                    leader,
                    topic,
                    &indexes,
                    query.to_kafka(),
                    matches!(
                        query,
                        Query::Latest {
                            read_committed: true
                        }
                    ),
                )
                .await;
            match asked {
                Ok(found) => out.extend(found),
                // Only an agent that cannot be reached fails a whole request.
                Err(e) => {
                    let why = match e {
                        Error::Unreachable { why, .. } => why,
                        other => other.to_string(),
                    };
                    for p in indexes {
                        let agent = leader;
                        let why = why.clone();
                        out.insert(p, Err(Error::Unreachable { agent, why }));
                    }
                }
            }
        }
        out
    }

    /// Where `leader_epoch` ends in `partition`'s log: the largest epoch at or below it
    /// and its end offset; `None` when the log holds no epoch that old.
    pub fn epoch_end(
        &self,
        permit: &Permit,
        partition: i32,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<Option<(i32, i64)>> {
        let replica = self.led(permit, partition, current_leader_epoch)?;
        Ok(replica.epoch_end_offset(leader_epoch))
    }
}
