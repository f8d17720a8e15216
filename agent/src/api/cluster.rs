//! DescribeCluster.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

pub fn describe_cluster(broker: &Broker, _req: DescribeClusterRequest) -> DescribeClusterResponse {
    let mut response = DescribeClusterResponse::default();
    response.cluster_id = StrBytes::from_string(broker.cluster_id.clone());
    response.controller_id = BrokerId(broker.node_id);
    let mut b = DescribeClusterBroker::default();
    b.broker_id = BrokerId(broker.node_id);
    b.host = StrBytes::from_string(broker.advertised_host.clone());
    b.port = broker.advertised_port;
    response.brokers = vec![b];
    response.cluster_authorized_operations = i32::MIN;
    response
}
