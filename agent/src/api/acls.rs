//! CreateAcls, DescribeAcls and DeleteAcls: the bindings the authorizer enforces, kept
//! in the metastore (`acls.rs` there). Whether the caller may change or read them is
//! checked before these run (`gate.rs`: ALTER or DESCRIBE on the cluster).
//!
//! As Kafka: without an authorizer all three answer SECURITY_DISABLED; an invalid
//! binding or filter is INVALID_REQUEST with the reason, and the others in the request
//! go ahead. The agent that stored a change reads the bindings again before it answers,
//! so the caller's next request here is decided by them; other agents follow within
//! moments (a metastore watch).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_metastore::AclRecord;

use super::errors::ApiError;
use crate::authz::rules::{self, AclFilter};
use crate::broker::Broker;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn disabled() -> ApiError {
    ApiError::new(
        ResponseError::SecurityDisabled,
        "no authorizer is configured (set authorizer = \"acl\")",
    )
}

fn metastore_error(e: strata_metastore::Error) -> ApiError {
    tracing::warn!(error = %e, "ACL change failed in the metastore");
    ApiError::new(
        ResponseError::UnknownServerError,
        format!("the metastore failed: {e}"),
    )
}

/// Reads the bindings again after a change, so this agent decides by them at once.
async fn refresh(broker: &Broker) {
    if let Err(e) = broker.authorizer().refresh().await {
        tracing::warn!(error = %e, "cannot re-read ACLs after a change; the watch will");
    }
}

pub async fn create_acls(broker: &Broker, req: CreateAclsRequest) -> CreateAclsResponse {
    let mut response = CreateAclsResponse::default();
    let checked: Vec<Result<AclRecord, ApiError>> = req
        .creations
        .into_iter()
        .map(|c| {
            if !broker.authorizer().is_enabled() {
                return Err(disabled());
            }
            rules::binding(AclRecord {
                resource_type: c.resource_type,
                resource_name: c.resource_name.to_string(),
                pattern_type: c.resource_pattern_type,
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: c.operation,
                permission: c.permission_type,
            })
            .map_err(|e| ApiError::new(ResponseError::InvalidRequest, e.0))
        })
        .collect();
    let valid: Vec<AclRecord> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let stored = if valid.is_empty() {
        Ok(())
    } else {
        let stored = broker.metastore().create_acls(valid).await;
        refresh(broker).await;
        stored.map_err(metastore_error)
    };
    response.results = checked
        .into_iter()
        .map(|c| {
            let mut r = AclCreationResult::default();
            if let Err(e) = c.and(stored.clone()) {
                r.error_code = e.code();
                r.error_message = Some(s(e.message));
            }
            r
        })
        .collect();
    response
}

#[allow(clippy::too_many_arguments)]
fn filter(
    resource_type: i8,
    resource_name: &Option<StrBytes>,
    pattern_type: i8,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, ApiError> {
    AclFilter::from_codes(
        resource_type,
        resource_name.as_ref().map(|n| n.to_string()),
        pattern_type,
        principal.as_ref().map(|p| p.to_string()),
        host.as_ref().map(|h| h.to_string()),
        operation,
        permission,
    )
    .map_err(|e| ApiError::new(ResponseError::InvalidRequest, e.0))
}

pub async fn describe_acls(broker: &Broker, req: DescribeAclsRequest) -> DescribeAclsResponse {
    let mut response = DescribeAclsResponse::default();
    let found = async {
        if !broker.authorizer().is_enabled() {
            return Err(disabled());
        }
        let filter = filter(
            req.resource_type_filter,
            &req.resource_name_filter,
            req.pattern_type_filter,
            &req.principal_filter,
            &req.host_filter,
            req.operation,
            req.permission_type,
        )?;
        let all = broker.metastore().acls().await.map_err(metastore_error)?;
        Ok(all
            .into_iter()
            .filter(|a| filter.matches(a))
            .collect::<Vec<_>>())
    }
    .await;
    match found {
        Ok(acls) => {
            let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
            for a in acls {
                let mut d = AclDescription::default();
                d.principal = s(a.principal);
                d.host = s(a.host);
                d.operation = a.operation;
                d.permission_type = a.permission;
                by_resource
                    .entry((a.resource_type, a.resource_name, a.pattern_type))
                    .or_default()
                    .push(d);
            }
            response.resources = by_resource
                .into_iter()
                .map(|((t, name, p), acls)| {
                    let mut r = DescribeAclsResource::default();
                    r.resource_type = t;
                    r.resource_name = s(name);
                    r.pattern_type = p;
                    r.acls = acls;
                    r
                })
                .collect();
        }
        Err(e) => {
            response.error_code = e.code();
            response.error_message = Some(s(e.message));
        }
    }
    response
}

pub async fn delete_acls(broker: &Broker, req: DeleteAclsRequest) -> DeleteAclsResponse {
    let mut response = DeleteAclsResponse::default();
    let mut changed = false;
    for f in req.filters {
        let mut result = DeleteAclsFilterResult::default();
        let deleted = async {
            if !broker.authorizer().is_enabled() {
                return Err(disabled());
            }
            let filter = filter(
                f.resource_type_filter,
                &f.resource_name_filter,
                f.pattern_type_filter,
                &f.principal_filter,
                &f.host_filter,
                f.operation,
                f.permission_type,
            )?;
            broker
                .metastore()
                .delete_acls(move |a| filter.matches(a))
                .await
                .map_err(metastore_error)
        }
        .await;
        match deleted {
            Ok(acls) => {
                changed |= !acls.is_empty();
                result.matching_acls = acls
                    .into_iter()
                    .map(|a| {
                        let mut m = DeleteAclsMatchingAcl::default();
                        m.resource_type = a.resource_type;
                        m.resource_name = s(a.resource_name);
                        m.pattern_type = a.pattern_type;
                        m.principal = s(a.principal);
                        m.host = s(a.host);
                        m.operation = a.operation;
                        m.permission_type = a.permission;
                        m
                    })
                    .collect();
            }
            Err(e) => {
                result.error_code = e.code();
                result.error_message = Some(s(e.message));
            }
        }
        response.filter_results.push(result);
    }
    if changed {
        refresh(broker).await;
    }
    response
}
