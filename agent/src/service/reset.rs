//! Moving a group's committed offsets of one topic, as `kafka-consumer-groups.sh
//! --reset-offsets` does (`POST /v1/groups/{group}/offsets`): to the log start, the
//! high watermark, an offset, or the first offset at or after a time (replay), kept
//! within the log. Kafka's tool builds this plan itself from DescribeGroups,
//! ListOffsets and OffsetCommit; here the plan is built from the group, topic and
//! offsets services, each of which decides whether the caller may (DESCRIBE on the
//! group and the topic; READ on both to commit). Audited (`group.reset_offsets`,
//! `group.reset_offsets.dry_run`), refusals included.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::audit::Audit;
use crate::caller::Caller;
use crate::group::GroupError;
use crate::service::admin::{Admin, AdminError};
use crate::service::groups::{CommittedOffset, Groups, Member};
use crate::service::offsets::{Asker, Offsets, Query};

/// The most partitions an audit entry lists.
const AUDITED_PARTITIONS: usize = 64;

/// Where to move the offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Earliest,
    Latest,
    Offset(i64),
    /// The first offset at or after this time (ms); the high watermark if none.
    Timestamp(i64),
}

/// What a reset asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetSpec {
    pub topic: String,
    pub to: Target,
    /// The partitions to move; every one of the topic's when `None`.
    pub partitions: Option<Vec<i64>>,
    /// Answer the plan and commit nothing.
    pub dry_run: bool,
}

/// One partition of a reset's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PartitionReset {
    pub partition: i32,
    /// The committed offset before; null for none
    pub previous_offset: Option<i64>,
    pub new_offset: i64,
}

/// Why a reset was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// Of the group: the caller may not, the group has members, the coordinator moved.
    #[error("{0}")]
    Group(GroupError),
    /// The group has members: only they commit its offsets.
    #[error(
        "group {group:?} has active members: stop its consumers first (offsets of a live group are the members' to commit)"
    )]
    Live { group: String },
    /// Of the topic: unknown, or the caller may not.
    #[error("{0}")]
    Topic(AdminError),
    #[error("{0}")]
    Offsets(crate::error::Error),
    /// A partition the topic does not have.
    #[error("topic {topic} has partitions 0 to {last}; {partition} is not one of them")]
    UnknownPartition {
        topic: String,
        last: i32,
        partition: i64,
    },
    /// A partition whose target offset cannot be found now (no leader).
    #[error("cannot find the target offset of {topic}-{partition}: {why}")]
    NoTarget {
        topic: String,
        partition: i32,
        why: String,
    },
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Earliest => "earliest",
            Target::Latest => "latest",
            Target::Offset(_) => "offset",
            Target::Timestamp(_) => "timestamp",
        }
    }
}

/// The services a reset is built on (`Broker::offsets_reset` lends them).
pub struct Reset<'a> {
    pub groups: Groups<'a>,
    pub admin: Admin<'a>,
    pub offsets: Offsets<'a>,
    pub audit: &'a Audit,
}

/// Plans, and unless `dry_run` commits, a reset of `group`'s offsets: each partition's
/// previous and new offset. A commit is made as from outside the group (no member,
/// generation -1), which the coordinator accepts only while the group has no members.
pub async fn reset_offsets(
    s: &Reset<'_>,
    who: &Caller,
    group: &str,
    spec: ResetSpec,
) -> Result<Vec<PartitionReset>, ResetError> {
    let request = json!({
        "topic": spec.topic,
        "to": spec.to.name(),
        "offset": match spec.to { Target::Offset(o) => Some(o), _ => None },
        "timestamp_ms": match spec.to { Target::Timestamp(t) => Some(t), _ => None },
        "partitions": spec.partitions,
        "dry_run": spec.dry_run,
    });
    let action = if spec.dry_run {
        "group.reset_offsets.dry_run"
    } else {
        "group.reset_offsets"
    };
    let outcome = reset(s, who, group, &spec).await;
    let logged = match &outcome {
        // A topic of thousands of partitions: the log keeps how many moved.
        Ok(plan) if plan.len() > AUDITED_PARTITIONS => {
            Ok(json!({ "partition_count": plan.len(), "truncated": true }))
        }
        Ok(plan) => Ok(json!({ "partitions": plan })),
        Err(e) => Err(e.to_string()),
    };
    let resource = format!("group:{group}");
    s.audit.record(who, action, &resource, request, logged);
    outcome
}

async fn reset(
    s: &Reset<'_>,
    who: &Caller,
    group: &str,
    spec: &ResetSpec,
) -> Result<Vec<PartitionReset>, ResetError> {
    // DESCRIBE on the group first, as kafka-consumer-groups asks DescribeGroups before
    // ListOffsets (DESCRIBE on the topic).
    let current = (s.groups.committed(who, group).await).map_err(ResetError::Group)?;
    let topic = spec.topic.as_str();
    let state = (s.admin.fresh_topic(topic).await).map_err(ResetError::Topic)?;
    let count = state.record.partitions.len() as i32;
    let partitions: Vec<i32> = match &spec.partitions {
        None => (0..count).collect(),
        Some(ps) => (ps.iter())
            .map(|&p| {
                i32::try_from(p)
                    .ok()
                    .filter(|p| (0..count).contains(p))
                    .ok_or_else(|| ResetError::UnknownPartition {
                        topic: topic.to_string(),
                        last: count - 1,
                        partition: p,
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    let offsets = &s.offsets;
    let permit = (offsets.permit(who, Asker::Client, topic)).map_err(ResetError::Offsets)?;
    let at = |timestamp| {
        let query = Query::from_kafka(timestamp, false);
        let (offsets, permit, partitions) = (&offsets, &permit, &partitions);
        async move {
            let found = offsets.lookup_at_leaders(permit, partitions, query).await;
            let found = found
                .into_iter()
                .map(|(p, o)| (p, o.map_err(|e| leader_error(&e))));
            found.collect::<BTreeMap<i32, Result<i64, String>>>()
        }
    };
    let (starts, ends) = tokio::join!(at(-2), at(-1));
    let targets = match spec.to {
        Target::Earliest => starts.clone(),
        Target::Latest => ends.clone(),
        Target::Offset(offset) => partitions.iter().map(|p| (*p, Ok(offset))).collect(),
        Target::Timestamp(ts) => {
            let mut found = at(ts).await;
            // No record at or after the time: the end, as Kafka's tool does.
            for (p, o) in found.iter_mut() {
                if matches!(o, Ok(-1)) {
                    *o = ends.get(p).cloned().unwrap_or(Ok(-1));
                }
            }
            found
        }
    };
    let mut plan = Vec::new();
    let mut commits = Vec::new();
    let now = crate::clock::now_ms();
    for &p in &partitions {
        let no_target = |why: String| ResetError::NoTarget {
            topic: topic.to_string(),
            partition: p,
            why,
        };
        let target = match targets.get(&p) {
            Some(Ok(t)) => *t,
            Some(Err(e)) => return Err(no_target(e.clone())),
            None => return Err(no_target("no answer".to_string())),
        };
        // Kept within the log, as kafka-consumer-groups.sh clamps.
        let target = match (starts.get(&p), ends.get(&p)) {
            (Some(Ok(start)), Some(Ok(end))) => target.clamp(*start, (*end).max(*start)),
            _ => target,
        };
        plan.push(PartitionReset {
            partition: p,
            previous_offset: current.get(&(topic.to_string(), p)).map(|c| c.offset),
            new_offset: target,
        });
        let committed = CommittedOffset {
            offset: target,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp_ms: now,
        };
        commits.push(((topic.to_string(), p), committed));
    }
    if !spec.dry_run {
        // READ on the group and the topic, as Kafka's OffsetCommit.
        let outcomes = (s.groups)
            .commit(who, group, Member::OUTSIDE, commits)
            .await;
        if let Some(e) = outcomes.into_values().find_map(Result::err) {
            return Err(match e {
                // The coordinator refuses an outside commit of a group with members.
                GroupError::IllegalGeneration | GroupError::UnknownMemberId => ResetError::Live {
                    group: group.to_string(),
                },
                e => ResetError::Group(e),
            });
        }
    }
    Ok(plan)
}

/// Kafka's error name, or for a leader that cannot be reached, why.
fn leader_error(e: &crate::error::Error) -> String {
    match e {
        e @ crate::error::Error::Unreachable { .. } => e.to_string(),
        other => other.kafka_name(),
    }
}
