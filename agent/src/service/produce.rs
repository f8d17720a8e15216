//! Appending record batches as leader, and waiting until they are committed.
//!
//! [`Producing::append`] validates and appends at once (so pipelined requests append in
//! the order they arrived); for acks=all it hands back a [`Commit`] to wait on, which
//! completes once the high watermark covers the batch (every in-sync replica has it).
//!
//! acks=all needs `min.insync.replicas` in the ISR: with fewer, nothing is appended
//! (NOT_ENOUGH_REPLICAS); if the ISR falls below it while the write waits, the write is
//! kept but answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, as in Kafka. An agent that cannot
//! renew its membership lease takes no writes: another may be about to be elected in its
//! place.
//!
//! The service decides who may write: nothing is appended without a [`Permit`], and
//! only [`Producing::permit`] makes one, for a caller with WRITE on the topic (and on
//! the transactional id a producer names), as Kafka's broker asks. The Kafka Produce
//! and the HTTP produce both ask it; neither edge checks ACLs itself.

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use crate::authz::{Authorizer, Operation, ResourceType};
use crate::caller::Caller;
pub use crate::commit::Commit;
use crate::error::{Error, Result};
use crate::partition::Partition;
use crate::peers::Peers;
use crate::replicas::{ReplicaManager, TopicState};

/// How many replicas must have a write before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// acks=0: no answer at all.
    None,
    /// acks=1: the leader appended it.
    Leader,
    /// acks=all: every in-sync replica has it, and there are `min.insync.replicas`.
    All,
}

impl Acks {
    /// Kafka's `acks` field.
    pub fn from_kafka(acks: i16) -> Result<Acks> {
        match acks {
            0 => Ok(Acks::None),
            1 => Ok(Acks::Leader),
            -1 => Ok(Acks::All),
            n => Err(Error::InvalidAcks(n.to_string())),
        }
    }
}

/// A batch appended as leader.
#[derive(Debug)]
pub struct Appended {
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    /// For acks=all: what to wait for before answering.
    pub commit: Option<Commit>,
}

/// A record as a caller that is not a Kafka producer gives it (the HTTP produce).
#[derive(Debug, Clone)]
pub struct Message {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header keys and values, in order (a key may repeat).
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time, in ms.
    pub timestamp: i64,
}

/// One uncompressed record batch of `messages`, in their order, without a producer id
/// (the form [`Producing::write`] takes).
pub fn batch<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Bytes {
    use kafka_protocol::protocol::StrBytes;
    let records: Vec<_> = messages
        .into_iter()
        .enumerate()
        .map(|(delta, m)| {
            let mut r = strata_log::batch::plain_record(
                delta as i64,
                m.timestamp,
                m.key.clone(),
                m.value.clone(),
            );
            r.sequence = delta as i32 - 1;
            r.headers = m
                .headers
                .iter()
                .map(|(k, v)| (StrBytes::from_string(k.clone()), v.clone()))
                .collect();
            r
        })
        .collect();
    let encoded =
        strata_log::batch::encode_records(&records, kafka_protocol::records::Compression::None);
    Bytes::from(encoded)
}

/// Kafka's `retry.backoff.ms` default: the pause before a write is tried again.
const RETRY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Leave for one caller to write one topic, from [`Producing::permit`].
#[derive(Debug)]
pub struct Permit {
    topic: String,
}

impl Permit {
    pub fn topic(&self) -> &str {
        &self.topic
    }
}

/// The produce service.
pub struct Producing {
    replicas: Arc<ReplicaManager>,
    authorizer: Arc<Authorizer>,
    peers: Arc<Peers>,
}

impl std::fmt::Debug for Producing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producing").finish_non_exhaustive()
    }
}

impl Producing {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        authorizer: Arc<Authorizer>,
        peers: Arc<Peers>,
    ) -> Producing {
        Producing {
            replicas,
            authorizer,
            peers,
        }
    }

    /// May `who` write `topic`? A producer that names a `transactional_id` needs WRITE
    /// on it first (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on the topic
    /// (TOPIC_AUTHORIZATION_FAILED), as Kafka's broker checks a Produce. Denials are
    /// logged and counted by the authorizer.
    pub fn permit(
        &self,
        who: &Caller,
        transactional_id: Option<&str>,
        topic: &str,
    ) -> Result<Permit> {
        let resources = transactional_id
            .filter(|id| !id.is_empty())
            .map(|id| (ResourceType::TransactionalId, id))
            .into_iter()
            .chain([(ResourceType::Topic, topic)]);
        for (resource, name) in resources {
            if !self
                .authorizer
                .allows(who.authz(), Operation::Write, resource, name)
            {
                return Err(Error::denied(who, Operation::Write, resource, name));
            }
        }
        Ok(Permit {
            topic: topic.to_string(),
        })
    }

    /// Validates `records` (one or more batches) and appends them to `partition` of
    /// the permit's topic, which this agent must lead. `verified`: for a transactional
    /// write that needed KIP-890 verification ([`Producing::needs_verification`]), the
    /// producer id and the partition's token.
    pub fn append(
        &self,
        permit: &Permit,
        partition: i32,
        records: Option<&Bytes>,
        acks: Acks,
        verified: Option<(i64, u64)>,
        now_ms: i64,
    ) -> Result<Appended> {
        let topic = permit.topic();
        let state = self.replicas.topic(topic);
        let replica = TopicState::served_in(state.as_ref(), topic, partition)?;
        if !self.replicas.membership().holds_lease() {
            return Err(Error::LeaseLapsed);
        }
        let records = match records {
            Some(r) if !r.is_empty() => r,
            _ => return Err(Error::NoRecords),
        };
        if let Some(reason) = state
            .as_ref()
            .and_then(|t| t.record.disabled.get(&(partition as u32)))
        {
            return Err(Error::Disabled {
                topic: topic.to_string(),
                partition,
                reason: reason.clone(),
            });
        }
        let min_insync = state.as_ref().map_or(1, |t| t.config.min_insync_replicas());
        let (out, epoch) = replica.append(
            records,
            now_ms,
            (acks == Acks::All).then_some(min_insync),
            verified,
        )?;
        Ok(Appended {
            base_offset: out.base_offset,
            log_append_time_ms: out.log_append_time_ms,
            log_start_offset: replica.log_start_offset(),
            commit: (acks == Acks::All)
                .then(|| Commit::new(Arc::clone(replica), out.last_offset + 1, epoch, min_insync)),
        })
    }

    /// Writes `batch` to `partition` of the permit's topic at its leader, for a caller
    /// that is not a Kafka producer (the HTTP produce): appended here when this agent
    /// leads it (for acks=all, once committed), else sent to the leader as a Kafka
    /// Produce (acks=0 as acks=1: the caller is answered either way). A write refused
    /// for a reason after which it surely did not happen (no leader, a leader that moved,
    /// too few in-sync replicas) is tried again, as a Kafka producer retries, at the
    /// leader known then, until `deadline`. The base offset (`None` for acks=0).
    pub async fn write(
        &self,
        permit: &Permit,
        partition: i32,
        batch: &Bytes,
        acks: Acks,
        deadline: Instant,
    ) -> Result<Option<i64>> {
        loop {
            let outcome = self
                .write_once(permit, partition, batch, acks, deadline)
                .await;
            match &outcome {
                Err(e) if e.retriable() && crate::clock::instant() + RETRY_BACKOFF < deadline => {
                    crate::clock::pause(RETRY_BACKOFF).await;
                }
                _ => return outcome,
            }
        }
    }

    async fn write_once(
        &self,
        permit: &Permit,
        partition: i32,
        batch: &Bytes,
        acks: Acks,
        deadline: Instant,
    ) -> Result<Option<i64>> {
        let topic = permit.topic();
        let leader = self.replicas.leader_of(topic, partition);
        let membership = self.replicas.membership();
        if leader == membership.node_id() {
            let now = membership.clock().wall_ms();
            let out = self.append(permit, partition, Some(batch), acks, None, now)?;
            crate::metrics::produced(topic, batch.len());
            let base = (acks != Acks::None).then_some(out.base_offset);
            if let Some(commit) = out.commit {
                commit.wait(deadline).await?;
            }
            return Ok(base);
        }
        if leader < 0 {
            return Err(Error::LeaderNotAvailable {
                topic: topic.to_string(),
                partition,
            });
        }
        let left = deadline.saturating_duration_since(crate::clock::instant());
        let base = self
            .peers
            .produce(
                membership,
                leader,
                topic,
                partition,
                batch,
                acks == Acks::All,
                left,
            )
            .await?;
        Ok((acks != Acks::None).then_some(base))
    }

    /// For a produce with a transactional id: the producer id and epoch of the first
    /// transactional batch in `records`, if the partition has no transaction of that
    /// producer open yet (so the coordinator must confirm the partition is in it, or,
    /// for v2 producers, add it), and the partition to verify on. `None` when no
    /// verification is needed.
    pub fn needs_verification(
        &self,
        permit: &Permit,
        partition: i32,
        records: Option<&[u8]>,
    ) -> Option<(i64, i16, Arc<Partition>)> {
        let topic = permit.topic();
        let (header, _) = strata_log::batch::BatchIter::new(records?).next()?;
        if !header.is_transactional() || header.producer_id < 0 {
            return None;
        }
        let state = self.replicas.topic(topic);
        let replica = TopicState::served_in(state.as_ref(), topic, partition).ok()?;
        (!replica.in_transaction(header.producer_id, header.producer_epoch)).then(|| {
            (
                header.producer_id,
                header.producer_epoch,
                Arc::clone(replica),
            )
        })
    }
}
