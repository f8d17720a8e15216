//! DescribeCluster.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::caller::Caller;

pub fn describe_cluster(
    broker: &Broker,
    who: &Caller,
    req: DescribeClusterRequest,
    listener: &str,
) -> DescribeClusterResponse {
    let mut response = DescribeClusterResponse::default();
    response.cluster_id = StrBytes::from_string(broker.identity().cluster_id.clone());
    response.controller_id = BrokerId(broker.membership().controller_id());
    response.brokers = broker
        .membership()
        .live()
        .iter()
        .filter_map(|a| {
            let (host, port) = a.address(listener)?;
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(a.node_id);
            b.host = StrBytes::from_string(host.to_string());
            b.port = port;
            b.rack = a.rack.clone().map(StrBytes::from_string);
            Some(b)
        })
        .collect();
    // KIP-430: the topic service tells them (none without DESCRIBE on the cluster).
    response.cluster_authorized_operations = if req.include_cluster_authorized_operations {
        broker.admin().cluster_operations(who)
    } else {
        super::authorized::NOT_ASKED
    };
    response
}
