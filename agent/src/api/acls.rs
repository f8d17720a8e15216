//! CreateAcls, DescribeAcls and DeleteAcls: wire requests translated to the security
//! service (`service/security.rs`), which keeps the bindings the authorizer enforces.
//! The service decides whether the caller may (ALTER or DESCRIBE on the cluster), and
//! audits the changes.
//!
//! As Kafka: without an authorizer all three answer SECURITY_DISABLED; an invalid
//! binding or filter is INVALID_REQUEST with the reason, and the others in the request
//! go ahead.

use std::collections::BTreeMap;

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

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;
use crate::service::security::{self, AclBindingFilter, AclRecord};

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

pub async fn create_acls(
    broker: &Broker,
    who: &Caller,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let bindings = req
        .creations
        .into_iter()
        .map(|c| AclRecord {
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission: c.permission_type,
        })
        .collect();
    let mut response = CreateAclsResponse::default();
    let outcomes = security::create_acls(broker.security(), who, bindings).await;
    response.results = outcomes
        .into_iter()
        .map(|outcome| {
            let mut r = AclCreationResult::default();
            if let Err(e) = outcome {
                let e = ApiError::from(&e);
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
) -> AclBindingFilter {
    AclBindingFilter {
        resource_type,
        resource_name: resource_name.as_ref().map(|n| n.to_string()),
        pattern_type,
        principal: principal.as_ref().map(|p| p.to_string()),
        host: host.as_ref().map(|h| h.to_string()),
        operation,
        permission,
    }
}

pub async fn describe_acls(
    broker: &Broker,
    who: &Caller,
    req: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let mut response = DescribeAclsResponse::default();
    let filter = filter(
        req.resource_type_filter,
        &req.resource_name_filter,
        req.pattern_type_filter,
        &req.principal_filter,
        &req.host_filter,
        req.operation,
        req.permission_type,
    );
    let found = security::acls(broker.security(), who, &filter)
        .await
        .map_err(|e| ApiError::from(&e));
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

pub async fn delete_acls(
    broker: &Broker,
    who: &Caller,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let filters = req
        .filters
        .iter()
        .map(|f| {
            filter(
                f.resource_type_filter,
                &f.resource_name_filter,
                f.pattern_type_filter,
                &f.principal_filter,
                &f.host_filter,
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let deleted = security::delete_acls(broker.security(), who, filters).await;
    let mut response = DeleteAclsResponse::default();
    response.filter_results = deleted
        .into_iter()
        .map(|outcome| {
            let mut result = DeleteAclsFilterResult::default();
            match outcome {
                Ok(acls) => {
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
                    let e = ApiError::from(&e);
                    result.error_code = e.code();
                    result.error_message = Some(s(e.message));
                }
            }
            result
        })
        .collect();
    response
}
