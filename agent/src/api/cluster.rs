//! DescribeCluster.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

pub fn describe_cluster(broker: &Broker, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let mut response = DescribeClusterResponse::default();
    response.cluster_id = StrBytes::from_string(broker.identity().cluster_id.clone());
    response.controller_id = BrokerId(broker.membership().controller_id());
    response.brokers = broker
        .membership()
        .live()
        .into_iter()
        .map(|a| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(a.node_id);
            b.host = StrBytes::from_string(a.host);
            b.port = a.port;
            b.rack = a.rack.map(StrBytes::from_string);
            b
        })
        .collect();
    response.cluster_authorized_operations = super::authorized::if_asked(
        req.include_cluster_authorized_operations,
        super::authorized::CLUSTER,
    );
    response
}
