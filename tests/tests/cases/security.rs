//! The quota and ACL APIs' cases of `every_api_answers_at_every_advertised_version`, on
//! an agent without an authorizer: the quota APIs answer, the ACL APIs answer
//! SECURITY_DISABLED as Kafka's do (`authorization.rs` covers them with one).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;
use strata_tests::Client;

/// Whether `api` is one of these.
pub fn handles(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::DescribeClientQuotas
            | ApiKey::AlterClientQuotas
            | ApiKey::CreateAcls
            | ApiKey::DescribeAcls
            | ApiKey::DeleteAcls
    )
}

/// Sends `api` at version `v` and checks the answer.
pub async fn check(c: &mut Client, api: ApiKey, v: i16) {
    let ctx = format!("{api:?} v{v}");
    match api {
        ApiKey::DescribeClientQuotas => {
            let r = c
                .answer(
                    v,
                    &kafka_protocol::messages::DescribeClientQuotasRequest::default(),
                    &ctx,
                )
                .await;
            assert_eq!(r.error_code, 0, "{ctx}");
        }
        ApiKey::AlterClientQuotas => {
            use kafka_protocol::messages::alter_client_quotas_request as q;
            let mut d = q::EntityData::default();
            d.entity_type = StrBytes::from_static_str("client-id");
            d.entity_name = Some(StrBytes::from_string(format!("app-v{v}")));
            let mut o = q::OpData::default();
            o.key = StrBytes::from_static_str("producer_byte_rate");
            o.value = 1e9;
            let mut e = q::EntryData::default();
            e.entity = vec![d];
            e.ops = vec![o];
            let mut req = kafka_protocol::messages::AlterClientQuotasRequest::default();
            req.entries = vec![e];
            let r = c.answer(v, &req, &ctx).await;
            assert_eq!(r.entries[0].error_code, 0, "{ctx}");
        }
        // Without an authorizer, as Kafka: SECURITY_DISABLED (the authorization
        // suite covers them with one).
        ApiKey::CreateAcls => {
            let mut a = kafka_protocol::messages::create_acls_request::AclCreation::default();
            a.resource_type = 2;
            a.resource_name = StrBytes::from_static_str("t");
            a.principal = StrBytes::from_static_str("User:a");
            a.host = StrBytes::from_static_str("*");
            a.operation = 3;
            a.permission_type = 3;
            let mut req = kafka_protocol::messages::CreateAclsRequest::default();
            req.creations = vec![a];
            let r = c.answer(v, &req, &ctx).await;
            assert_eq!(
                r.results[0].error_code,
                ResponseError::SecurityDisabled.code(),
                "{ctx}"
            );
        }
        ApiKey::DescribeAcls => {
            let mut req = kafka_protocol::messages::DescribeAclsRequest::default();
            req.resource_type_filter = 1;
            req.resource_name_filter = None;
            req.principal_filter = None;
            req.host_filter = None;
            req.operation = 1;
            req.permission_type = 1;
            let r = c.answer(v, &req, &ctx).await;
            assert_eq!(
                r.error_code,
                ResponseError::SecurityDisabled.code(),
                "{ctx}"
            );
        }
        ApiKey::DeleteAcls => {
            let mut f = kafka_protocol::messages::delete_acls_request::DeleteAclsFilter::default();
            f.resource_type_filter = 1;
            f.resource_name_filter = None;
            f.principal_filter = None;
            f.host_filter = None;
            f.operation = 1;
            f.permission_type = 1;
            let mut req = kafka_protocol::messages::DeleteAclsRequest::default();
            req.filters = vec![f];
            let r = c.answer(v, &req, &ctx).await;
            assert_eq!(
                r.filter_results[0].error_code,
                ResponseError::SecurityDisabled.code(),
                "{ctx}"
            );
        }
        other => panic!("not a security API: {other:?}"),
    }
}
