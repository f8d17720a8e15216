//! CreateTopics, DeleteTopics, CreatePartitions, and the topic creation shared with
//! Metadata's auto-creation. Validation follows Kafka's rules and error codes.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strata_metastore::NewTopic;
use uuid::Uuid;

use super::errors::ApiError;
use crate::broker::Broker;
use crate::config::MAX_PARTITIONS_PER_TOPIC;
use crate::replicas::TopicState;
use crate::topic_config::{self, TopicConfig};

/// Kafka's longest topic name.
const MAX_NAME_LENGTH: usize = 249;

/// Checks a topic name the way Kafka does (INVALID_TOPIC_EXCEPTION).
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let invalid = |why: String| Err(ApiError::new(ResponseError::InvalidTopicException, why));
    if name.is_empty() {
        return invalid("Topic name is illegal, it can't be empty".to_string());
    }
    if name == "." || name == ".." {
        return invalid("Topic name cannot be \".\" or \"..\"".to_string());
    }
    if name.len() > MAX_NAME_LENGTH {
        return invalid(format!(
            "Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return invalid(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// A topic to create, with Kafka's `-1` meaning "the broker's default".
#[derive(Debug, Clone)]
pub struct NewTopicSpec {
    pub name: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    /// Explicit replica lists by partition index.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: BTreeMap<String, String>,
}

impl NewTopicSpec {
    pub fn defaults() -> Self {
        NewTopicSpec {
            name: String::new(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: Vec::new(),
            configs: BTreeMap::new(),
        }
    }
}

/// What a successful (or validated-only) creation resolved to.
pub struct Created {
    pub state: Option<Arc<TopicState>>,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub config: TopicConfig,
}

/// The live agents to place replicas on, in placement order: alternating between racks
/// (each rack's agents by node id, racks by name; agents without a rack form one
/// group), as Kafka's rack-aware assignment does. Placement is rare; read the freshest
/// view.
async fn live_brokers(broker: &Broker) -> Vec<i32> {
    if let Err(e) = broker.membership().refresh().await {
        tracing::warn!(error = %e, "cannot read the live agents; placing on the last known");
    }
    rack_alternated(&broker.membership().live())
}

fn rack_alternated(live: &[strata_metastore::AgentRecord]) -> Vec<i32> {
    let mut racks: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for a in live {
        racks.entry(a.rack.as_deref()).or_default().push(a.node_id);
    }
    for nodes in racks.values_mut() {
        nodes.sort_unstable();
    }
    let mut order = Vec::with_capacity(live.len());
    for i in 0.. {
        let before = order.len();
        order.extend(racks.values().filter_map(|nodes| nodes.get(i)));
        if order.len() == before {
            break;
        }
    }
    order
}

/// Replica lists for partitions `first..first + count`: partition *p* is led by the
/// *p*-th agent of `order` and copied to the next `rf - 1`, so leaders spread evenly and,
/// with racks, a partition's replicas sit on different racks where there are enough.
fn place(order: &[i32], first: usize, count: usize, rf: usize) -> Vec<Vec<i32>> {
    (first..first + count)
        .map(|p| (0..rf).map(|r| order[(p + r) % order.len()]).collect())
        .collect()
}

/// Refuses a topic of more than [`MAX_PARTITIONS_PER_TOPIC`] partitions, before
/// anything is placed or allocated for it.
fn check_partition_count(count: i32) -> Result<(), ApiError> {
    if count > MAX_PARTITIONS_PER_TOPIC {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!(
                "Number of partitions {count} is above the limit of {MAX_PARTITIONS_PER_TOPIC} partitions per topic."
            ),
        ));
    }
    Ok(())
}

fn check_replicas(live: &[i32], replicas: &[i32]) -> Result<(), ApiError> {
    if replicas.is_empty() {
        return Err(ApiError::new(
            ResponseError::InvalidReplicaAssignment,
            "A replica list may not be empty",
        ));
    }
    let mut seen = replicas.to_vec();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != replicas.len() {
        return Err(ApiError::new(
            ResponseError::InvalidReplicaAssignment,
            "A replica list names a broker twice",
        ));
    }
    if let Some(unknown) = replicas.iter().find(|r| !live.contains(r)) {
        return Err(ApiError::new(
            ResponseError::InvalidReplicaAssignment,
            format!("Broker {unknown} in the replica assignment is not alive"),
        ));
    }
    Ok(())
}

/// Validates and (unless `validate_only`) creates a topic, then serves it.
pub async fn create_topic(
    broker: &Broker,
    spec: NewTopicSpec,
    validate_only: bool,
) -> Result<Option<Arc<TopicState>>, ApiError> {
    plan_and_create(broker, spec, validate_only)
        .await
        .map(|c| c.state)
}

async fn plan_and_create(
    broker: &Broker,
    spec: NewTopicSpec,
    validate_only: bool,
) -> Result<Created, ApiError> {
    validate_topic_name(&spec.name)?;
    if broker.replicas().topic(&spec.name).is_some() {
        return Err(ApiError::new(
            ResponseError::TopicAlreadyExists,
            format!("Topic '{}' already exists.", spec.name),
        ));
    }
    let live = live_brokers(broker).await;
    let assignments: Vec<Vec<i32>> = if spec.assignments.is_empty() {
        let partitions = match spec.num_partitions {
            -1 => broker.settings().topic_defaults.num_partitions,
            n if n > 0 => n,
            n => {
                return Err(ApiError::new(
                    ResponseError::InvalidPartitions,
                    format!("Number of partitions was set to an invalid non-positive value: {n}."),
                ));
            }
        };
        check_partition_count(partitions)?;
        let rf = match spec.replication_factor {
            -1 => broker.settings().topic_defaults.replication_factor,
            n if n > 0 => n,
            n => {
                return Err(ApiError::new(
                    ResponseError::InvalidReplicationFactor,
                    format!(
                        "Replication factor must be larger than 0, or -1 to use the default value, not {n}."
                    ),
                ));
            }
        };
        if rf as usize > live.len() {
            return Err(ApiError::new(
                ResponseError::InvalidReplicationFactor,
                format!(
                    "Replication factor: {rf} larger than available brokers: {}.",
                    live.len()
                ),
            ));
        }
        place(&live, 0, partitions as usize, rf as usize)
    } else {
        if spec.num_partitions != -1 || spec.replication_factor != -1 {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
            ));
        }
        check_partition_count(i32::try_from(spec.assignments.len()).unwrap_or(i32::MAX))?;
        let mut by_index = spec.assignments.clone();
        by_index.sort_by_key(|(p, _)| *p);
        for (i, (p, replicas)) in by_index.iter().enumerate() {
            if *p != i as i32 {
                return Err(ApiError::new(
                    ResponseError::InvalidReplicaAssignment,
                    "Partitions should be a consecutive 0-based integer sequence",
                ));
            }
            check_replicas(&live, replicas)?;
            if replicas.len() != by_index[0].1.len() {
                return Err(ApiError::new(
                    ResponseError::InvalidReplicaAssignment,
                    "All partitions should have the same number of replicas",
                ));
            }
        }
        by_index.into_iter().map(|(_, r)| r).collect()
    };
    topic_config::validate_all(&spec.configs)
        .map_err(|m| ApiError::new(ResponseError::InvalidConfig, m))?;
    let config = TopicConfig::resolve(&broker.settings().topic_defaults.configs, &spec.configs);
    broker
        .replicas()
        .check_file_budget(&assignments)
        .map_err(|why| ApiError::new(ResponseError::InvalidPartitions, why))?;
    let num_partitions = assignments.len() as i32;
    let replication_factor = assignments.first().map_or(0, Vec::len) as i16;
    if validate_only {
        return Ok(Created {
            state: None,
            num_partitions,
            replication_factor,
            config,
        });
    }
    broker
        .metastore()
        .create_topic(NewTopic {
            name: spec.name.clone(),
            replication_factor,
            configs: spec.configs,
            assignments,
        })
        .await?;
    let state = match broker.replicas().sync_topic(&spec.name).await {
        Ok(Some(state)) => state,
        Ok(None) => return Err(super::errors::vanished(&spec.name)),
        Err(e) => {
            // The topic cannot be served here: take it back out of the metastore, so that
            // a failed creation leaves nothing behind (sync_topic closed what it opened).
            tracing::warn!(topic = %spec.name, error = %e, "created topic cannot be served; removing it");
            if let Err(d) = broker.metastore().delete_topic(&spec.name).await {
                tracing::error!(topic = %spec.name, error = %d, "cannot remove a topic that failed to open");
            } else if let Err(d) = broker.replicas().sync_topic(&spec.name).await {
                tracing::warn!(topic = %spec.name, error = %d, "cannot forget a topic that failed to open");
            }
            return Err(e.into());
        }
    };
    tracing::info!(topic = %spec.name, partitions = num_partitions, "created topic");
    Ok(Created {
        state: Some(state),
        num_partitions,
        replication_factor,
        config,
    })
}

pub async fn create_topics(
    broker: &Broker,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut response = CreateTopicsResponse::default();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut result = CreatableTopicResult::default();
        result.name = t.name.clone();
        let mut configs = BTreeMap::new();
        let mut duplicate = None;
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    if configs.insert(c.name.to_string(), v.to_string()).is_some() {
                        duplicate = Some(c.name.to_string());
                    }
                }
                None => {
                    duplicate.get_or_insert_with(|| format!("{} has a null value", c.name));
                }
            }
        }
        let spec = NewTopicSpec {
            name,
            num_partitions: t.num_partitions,
            replication_factor: t.replication_factor,
            assignments: t
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
            configs,
        };
        let outcome = match duplicate {
            Some(d) => Err(ApiError::new(
                ResponseError::InvalidConfig,
                format!("Invalid config: {d}"),
            )),
            None => plan_and_create(broker, spec, req.validate_only).await,
        };
        match outcome {
            Ok(created) => {
                if version >= 5 {
                    result.num_partitions = created.num_partitions;
                    result.replication_factor = created.replication_factor;
                }
                if let Some(state) = created.state.as_ref().filter(|_| version >= 7) {
                    result.topic_id = Uuid::from_bytes(state.record.id);
                }
                if version >= 5 {
                    result.configs = Some(
                        created
                            .config
                            .entries()
                            .map(|(name, value, source)| {
                                let mut c = CreatableTopicConfigs::default();
                                c.name = StrBytes::from_static_str(name);
                                c.value = Some(StrBytes::from_string(value.to_string()));
                                c.config_source = source as i8;
                                c
                            })
                            .collect(),
                    );
                }
            }
            Err(e) => {
                result.error_code = e.code();
                result.error_message = Some(StrBytes::from_string(e.message));
            }
        }
        response.topics.push(result);
    }
    response
}

pub async fn delete_topics(
    broker: &Broker,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let wanted: Vec<(Option<String>, Uuid)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let mut response = DeleteTopicsResponse::default();
    for (name, id) in wanted {
        let mut result = DeletableTopicResult::default();
        result.name = name.clone().map(|n| TopicName(StrBytes::from_string(n)));
        result.topic_id = id;
        let found = match &name {
            // The metastore is the authority: a topic this agent could not serve can
            // still be deleted.
            Some(n) => match broker.replicas().topic(n) {
                Some(t) => Ok((t.record.name.clone(), t.record.id)),
                None => match broker.metastore().topic(n).await {
                    Ok(Some(r)) => Ok((r.name, r.id)),
                    Ok(None) => Err(ApiError::new(
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic-partition.",
                    )),
                    Err(e) => Err(ApiError::from(e)),
                },
            },
            None => broker
                .replicas()
                .topic_by_id(id.as_bytes())
                .map(|t| (t.record.name.clone(), t.record.id))
                .ok_or_else(|| {
                    ApiError::new(
                        ResponseError::UnknownTopicId,
                        "This server does not host this topic ID.",
                    )
                }),
        };
        let outcome = match found {
            Ok((name, topic_id)) => {
                result.name = Some(TopicName(StrBytes::from_string(name.clone())));
                if version >= 6 {
                    result.topic_id = Uuid::from_bytes(topic_id);
                }
                match broker.metastore().delete_topic(&name).await {
                    Ok(_) => broker
                        .replicas()
                        .sync_topic(&name)
                        .await
                        .map(drop)
                        .map_err(ApiError::from),
                    Err(e) => Err(ApiError::from(e)),
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            result.error_code = e.code();
            if version >= 5 {
                result.error_message = Some(StrBytes::from_string(e.message));
            }
        }
        response.responses.push(result);
    }
    response
}

pub async fn create_partitions(
    broker: &Broker,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut response = CreatePartitionsResponse::default();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut result = CreatePartitionsTopicResult::default();
        result.name = t.name.clone();
        let outcome: Result<(), ApiError> = async {
            let topic = broker.replicas().topic(&name).ok_or_else(|| {
                ApiError::new(ResponseError::UnknownTopicOrPartition, format!("The topic '{name}' does not exist."))
            })?;
            let current = topic.partitions.len() as i32;
            check_partition_count(t.count)?;
            if t.count <= current {
                return Err(ApiError::new(
                    ResponseError::InvalidPartitions,
                    format!("Topic currently has {current} partitions, which is higher than or equal to the requested {}.", t.count),
                ));
            }
            let added = (t.count - current) as usize;
            let rf = topic.record.replication_factor.max(1) as usize;
            let live = live_brokers(broker).await;
            let assignments: Vec<Vec<i32>> = match t.assignments.as_ref().filter(|a| !a.is_empty()) {
                Some(a) => {
                    if a.len() != added {
                        return Err(ApiError::new(
                            ResponseError::InvalidReplicaAssignment,
                            format!("Increasing the number of partitions by {added} but {} assignments provided.", a.len()),
                        ));
                    }
                    let lists: Vec<Vec<i32>> = a.iter().map(|x| x.broker_ids.iter().map(|b| b.0).collect()).collect();
                    for l in &lists {
                        check_replicas(&live, l)?;
                        if l.len() != rf {
                            return Err(ApiError::new(
                                ResponseError::InvalidReplicaAssignment,
                                format!("Inconsistent replication factor between partitions, partition 0 has {rf} while the new assignment has {}.", l.len()),
                            ));
                        }
                    }
                    lists
                }
                None if rf > live.len() => {
                    return Err(ApiError::new(
                        ResponseError::InvalidReplicationFactor,
                        format!("Replication factor: {rf} larger than available brokers: {}.", live.len()),
                    ));
                }
                None => place(&live, current as usize, added, rf),
            };
            broker
                .replicas().check_file_budget(&assignments)
                .map_err(|why| ApiError::new(ResponseError::InvalidPartitions, why))?;
            if req.validate_only {
                return Ok(());
            }
            broker.metastore().add_partitions(&name, current as usize, assignments).await?;
            broker.replicas().sync_topic(&name).await?;
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            result.error_code = e.code();
            result.error_message = Some(StrBytes::from_string(e.message));
        }
        response.results.push(result);
    }
    response
}

#[cfg(test)]
mod placement_tests {
    use super::*;

    fn agent(node_id: i32, rack: Option<&str>) -> strata_metastore::AgentRecord {
        strata_metastore::AgentRecord {
            node_id,
            host: "127.0.0.1".to_string(),
            port: 9092,
            http: String::new(),
            rack: rack.map(str::to_string),
            incarnation: String::new(),
            data_dir_id: String::new(),
            lease_until_ms: 0,
        }
    }

    #[test]
    fn replicas_spread_leaders_and_racks() {
        let live = [
            agent(1, Some("a")),
            agent(2, Some("a")),
            agent(3, Some("b")),
            agent(4, Some("b")),
        ];
        let order = rack_alternated(&live);
        assert_eq!(order, vec![1, 3, 2, 4]);
        let lists = place(&order, 0, 4, 2);
        assert_eq!(lists, vec![vec![1, 3], vec![3, 2], vec![2, 4], vec![4, 1]]);
        for l in &lists {
            let racks: Vec<_> = l
                .iter()
                .map(|n| live[(*n - 1) as usize].rack.clone())
                .collect();
            assert_ne!(racks[0], racks[1], "replicas {l:?} share a rack");
        }
        // No racks: node order, round robin.
        let plain = [agent(1, None), agent(2, None), agent(3, None)];
        assert_eq!(
            place(&rack_alternated(&plain), 4, 2, 3),
            vec![vec![2, 3, 1], vec![3, 1, 2]]
        );
    }
}
