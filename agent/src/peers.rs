//! Kafka connections from this agent to the others, reused across requests: what a
//! service sends to the agent that serves a partition or group it does not (the HTTP
//! produce's writes to each partition's leader, for one).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, ListGroupsRequest, ListOffsetsRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::time::Instant;

use crate::error::Error;
use crate::membership::Membership;
use crate::peer::Peer;

/// Connections kept per agent, and how long an idle one is kept: well under the
/// agents' own idle timeout, so a kept connection is not one the other side closed.
const IDLE_PER_AGENT: usize = 4;
const IDLE_FOR: Duration = Duration::from_secs(60);
/// A forwarded produce must be answered before the connection's response timeout.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(9);

/// Kafka connections to other agents, reused across requests.
pub struct Peers {
    node_id: i32,
    max_record_bytes: usize,
    idle: Mutex<HashMap<i32, Vec<(Peer, Instant)>>>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl Peers {
    pub fn new(node_id: i32, max_record_bytes: usize) -> Peers {
        Peers {
            node_id,
            max_record_bytes,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `request` to agent `node` and waits for its response.
    pub async fn send<R: Request>(
        &self,
        membership: &Membership,
        node: i32,
        version: i16,
        request: &R,
    ) -> anyhow::Result<R::Response> {
        let kept = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let list = idle.entry(node).or_default();
            list.retain(|(_, since)| since.elapsed() < IDLE_FOR);
            list.pop()
        };
        let mut peer = match kept {
            Some((peer, _)) => peer,
            None => {
                let address = membership
                    .address_of(node)
                    .with_context(|| format!("agent {node} is not live"))?;
                Peer::connect(
                    &address,
                    self.node_id,
                    self.max_record_bytes,
                    membership.peer_access(),
                )
                .await
                .with_context(|| format!("cannot connect to agent {node} at {address}"))?
            }
        };
        let response = peer.send(version, request).await?;
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry(node).or_default();
        if list.len() < IDLE_PER_AGENT {
            list.push((peer, crate::clock::instant()));
        }
        Ok(response)
    }

    /// [`Peers::send`], with an agent that cannot be reached as
    /// [`Error::Unreachable`].
    async fn ask<R: Request>(
        &self,
        membership: &Membership,
        node: i32,
        version: i16,
        request: &R,
    ) -> Result<R::Response, Error> {
        self.send(membership, node, version, request)
            .await
            .map_err(|e| Error::Unreachable {
                agent: node,
                why: format!("{e:#}"),
            })
    }

    /// Sends `batch` to `partition` of `topic` at its leader, agent `leader`, as a Kafka
    /// Produce (v9) with acks=all when `all` (else acks=1) and at most `left` (or
    /// [`FORWARD_TIMEOUT`]) to replicate it: the base offset it was written at.
    #[allow(clippy::too_many_arguments)]
    pub async fn produce(
        &self,
        membership: &Membership,
        leader: i32,
        topic: &str,
        partition: i32,
        batch: &[u8],
        all: bool,
        left: Duration,
    ) -> Result<i64, Error> {
        let mut request = ProduceRequest::default();
        request.acks = if all { -1 } else { 1 };
        request.timeout_ms = left.min(FORWARD_TIMEOUT).as_millis() as i32;
        let mut data = PartitionProduceData::default();
        data.index = partition;
        data.records = Some(bytes::Bytes::copy_from_slice(batch));
        let mut t = TopicProduceData::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.partition_data = vec![data];
        request.topic_data = vec![t];
        let response = self.ask(membership, leader, 9, &request).await?;
        let answer = response
            .responses
            .into_iter()
            .flat_map(|t| t.partition_responses)
            .find(|p| p.index == partition)
            .ok_or_else(|| no_answer(leader, topic, partition))?;
        match ResponseError::try_from_code(answer.error_code) {
            None => Ok(answer.base_offset),
            Some(code) => Err(Error::Elsewhere {
                agent: leader,
                code: code.code(),
                message: answer.error_message.map_or_else(
                    || format!("agent {leader} refused the write: {code}"),
                    |m| m.to_string(),
                ),
                retriable: matches!(
                    code,
                    ResponseError::UnknownTopicOrPartition
                        | ResponseError::NotLeaderOrFollower
                        | ResponseError::LeaderNotAvailable
                        | ResponseError::NotEnoughReplicas
                ),
            }),
        }
    }

    /// Reads `partition` of `topic` from `offset` at its leader, agent `leader`, as a
    /// consumer's Kafka Fetch (v12) of at most `max_bytes`, waiting up to `wait` for a
    /// first record there.
    #[allow(clippy::too_many_arguments)]
    pub async fn fetch(
        &self,
        membership: &Membership,
        leader: i32,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
        wait: Duration,
        read_committed: bool,
    ) -> Result<Fetched, Error> {
        let mut p = FetchPartition::default();
        p.partition = partition;
        p.current_leader_epoch = -1;
        p.fetch_offset = offset;
        p.log_start_offset = -1;
        p.partition_max_bytes = max_bytes as i32;
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = vec![p];
        let mut request = FetchRequest::default();
        request.replica_id = BrokerId(-1);
        request.max_wait_ms = wait.as_millis() as i32;
        request.min_bytes = 1;
        request.max_bytes = max_bytes as i32;
        request.isolation_level = i8::from(read_committed);
        request.session_epoch = -1;
        request.topics = vec![t];
        let response = self.ask(membership, leader, 12, &request).await?;
        let data = response
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| no_answer(leader, topic, partition))?;
        let refused = ResponseError::try_from_code(data.error_code).map(|code| Error::Elsewhere {
            agent: leader,
            code: code.code(),
            message: format!("agent {leader} refused the read of {topic}-{partition}: {code}"),
            retriable: false,
        });
        Ok(Fetched {
            refused,
            records: data.records.unwrap_or_default(),
            high_watermark: data.high_watermark,
            log_start_offset: data.log_start_offset,
            aborted: data
                .aborted_transactions
                .unwrap_or_default()
                .into_iter()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect(),
        })
    }

    /// Looks up `partitions` of `topic` at their leader, agent `leader`, with a Kafka
    /// ListOffsets (v7) for Kafka's `timestamp` (-2 earliest, -1 latest, -3 max
    /// timestamp, else a time; `read_committed`: the latest is the last stable offset):
    /// each partition's offset, or why not.
    #[allow(clippy::too_many_arguments)]
    pub async fn list_offsets(
        &self,
        membership: &Membership,
        leader: i32,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
        read_committed: bool,
    ) -> Result<Vec<(i32, Result<i64, Error>)>, Error> {
        let mut t = ListOffsetsTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        for &p in partitions {
            let mut lp = ListOffsetsPartition::default();
            lp.partition_index = p;
            lp.current_leader_epoch = -1;
            lp.timestamp = timestamp;
            t.partitions.push(lp);
        }
        let mut request = ListOffsetsRequest::default();
        request.replica_id = BrokerId(-1);
        request.isolation_level = i8::from(read_committed);
        request.topics = vec![t];
        let response = self.ask(membership, leader, 7, &request).await?;
        Ok(response
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .map(|p| {
                let answer = match ResponseError::try_from_code(p.error_code) {
                    None => Ok(p.offset),
                    Some(code) => Err(Error::Elsewhere {
                        agent: leader,
                        code: code.code(),
                        message: format!(
                            "agent {leader} could not look up {topic}-{}: {code}",
                            p.partition_index
                        ),
                        retriable: false,
                    }),
                };
                (p.partition_index, answer)
            })
            .collect())
    }

    /// The groups agent `node` coordinates, with a Kafka ListGroups (v4) as this agent's
    /// principal: `(group id, protocol type, state)`.
    pub async fn list_groups(
        &self,
        membership: &Membership,
        node: i32,
    ) -> Result<Vec<(String, String, String)>, Error> {
        let mut request = ListGroupsRequest::default();
        request.states_filter = Vec::new();
        let response = self.ask(membership, node, 4, &request).await?;
        if let Some(code) = ResponseError::try_from_code(response.error_code) {
            return Err(Error::Elsewhere {
                agent: node,
                code: code.code(),
                message: format!("agent {node} could not list its groups: {code}"),
                retriable: false,
            });
        }
        Ok(response
            .groups
            .into_iter()
            .map(|g| {
                (
                    g.group_id.to_string(),
                    g.protocol_type.to_string(),
                    g.group_state.to_string(),
                )
            })
            .collect())
    }
}

/// An answer that leaves out the partition asked about.
fn no_answer(agent: i32, topic: &str, partition: i32) -> Error {
    Error::Elsewhere {
        agent,
        code: ResponseError::UnknownServerError.code(),
        message: format!("agent {agent} did not answer for {topic}-{partition}"),
        retriable: false,
    }
}

/// A partition's answer to a [`Peers::fetch`].
#[derive(Debug)]
pub struct Fetched {
    /// Why nothing was read, if it was not.
    pub refused: Option<Error>,
    pub records: bytes::Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// `(producer id, first offset)` of the aborted transactions in the records.
    pub aborted: Vec<(i64, i64)>,
}
