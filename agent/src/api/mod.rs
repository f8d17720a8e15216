//! The Kafka APIs, one module per family, and the dispatch from a decoded request to its
//! handler.
//!
//! Dispatch is synchronous up to the point where a handler must wait: a produce request
//! appends its batches before [`dispatch`] returns, so requests pipelined on one
//! connection are appended in the order they arrived, while their waits for durability
//! overlap (which is what lets one fsync cover many of them).

mod acls;
mod authorized;
mod cluster;
pub(crate) mod configs;
mod fetch;
pub(crate) mod groups;
mod leader_epochs;
pub(crate) mod list_offsets;
pub(crate) mod metadata;
mod produce;
mod producer;
mod quotas;
mod reassign;
mod records;
mod topic_ids;
mod topics;
mod transactions;
mod users;
pub mod versions;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::broker::Broker;
use crate::context::RequestContext;

/// The response to one request, once it is ready; `None` for requests that get no
/// response (produce with acks=0).
pub type Reply = BoxFuture<'static, Option<ResponseKind>>;

fn ready(response: impl Into<ResponseKind>) -> Reply {
    let response = response.into();
    async move { Some(response) }.boxed()
}

/// Starts handling one request in its context. The caller has checked that the version
/// is supported; `None` means the API has no handler here, and the connection should be
/// closed. Who may do what the services decide (each takes the [`caller`]), and they
/// audit what they change.
pub async fn dispatch(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    mut request: RequestKind,
) -> Option<Reply> {
    let unknown = topic_ids::resolve(broker, &mut request, ctx.api_version);
    let reply = handle(broker, ctx, request).await?;
    Some(match unknown {
        None => reply,
        Some(unknown) => {
            let version = ctx.api_version;
            reply
                .map(move |response| {
                    response.map(|mut r| {
                        unknown.answer(&mut r, version);
                        r
                    })
                })
                .boxed()
        }
    })
}

/// Who sent a request, as the services take it.
pub(crate) fn caller(ctx: &RequestContext) -> crate::caller::Caller {
    crate::caller::Caller {
        principal: ctx.connection.principal.clone(),
        address: Some(ctx.connection.peer),
        via: "kafka",
    }
}

/// [`dispatch`]: one request to its handler.
async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: RequestKind) -> Option<Reply> {
    let version = ctx.api_version;
    let b = Arc::clone(broker);
    let client_id = ctx.client_id.clone();
    let client_host = ctx.client_host();
    let deadline = ctx.deadline;
    let who = caller(ctx);
    Some(match request {
        RequestKind::ApiVersions(_) => ready(versions::api_versions(0)),
        RequestKind::Produce(req) => {
            let refusals = &ctx.connection.produce_refusals;
            produce::produce(broker, &who, refusals, req, version, deadline).await
        }
        RequestKind::Fetch(req) => {
            async move { Some(fetch::fetch(&b, &who, req, version, deadline).await.into()) }.boxed()
        }
        RequestKind::ListOffsets(req) => async move {
            Some(
                list_offsets::list_offsets(&b, &who, req, version)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::DeleteRecords(req) => {
            async move { Some(records::delete_records(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::Metadata(req) => {
            let listener = ctx.connection.listener.name.clone();
            async move {
                Some(
                    metadata::metadata(&b, &who, req, version, &listener)
                        .await
                        .into(),
                )
            }
            .boxed()
        }
        RequestKind::CreateTopics(req) => {
            async move { Some(topics::create_topics(&b, &who, req, version).await.into()) }.boxed()
        }
        RequestKind::DeleteTopics(req) => {
            async move { Some(topics::delete_topics(&b, &who, req, version).await.into()) }.boxed()
        }
        RequestKind::CreatePartitions(req) => {
            async move { Some(topics::create_partitions(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::DescribeConfigs(req) => {
            ready(configs::describe_configs(broker, &who, req, version))
        }
        RequestKind::AlterConfigs(req) => {
            async move { Some(configs::alter_configs(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::IncrementalAlterConfigs(req) => async move {
            Some(
                configs::incremental_alter_configs(&b, &who, req)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::DescribeCluster(req) => ready(cluster::describe_cluster(
            broker,
            &who,
            req,
            &ctx.connection.listener.name,
        )),
        RequestKind::FindCoordinator(req) => ready(groups::find_coordinator(
            broker,
            &who,
            req,
            version,
            &ctx.connection.listener.name,
        )),
        RequestKind::JoinGroup(req) => async move {
            Some(
                groups::join_group(&b, &who, req, version, &client_id, &client_host)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::SyncGroup(req) => {
            async move { Some(groups::sync_group(&b, &who, req, version).await.into()) }.boxed()
        }
        RequestKind::Heartbeat(req) => ready(groups::heartbeat(broker, &who, req)),
        RequestKind::LeaveGroup(req) => ready(groups::leave_group(broker, &who, req, version)),
        RequestKind::OffsetCommit(req) => {
            async move { Some(groups::offset_commit(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::OffsetFetch(req) => {
            async move { Some(groups::offset_fetch(&b, &who, req, version).await.into()) }.boxed()
        }
        RequestKind::ListGroups(req) => {
            async move { Some(groups::list_groups(&b, &who, req, version).await.into()) }.boxed()
        }
        RequestKind::DescribeGroups(req) => {
            async move { Some(groups::describe_groups(&b, &who, req, version).await.into()) }
                .boxed()
        }
        RequestKind::DeleteGroups(req) => {
            async move { Some(groups::delete_groups(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::OffsetDelete(req) => {
            async move { Some(groups::offset_delete(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::AlterPartitionReassignments(req) => async move {
            Some(
                reassign::alter_partition_reassignments(&b, &who, req)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::ListPartitionReassignments(req) => async move {
            Some(
                reassign::list_partition_reassignments(&b, &who, req)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::ElectLeaders(req) => {
            async move { Some(reassign::elect_leaders(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::OffsetForLeaderEpoch(req) => {
            ready(leader_epochs::offset_for_leader_epoch(broker, &who, req))
        }
        RequestKind::InitProducerId(req) => async move {
            Some(
                producer::init_producer_id(&b, &who, req, version)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::AddPartitionsToTxn(req) => async move {
            Some(
                transactions::add_partitions_to_txn(&b, &who, req, version)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::AddOffsetsToTxn(req) => async move {
            Some(
                transactions::add_offsets_to_txn(&b, &who, req, version)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::EndTxn(req) => {
            async move { Some(transactions::end_txn(&b, &who, req, version).await.into()) }.boxed()
        }
        RequestKind::TxnOffsetCommit(req) => async move {
            Some(
                transactions::txn_offset_commit(&b, &who, req, version)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::WriteTxnMarkers(req) => {
            async move { Some(transactions::write_txn_markers(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::DescribeTransactions(req) => async move {
            Some(
                transactions::describe_transactions(&b, &who, req)
                    .await
                    .into(),
            )
        }
        .boxed(),
        RequestKind::ListTransactions(req) => {
            async move { Some(transactions::list_transactions(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::DescribeProducers(req) => {
            ready(transactions::describe_producers(broker, &who, req))
        }
        RequestKind::DescribeUserScramCredentials(req) => {
            async move { Some(users::describe(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::AlterUserScramCredentials(req) => {
            async move { Some(users::alter(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::DescribeClientQuotas(req) => {
            async move { Some(quotas::describe(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::AlterClientQuotas(req) => {
            async move { Some(quotas::alter(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::CreateAcls(req) => {
            async move { Some(acls::create_acls(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::DescribeAcls(req) => {
            async move { Some(acls::describe_acls(&b, &who, req).await.into()) }.boxed()
        }
        RequestKind::DeleteAcls(req) => {
            async move { Some(acls::delete_acls(&b, &who, req).await.into()) }.boxed()
        }
        _ => return None,
    })
}
