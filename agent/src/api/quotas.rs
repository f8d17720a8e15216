//! DescribeClientQuotas and AlterClientQuotas (KIP-546): the quotas `kafka-configs
//! --entity-type users|clients|ips` and the admin clients set, kept in the metastore
//! (`quotas.rs` there) and enforced by every agent (`crate::quota`). Whether the caller
//! may read or change them is checked before these run (`gate.rs`: DESCRIBE_CONFIGS or
//! ALTER_CONFIGS on the cluster).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, alter_client_quotas_response, describe_client_quotas_response,
};
use kafka_protocol::protocol::StrBytes;
use strata_metastore::{QuotaChange, QuotaEntity};

use crate::broker::Broker;
use crate::quota::rules;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// A filter component's match (Kafka's `match_type`).
enum Match {
    /// 0: this name.
    Exactly(String),
    /// 1: the type's default.
    Default,
    /// 2: any entity of the type, the default included (Kafka's `ofEntityType`).
    Any,
}

pub async fn describe(
    broker: &Broker,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let mut response = DescribeClientQuotasResponse::default();
    let mut filter: Vec<(String, Match)> = Vec::new();
    for c in &req.components {
        let kind = c.entity_type.to_string();
        if ![rules::USER, rules::CLIENT_ID, rules::IP].contains(&kind.as_str()) {
            response.error_code = ResponseError::InvalidRequest.code();
            response.error_message = Some(s(format!("Custom entity type '{kind}' not supported")));
            return response;
        }
        let m = match (c.match_type, &c._match) {
            (0, Some(name)) => Match::Exactly(name.to_string()),
            (1, _) => Match::Default,
            (2, _) => Match::Any,
            (t, _) => {
                response.error_code = ResponseError::InvalidRequest.code();
                response.error_message = Some(s(format!("unknown match type {t}")));
                return response;
            }
        };
        if filter.iter().any(|(k, _)| *k == kind) {
            response.error_code = ResponseError::InvalidRequest.code();
            response.error_message = Some(s(format!(
                "Entity type {kind} cannot appear more than once in the filter."
            )));
            return response;
        }
        filter.push((kind, m));
    }
    if filter.iter().any(|(k, _)| k == rules::IP) && filter.len() > 1 {
        response.error_code = ResponseError::InvalidRequest.code();
        response.error_message = Some(s(
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component.",
        ));
        return response;
    }
    // Asked here, not from the agent's copy: what a tool wrote a moment ago through
    // another agent is shown.
    if let Err(e) = broker.quotas().refresh().await {
        tracing::warn!(error = %e, "cannot re-read client quotas; describing the ones read before");
    }
    let index = broker.quotas().snapshot();
    let mut entries: Vec<describe_client_quotas_response::EntryData> = index
        .entries()
        .filter(|(entity, _)| {
            let matched = filter.iter().all(|(kind, m)| match (entity.get(kind), m) {
                (Some(Some(n)), Match::Exactly(want)) => n == want,
                (Some(None), Match::Default) => true,
                (Some(_), Match::Any) => true,
                _ => false,
            });
            matched && (!req.strict || entity.len() == filter.len())
        })
        .map(|(entity, values)| {
            let mut e = describe_client_quotas_response::EntryData::default();
            e.entity = entity
                .iter()
                .map(|(kind, name)| {
                    let mut d = describe_client_quotas_response::EntityData::default();
                    d.entity_type = s(kind.clone());
                    d.entity_name = name.clone().map(s);
                    d
                })
                .collect();
            e.values = values
                .iter()
                .map(|(key, value)| {
                    let mut v = describe_client_quotas_response::ValueData::default();
                    v.key = s(key.clone());
                    v.value = *value;
                    v
                })
                .collect();
            e
        })
        .collect();
    entries.sort_by_key(|e| {
        e.entity
            .iter()
            .map(|d| {
                (
                    d.entity_type.to_string(),
                    d.entity_name.as_ref().map(|n| n.to_string()),
                )
            })
            .collect::<Vec<_>>()
    });
    response.entries = Some(entries);
    response
}

pub async fn alter(broker: &Broker, req: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    let mut response = AlterClientQuotasResponse::default();
    let mut changes: Vec<QuotaChange> = Vec::new();
    let mut results: Vec<(alter_client_quotas_response::EntryData, bool)> = Vec::new();
    for entry in &req.entries {
        let mut result = alter_client_quotas_response::EntryData::default();
        result.entity = entry
            .entity
            .iter()
            .map(|d| {
                let mut e = alter_client_quotas_response::EntityData::default();
                e.entity_type = d.entity_type.clone();
                e.entity_name = d.entity_name.clone();
                e
            })
            .collect();
        let entity: QuotaEntity = entry
            .entity
            .iter()
            .map(|d| {
                (
                    d.entity_type.to_string(),
                    d.entity_name.as_ref().map(|n| n.to_string()),
                )
            })
            .collect();
        let ops: Vec<(String, Option<f64>)> = entry
            .ops
            .iter()
            .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
            .collect();
        let checked = if entity.len() != entry.entity.len() {
            Err(rules::Invalid("an entity type appears twice".into()))
        } else {
            rules::validate(&entity, &ops)
        };
        match checked {
            Ok(()) => {
                changes.push((entity, ops));
                results.push((result, true));
            }
            Err(e) => {
                result.error_code = ResponseError::InvalidRequest.code();
                result.error_message = Some(s(e.0));
                results.push((result, false));
            }
        }
    }
    let stored = if req.validate_only || changes.is_empty() {
        Ok(())
    } else {
        let stored = broker.metastore().alter_quotas(changes).await;
        if let Err(e) = broker.quotas().refresh().await {
            tracing::warn!(error = %e, "cannot re-read client quotas after a change; the watch will");
        }
        stored
    };
    response.entries = results
        .into_iter()
        .map(|(mut r, valid)| {
            if valid && let Err(e) = &stored {
                tracing::warn!(error = %e, "client quota change failed in the metastore");
                r.error_code = ResponseError::UnknownServerError.code();
                r.error_message = Some(s(format!("the metastore failed: {e}")));
            }
            r
        })
        .collect();
    response
}
