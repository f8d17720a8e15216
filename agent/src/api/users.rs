//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): wire requests
//! translated to the security service (`service/security.rs`), which keeps the SCRAM
//! credentials SASL listeners check.
//!
//! As Kafka's controller answers: each user gets its own result; a user any of whose
//! alterations is refused has none of them applied, and the other users' go ahead, all
//! in one metastore transaction.

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::caller::Caller;
use crate::error_map::ApiError;
use crate::service::security::{
    self, Action, CredentialAlteration, CredentialInfo as Info, SecurityError,
};

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn infos(infos: Vec<Info>) -> Vec<CredentialInfo> {
    infos
        .into_iter()
        .map(|i| {
            let mut info = CredentialInfo::default();
            info.mechanism = i.mechanism.kafka_type();
            info.iterations = i.iterations as i32;
            info
        })
        .collect()
}

fn describe_result(
    user: &str,
    outcome: Result<Vec<Info>, SecurityError>,
) -> DescribeUserScramCredentialsResult {
    let mut r = DescribeUserScramCredentialsResult::default();
    r.user = s(user);
    match outcome {
        Ok(i) => r.credential_infos = infos(i),
        Err(e) => {
            let e = ApiError::from(&e);
            r.error_code = e.code();
            r.error_message = Some(s(e.message));
        }
    }
    r
}

pub async fn describe(
    broker: &Broker,
    who: &Caller,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut response = DescribeUserScramCredentialsResponse::default();
    let fail = |mut response: DescribeUserScramCredentialsResponse, e: &SecurityError| {
        let e = ApiError::from(e);
        response.error_code = e.code();
        response.error_message = Some(s(e.message));
        response
    };
    let wanted: Vec<String> = req
        .users
        .unwrap_or_default()
        .into_iter()
        .map(|u| u.name.to_string())
        .collect();
    // A caller who may not is told so whatever else is wrong (Kafka's order).
    if let Err(e) = security::authorize(broker.security(), who, Action::DescribeUsers) {
        return fail(response, &e);
    }
    if wanted.is_empty() {
        return match security::users(broker.security(), who).await {
            Ok(all) => {
                response.results = all
                    .into_iter()
                    .map(|(user, i)| describe_result(&user, Ok(i)))
                    .collect();
                response
            }
            Err(e) => fail(response, &e),
        };
    }
    for (i, user) in wanted.iter().enumerate() {
        if wanted[..i].contains(user) {
            continue;
        }
        let outcome = if wanted[i + 1..].contains(user) {
            Err(SecurityError::Duplicate(
                "Cannot describe SCRAM credentials for the same user twice in a single request"
                    .into(),
            ))
        } else {
            match security::user(broker.security(), who, user).await {
                Err(e @ SecurityError::Metastore(_)) => return fail(response, &e),
                outcome => outcome,
            }
        };
        response.results.push(describe_result(user, outcome));
    }
    response
}

pub async fn alter(
    broker: &Broker,
    who: &Caller,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let deletions = req.deletions.into_iter().map(|d| {
        let mechanism = d.mechanism;
        (
            d.name.to_string(),
            CredentialAlteration::Delete { mechanism },
        )
    });
    let upsertions = req.upsertions.into_iter().map(|u| {
        let alteration = CredentialAlteration::Salted {
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        };
        (u.name.to_string(), alteration)
    });
    let alterations = deletions.chain(upsertions).collect();
    let mut response = AlterUserScramCredentialsResponse::default();
    response.results = security::alter_users(broker.security(), who, alterations)
        .await
        .into_iter()
        .map(|(user, outcome)| {
            let mut r = AlterUserScramCredentialsResult::default();
            if let Err(e) = outcome {
                let e = ApiError::from(&e);
                r.error_code = e.code();
                r.error_message = Some(s(e.message));
            }
            r.user = s(user);
            r
        })
        .collect();
    response
}
