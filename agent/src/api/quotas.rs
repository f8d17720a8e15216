//! DescribeClientQuotas and AlterClientQuotas (KIP-546): the quotas `kafka-configs
//! --entity-type users|clients|ips` and the admin clients set, translated to the
//! security service (`service/security.rs`) and enforced by every agent
//! (`crate::quota`). The service decides whether the caller may (DESCRIBE_CONFIGS or
//! ALTER_CONFIGS on the cluster), and audits the changes.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, alter_client_quotas_response, describe_client_quotas_response,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;
use crate::service::security::{self, Action, EntityMatch, QuotaAlteration};

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub async fn describe(
    broker: &Broker,
    who: &Caller,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let mut response = DescribeClientQuotasResponse::default();
    // A caller who may not is told so whatever else is wrong (Kafka's order).
    if let Err(e) = security::authorize(broker.security(), who, Action::DescribeQuotas) {
        let e = ApiError::from(&e);
        response.error_code = e.code();
        response.error_message = Some(s(e.message));
        return response;
    }
    let mut filter: Vec<(String, EntityMatch)> = Vec::new();
    for c in &req.components {
        let m = match (c.match_type, &c._match) {
            (0, Some(name)) => EntityMatch::Exactly(name.to_string()),
            (1, _) => EntityMatch::Default,
            (2, _) => EntityMatch::Any,
            (t, _) => {
                response.error_code = ResponseError::InvalidRequest.code();
                response.error_message = Some(s(format!("unknown match type {t}")));
                return response;
            }
        };
        filter.push((c.entity_type.to_string(), m));
    }
    let entries = match security::quotas(broker.security(), who, &filter, req.strict).await {
        Ok(entries) => entries,
        Err(e) => {
            let e = ApiError::from(&e);
            response.error_code = e.code();
            response.error_message = Some(s(e.message));
            return response;
        }
    };
    let entries = entries
        .into_iter()
        .map(|(entity, values)| {
            let mut e = describe_client_quotas_response::EntryData::default();
            e.entity = entity
                .into_iter()
                .map(|(kind, name)| {
                    let mut d = describe_client_quotas_response::EntityData::default();
                    d.entity_type = s(kind);
                    d.entity_name = name.map(s);
                    d
                })
                .collect();
            e.values = values
                .into_iter()
                .map(|(key, value)| {
                    let mut v = describe_client_quotas_response::ValueData::default();
                    v.key = s(key);
                    v.value = value;
                    v
                })
                .collect();
            e
        })
        .collect();
    response.entries = Some(entries);
    response
}

pub async fn alter(
    broker: &Broker,
    who: &Caller,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let alterations = (req.entries.iter())
        .map(|entry| QuotaAlteration {
            entity: (entry.entity.iter())
                .map(|d| {
                    let name = d.entity_name.as_ref().map(|n| n.to_string());
                    (d.entity_type.to_string(), name)
                })
                .collect(),
            ops: (entry.ops.iter())
                .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                .collect(),
        })
        .collect();
    let outcomes =
        security::alter_quotas(broker.security(), who, alterations, req.validate_only).await;
    let mut response = AlterClientQuotasResponse::default();
    response.entries = (req.entries.into_iter().zip(outcomes))
        .map(|(entry, outcome)| {
            let mut result = alter_client_quotas_response::EntryData::default();
            result.entity = (entry.entity.into_iter())
                .map(|d| {
                    let mut e = alter_client_quotas_response::EntityData::default();
                    e.entity_type = d.entity_type;
                    e.entity_name = d.entity_name;
                    e
                })
                .collect();
            if let Err(e) = outcome {
                let e = ApiError::from(&e);
                result.error_code = e.code();
                result.error_message = Some(s(e.message));
            }
            result
        })
        .collect();
    response
}
