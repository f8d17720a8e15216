//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): wire requests
//! translated to the security service (`service/security.rs`), which keeps the SCRAM
//! credentials SASL listeners check.
//!
//! As Kafka's controller answers: each user gets its own result; a user any of whose
//! alterations is refused has none of them applied, and the other users' go ahead, all
//! in one metastore transaction.

use std::collections::BTreeMap;

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
use crate::error_map::ApiError;
use crate::service::security::{
    self, Allowed, CredentialChange, CredentialInfo as Info, SecurityError,
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
    allowed: Result<Allowed, SecurityError>,
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
    let allowed = match allowed {
        Ok(a) => a,
        Err(e) => return fail(response, &e),
    };
    if wanted.is_empty() {
        return match security::users(broker.security(), &allowed).await {
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
            match security::user(broker.security(), &allowed, user).await {
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
    allowed: Result<Allowed, SecurityError>,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    // Every user in request order, with its changes or the first refusal.
    let mut order: Vec<String> = Vec::new();
    let mut outcomes: BTreeMap<String, Result<Vec<CredentialChange>, SecurityError>> =
        BTreeMap::new();
    let requested = req
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism, None))
        .chain(req.upsertions.iter().map(|u| {
            (
                u.name.to_string(),
                u.mechanism,
                Some((u.iterations, u.salt.as_ref(), u.salted_password.as_ref())),
            )
        }));
    for (name, mechanism, upsert) in requested {
        if !outcomes.contains_key(&name) {
            order.push(name.clone());
        }
        let entry = outcomes
            .entry(name.clone())
            .or_insert_with(|| Ok(Vec::new()));
        let Ok(changes) = entry else { continue };
        let change = security::credential_change(&name, mechanism, upsert).and_then(|change| {
            let hash = change.mechanism();
            if changes.iter().any(|c| c.mechanism() == hash) {
                return Err(SecurityError::Duplicate(
                    "A user credential cannot be altered twice in the same request".into(),
                ));
            }
            Ok(change)
        });
        match change {
            Ok(c) => changes.push(c),
            Err(e) => *entry = Err(e),
        }
    }

    let accepted: BTreeMap<String, Vec<CredentialChange>> = outcomes
        .iter()
        .filter_map(|(u, o)| Some((u.clone(), o.as_ref().ok()?.clone())))
        .collect();
    // A caller who may not alter users is told so for every user, whatever else is
    // wrong with the request (Kafka's order).
    if let Err(e) = &allowed {
        for outcome in outcomes.values_mut() {
            *outcome = Err(e.clone());
        }
    }
    let stored = match &allowed {
        Ok(allowed) => security::alter_users(broker.security(), allowed, accepted).await,
        Err(_) => Ok(BTreeMap::new()),
    };
    let mut response = AlterUserScramCredentialsResponse::default();
    response.results = order
        .into_iter()
        .map(|user| {
            let mut r = AlterUserScramCredentialsResult::default();
            let error = match (&outcomes[&user], &stored) {
                (Err(e), _) => Some(e.clone()),
                (Ok(_), Err(e)) => Some(e.clone()),
                (Ok(_), Ok(missing)) => missing.get(&user).cloned(),
            };
            if let Some(e) = error {
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
