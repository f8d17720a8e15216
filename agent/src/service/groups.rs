//! Consumer groups in domain terms, on the group coordinator (`group/`): joining,
//! syncing, heartbeats and leaving, committing and reading offsets, listing,
//! describing and deleting groups. Kafka's group APIs (`api/groups.rs`) and the HTTP
//! API's consumers and group routes (`http/consume.rs`, `http/admin.rs`) translate their
//! requests to these calls, so an HTTP consumer is a member like any other.
//!
//! The service decides who may, as Kafka's broker does: READ on the group to take part
//! in it or commit, and READ on each topic committed to; DESCRIBE on the group to read
//! its offsets or describe it (a listing of all of a group's offsets leaves out the
//! topics the caller may not describe); DELETE on the group to delete it or its offsets.
//! ListGroups shows every group to who may DESCRIBE the cluster, else the groups the
//! caller may describe. Deletions are audited (`group.delete`,
//! `group.delete_offsets`), refusals included.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
/// The offsets the group service commits and fetches, as the metastore keeps them.
pub use strata_metastore::{CommittedOffset, TopicPartition};

use crate::audit::Audit;
use crate::authz::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::caller::Caller;
use crate::group::state::{JoinRequest, JoinResponse, Leaving, SyncResponse};
use crate::group::{Coordinator, GroupError, GroupSummary};
use crate::replicas::ReplicaManager;

/// Kafka's `offset.metadata.max.bytes`.
const OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// Who, in a group, makes a call: a member (its id and generation, or its static
/// instance id), or nobody (empty id, generation -1: a commit from outside the group,
/// which the coordinator takes only while the group has no members).
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub member_id: &'a str,
    pub group_instance_id: Option<&'a str>,
    pub generation_id: i32,
}

impl Member<'_> {
    pub const OUTSIDE: Member<'static> = Member {
        member_id: "",
        group_instance_id: None,
        generation_id: -1,
    };
}

/// Offsets read from a group, topic by topic: each partition's committed offset (none
/// committed: `None`), or why it is not told.
pub type Offsets = Vec<(
    String,
    Vec<(i32, Result<Option<CommittedOffset>, GroupError>)>,
)>;

/// The group service, on what it borrows from the broker (`Broker::groups`).
#[derive(Clone, Copy)]
pub struct Groups<'a> {
    pub coordinator: &'a Arc<Coordinator>,
    pub replicas: &'a Arc<ReplicaManager>,
    pub peers: &'a crate::peers::Peers,
    pub authorizer: &'a Authorizer,
    pub audit: &'a Audit,
}

impl Groups<'_> {
    /// The `consumer` protocol's range assignment of the topics the members subscribe
    /// to, as a group's leader computes it (the HTTP consumer, when it leads).
    pub fn range_assignment(
        &self,
        members: &[(String, Option<String>, bytes::Bytes)],
    ) -> Vec<(String, bytes::Bytes)> {
        crate::group::consumer_protocol::assign(
            |topic| {
                self.replicas
                    .topic(topic)
                    .map(|t| t.record.partitions.len() as i32)
            },
            members,
        )
    }

    /// The coordinator itself, for what is not a caller's request (the transaction
    /// coordinator's staged offsets, the agent's own tasks).
    pub fn coordinator(&self) -> &Arc<Coordinator> {
        self.coordinator
    }

    fn may(&self, who: &Caller, operation: Operation, kind: ResourceType, name: &str) -> bool {
        self.authorizer.allows(who.authz(), operation, kind, name)
    }

    /// Without logging a denial: for what is only left out of an answer.
    fn sees(&self, who: &Caller, operation: Operation, kind: ResourceType, name: &str) -> bool {
        self.authorizer.decide(who.authz(), operation, kind, name)
    }

    fn on_group(&self, who: &Caller, operation: Operation, group: &str) -> Result<(), GroupError> {
        if self.may(who, operation, ResourceType::Group, group) {
            Ok(())
        } else {
            Err(GroupError::GroupAuthorizationFailed)
        }
    }

    /// The agent that coordinates `group` (FindCoordinator), for a caller with DESCRIBE
    /// on it.
    pub fn find_coordinator(
        &self,
        who: &Caller,
        group: &str,
    ) -> Result<strata_metastore::AgentRecord, GroupError> {
        self.on_group(who, Operation::Describe, group)?;
        Ok(self.replicas.membership().coordinator_of(group))
    }

    /// KIP-430: the operations the caller may do to `group`.
    pub fn authorized_operations(&self, who: &Caller, group: &str) -> i32 {
        self.authorizer
            .operations(who.authz(), ResourceType::Group, group)
    }

    /// Joins `group` (READ on it), answering once the group has formed.
    pub async fn join(&self, who: &Caller, group: &str, req: JoinRequest) -> JoinResponse {
        if let Err(e) = self.on_group(who, Operation::Read, group) {
            return JoinResponse::error(e, &req.member_id);
        }
        self.coordinator.join(group, req).await
    }

    /// A member's SyncGroup (READ on the group): the leader hands out `assignments`;
    /// each member gets its own.
    pub async fn sync(
        &self,
        who: &Caller,
        group: &str,
        member: Member<'_>,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResponse {
        if let Err(e) = self.on_group(who, Operation::Read, group) {
            return SyncResponse::error(e);
        }
        self.coordinator
            .sync(
                group,
                member.member_id,
                member.group_instance_id,
                member.generation_id,
                protocol_type,
                protocol_name,
                assignments,
            )
            .await
    }

    pub fn heartbeat(
        &self,
        who: &Caller,
        group: &str,
        member: Member<'_>,
    ) -> Result<(), GroupError> {
        self.on_group(who, Operation::Read, group)?;
        self.coordinator.heartbeat(
            group,
            member.member_id,
            member.group_instance_id,
            member.generation_id,
        )
    }

    /// Members leaving `group` (READ on it): each one's outcome.
    pub fn leave(
        &self,
        who: &Caller,
        group: &str,
        leaving: &[Leaving],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        self.on_group(who, Operation::Read, group)?;
        Ok(self.coordinator.leave(group, leaving))
    }

    /// Commits `offsets` for `member` of `group`: READ on the group and on each topic;
    /// a partition that does not exist, or whose metadata is too long, is refused by
    /// itself. Each partition's outcome.
    pub async fn commit(
        &self,
        who: &Caller,
        group: &str,
        member: Member<'_>,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
    ) -> BTreeMap<TopicPartition, Result<(), GroupError>> {
        let mut out = BTreeMap::new();
        if let Err(e) = self.on_group(who, Operation::Read, group) {
            return offsets.into_iter().map(|(tp, _)| (tp, Err(e))).collect();
        }
        let mut readable: HashMap<String, bool> = HashMap::new();
        let mut committed = Vec::new();
        for (tp, offset) in offsets {
            let may = *readable
                .entry(tp.0.clone())
                .or_insert_with(|| self.may(who, Operation::Read, ResourceType::Topic, &tp.0));
            // The partition may be led by another agent: offsets live in the metastore.
            let refused = if !may {
                Some(GroupError::TopicAuthorizationFailed)
            } else if !self
                .replicas
                .topic(&tp.0)
                .is_some_and(|t| t.has_partition(tp.1))
            {
                Some(GroupError::UnknownTopicOrPartition)
            } else if offset
                .metadata
                .as_ref()
                .is_some_and(|m| m.len() > OFFSET_METADATA_MAX_BYTES)
            {
                Some(GroupError::OffsetMetadataTooLarge)
            } else {
                None
            };
            match refused {
                Some(e) => {
                    out.insert(tp, Err(e));
                }
                None => committed.push((tp, offset)),
            }
        }
        let outcome = if group.is_empty() {
            Err(GroupError::InvalidGroupId)
        } else if committed.is_empty() {
            Ok(())
        } else {
            let partitions: Vec<TopicPartition> =
                committed.iter().map(|(tp, _)| tp.clone()).collect();
            let outcome = self
                .coordinator
                .commit(
                    group,
                    member.member_id,
                    member.group_instance_id,
                    member.generation_id,
                    committed,
                )
                .await;
            for tp in partitions {
                out.insert(tp, outcome);
            }
            return out;
        };
        for (tp, _) in committed {
            out.insert(tp, outcome);
        }
        out
    }

    /// The committed offsets of `group` (DESCRIBE on it): of the partitions `wanted`,
    /// or of every partition it committed to, leaving out the topics the caller may
    /// not describe. A named topic the caller may not describe is refused partition by
    /// partition; with `require_stable` (KIP-447), so is a partition whose offset an
    /// open transaction has staged (retriable).
    pub async fn offsets(
        &self,
        who: &Caller,
        group: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
        require_stable: bool,
    ) -> Result<Offsets, GroupError> {
        self.on_group(who, Operation::Describe, group)?;
        if group.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let stored = self.coordinator.offsets(group).await?;
        let mut topics: Offsets = match wanted {
            Some(topics) => topics
                .into_iter()
                .map(|(topic, partitions)| {
                    let described = self.may(who, Operation::Describe, ResourceType::Topic, &topic);
                    let found = partitions
                        .into_iter()
                        .map(|p| {
                            let offset = if described {
                                Ok(stored.get(&(topic.clone(), p)).cloned())
                            } else {
                                Err(GroupError::TopicAuthorizationFailed)
                            };
                            (p, offset)
                        })
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Result<_, _>)>> = BTreeMap::new();
                for ((topic, p), o) in stored {
                    by_topic.entry(topic).or_default().push((p, Ok(Some(o))));
                }
                by_topic
                    .into_iter()
                    .filter(|(topic, _)| {
                        self.sees(who, Operation::Describe, ResourceType::Topic, topic)
                    })
                    .collect()
            }
        };
        if require_stable && let Ok(unstable) = self.coordinator.unstable_partitions(group).await {
            for (topic, partitions) in &mut topics {
                for (p, offset) in partitions.iter_mut() {
                    if offset.is_ok() && unstable.contains(&(topic.clone(), *p)) {
                        *offset = Err(GroupError::UnstableOffsetCommit);
                    }
                }
            }
        }
        Ok(topics)
    }

    /// Every committed offset of `group` the caller may see (DESCRIBE on the group and
    /// on the topic), by partition.
    pub async fn committed(
        &self,
        who: &Caller,
        group: &str,
    ) -> Result<BTreeMap<TopicPartition, CommittedOffset>, GroupError> {
        let topics = self.offsets(who, group, None, false).await?;
        Ok(topics
            .into_iter()
            .flat_map(|(topic, partitions)| {
                partitions.into_iter().filter_map(move |(p, offset)| {
                    Some(((topic.clone(), p), offset.ok().flatten()?))
                })
            })
            .collect())
    }

    /// The groups this agent coordinates that the caller may see: all of them with
    /// DESCRIBE on the cluster, else those it may describe. `(id, protocol type,
    /// state)`.
    pub async fn list(
        &self,
        who: &Caller,
    ) -> Result<Vec<(String, String, &'static str)>, GroupError> {
        let mut groups = self.coordinator.list().await?;
        if !self.sees(
            who,
            Operation::Describe,
            ResourceType::Cluster,
            CLUSTER_NAME,
        ) {
            groups
                .retain(|(id, _, _)| self.sees(who, Operation::Describe, ResourceType::Group, id));
        }
        Ok(groups)
    }

    /// The groups of every live agent the caller may see (each agent's as [`Groups::list`]
    /// shows its own: this one's here, the others' over their Kafka listener as this
    /// agent's principal), with the agent coordinating each: `(group id, protocol type,
    /// state, coordinator)`; and the agents that could not answer, with why.
    pub async fn list_everywhere(
        &self,
        who: &Caller,
    ) -> (
        Vec<(String, String, String, i32)>,
        Vec<(i32, crate::error::Error)>,
    ) {
        let membership = self.replicas.membership();
        let all = self.sees(
            who,
            Operation::Describe,
            ResourceType::Cluster,
            CLUSTER_NAME,
        );
        let (mut groups, mut failed) = (Vec::new(), Vec::new());
        for agent in membership.live() {
            let node = agent.node_id;
            if node == membership.node_id() {
                match self.list(who).await {
                    Ok(own) => groups.extend(
                        own.into_iter()
                            .map(|(id, protocol, state)| (id, protocol, state.to_string(), node)),
                    ),
                    Err(e) => failed.push((node, e.into())),
                }
                continue;
            }
            match self.peers.list_groups(membership, node).await {
                Ok(theirs) => groups.extend(
                    theirs
                        .into_iter()
                        .filter(|(id, _, _)| {
                            all || self.sees(who, Operation::Describe, ResourceType::Group, id)
                        })
                        .map(|(id, protocol, state)| (id, protocol, state, node)),
                ),
                Err(e) => failed.push((node, e)),
            }
        }
        (groups, failed)
    }

    /// `group` as it is now (DESCRIBE on it); `None` if it has no members.
    pub async fn describe(
        &self,
        who: &Caller,
        group: &str,
    ) -> Result<Option<GroupSummary>, GroupError> {
        self.on_group(who, Operation::Describe, group)?;
        self.coordinator.describe(group).await
    }

    /// Deletes an empty `group` and its committed offsets (DELETE on it). Audited.
    pub async fn delete(&self, who: &Caller, group: &str) -> Result<(), GroupError> {
        let outcome = match self.on_group(who, Operation::Delete, group) {
            Ok(()) => self.coordinator.delete(group).await,
            Err(e) => Err(e),
        };
        let recorded = outcome
            .map(|()| json!({ "deleted": group }))
            .map_err(|e| format!("{}: {e}", e.name()));
        self.record(who, "group.delete", group, json!({}), recorded);
        outcome
    }

    /// Deletes the committed offsets of `partitions` (DELETE on the group, READ on
    /// each topic). Each partition's outcome. Audited.
    pub async fn delete_offsets(
        &self,
        who: &Caller,
        group: &str,
        partitions: Vec<TopicPartition>,
    ) -> Result<Vec<(TopicPartition, Option<GroupError>)>, GroupError> {
        let mut asked: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (t, p) in &partitions {
            asked.entry(t.clone()).or_default().push(*p);
        }
        let request = json!({ "partitions": asked });
        let outcome: Result<Vec<(TopicPartition, Option<GroupError>)>, GroupError> = async {
            self.on_group(who, Operation::Delete, group)?;
            let (readable, refused): (Vec<_>, Vec<_>) = partitions
                .into_iter()
                .partition(|(t, _)| self.may(who, Operation::Read, ResourceType::Topic, t));
            let mut results = if readable.is_empty() {
                Vec::new()
            } else {
                self.coordinator.delete_offsets(group, readable).await?
            };
            results.extend(
                refused
                    .into_iter()
                    .map(|tp| (tp, Some(GroupError::TopicAuthorizationFailed))),
            );
            Ok(results)
        }
        .await;
        let recorded = match &outcome {
            Err(e) => Err(format!("{}: {e}", e.name())),
            Ok(results) => {
                let failed: Vec<String> = results
                    .iter()
                    .filter_map(|((t, p), e)| e.map(|e| format!("partition:{t}-{p}: {}", e.name())))
                    .collect();
                if failed.is_empty() {
                    Ok(json!({}))
                } else {
                    Err(failed.join(", "))
                }
            }
        };
        self.record(who, "group.delete_offsets", group, request, recorded);
        outcome
    }

    fn record(
        &self,
        who: &Caller,
        action: &str,
        group: &str,
        request: Value,
        outcome: Result<Value, String>,
    ) {
        self.audit
            .record(who, action, &format!("group:{group}"), request, outcome);
    }
}
