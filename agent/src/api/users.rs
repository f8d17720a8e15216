//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): the SCRAM
//! credentials SASL listeners check, kept in the metastore (`credentials.rs` there).
//!
//! As Kafka's controller answers: each user gets its own result; a user any of whose
//! alterations is refused has none of them applied, and the other users' go ahead, all
//! in one metastore transaction.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_metastore::UserCredentials;

use super::errors::ApiError;
use crate::broker::Broker;
use crate::sasl::scram::{MAX_ITERATIONS, MIN_ITERATIONS, ScramHash};

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn infos(user: &UserCredentials) -> Vec<CredentialInfo> {
    user.mechanisms
        .iter()
        .filter_map(|(name, c)| {
            let hash = ScramHash::from_mechanism(name)?;
            let mut info = CredentialInfo::default();
            info.mechanism = hash.kafka_type();
            info.iterations = c.iterations as i32;
            Some(info)
        })
        .collect()
}

fn describe_result(
    user: &str,
    outcome: Result<Vec<CredentialInfo>, ApiError>,
) -> DescribeUserScramCredentialsResult {
    let mut r = DescribeUserScramCredentialsResult::default();
    r.user = s(user);
    match outcome {
        Ok(infos) => r.credential_infos = infos,
        Err(e) => {
            r.error_code = e.code();
            r.error_message = Some(s(e.message));
        }
    }
    r
}

pub async fn describe(
    broker: &Broker,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut response = DescribeUserScramCredentialsResponse::default();
    let fail = |mut response: DescribeUserScramCredentialsResponse, e: strata_metastore::Error| {
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
    if wanted.is_empty() {
        return match broker.metastore().all_user_credentials().await {
            Ok(all) => {
                response.results = all
                    .iter()
                    .map(|u| describe_result(&u.user, Ok(infos(u))))
                    .collect();
                response
            }
            Err(e) => fail(response, e),
        };
    }
    for (i, user) in wanted.iter().enumerate() {
        if wanted[..i].contains(user) {
            continue;
        }
        let outcome = if wanted[i + 1..].contains(user) {
            Err(ApiError::new(
                ResponseError::DuplicateResource,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
            ))
        } else {
            match broker.metastore().user_credentials(user).await {
                Ok(Some(u)) => Ok(infos(&u)),
                Ok(None) => Err(ApiError::new(
                    ResponseError::ResourceNotFound,
                    format!("Attempt to describe a user credential that does not exist: {user}"),
                )),
                Err(e) => return fail(response, e),
            }
        };
        response.results.push(describe_result(user, outcome));
    }
    response
}

/// One requested change of one user's credential for one mechanism.
#[derive(Debug, Clone)]
enum Change {
    Delete(ScramHash),
    Upsert(ScramHash, strata_metastore::ScramCredential),
}

/// Checks one alteration as Kafka does; the credential is computed from the client's
/// salted password here, so the password never reaches the metastore.
fn check(
    name: &str,
    mechanism: i8,
    upsert: Option<(i32, &[u8], &[u8])>,
) -> Result<Change, ApiError> {
    let unacceptable = |why: &str| ApiError::new(ResponseError::UnacceptableCredential, why);
    if name.is_empty() {
        return Err(unacceptable("Username must not be empty"));
    }
    let Some(hash) = ScramHash::from_kafka_type(mechanism) else {
        return Err(ApiError::new(
            ResponseError::UnsupportedSaslMechanism,
            format!("Unknown SCRAM mechanism {mechanism} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"),
        ));
    };
    let Some((iterations, salt, salted_password)) = upsert else {
        return Ok(Change::Delete(hash));
    };
    if iterations < MIN_ITERATIONS as i32 {
        return Err(unacceptable(&format!(
            "Too few iterations: {iterations} (at least {MIN_ITERATIONS})"
        )));
    }
    if iterations > MAX_ITERATIONS as i32 {
        return Err(unacceptable(&format!(
            "Too many iterations: {iterations} (at most {MAX_ITERATIONS})"
        )));
    }
    if salt.is_empty() || salted_password.is_empty() {
        return Err(unacceptable("Salt and salted password must not be empty"));
    }
    Ok(Change::Upsert(
        hash,
        hash.credential_from_salted(salted_password, salt, iterations as u32),
    ))
}

pub async fn alter(
    broker: &Broker,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    // Every user in request order, with its changes or the first refusal.
    let mut order: Vec<String> = Vec::new();
    let mut outcomes: BTreeMap<String, Result<Vec<Change>, ApiError>> = BTreeMap::new();
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
        let change = check(&name, mechanism, upsert).and_then(|change| {
            let hash = match &change {
                Change::Delete(h) | Change::Upsert(h, _) => *h,
            };
            let twice = changes
                .iter()
                .any(|c| matches!(c, Change::Delete(h) | Change::Upsert(h, _) if *h == hash));
            if twice {
                return Err(ApiError::new(
                    ResponseError::DuplicateResource,
                    "A user credential cannot be altered twice in the same request",
                ));
            }
            Ok(change)
        });
        match change {
            Ok(c) => changes.push(c),
            Err(e) => *entry = Err(e),
        }
    }

    let accepted: BTreeMap<String, Vec<Change>> = outcomes
        .iter()
        .filter_map(|(u, o)| Some((u.clone(), o.as_ref().ok()?.clone())))
        .collect();
    // Deleting a credential the user does not have is refused once the stored ones are
    // read, inside the transaction; the refusals of its last run are the answer.
    let missing: Arc<Mutex<BTreeMap<String, ApiError>>> = Arc::default();
    let stored: Result<(), ApiError> = if accepted.is_empty() {
        Ok(())
    } else {
        let missing = Arc::clone(&missing);
        let users = accepted.keys().cloned().collect();
        broker
            .metastore()
            .alter_user_credentials(users, move |stored| {
                let mut refused = BTreeMap::new();
                for (user, changes) in &accepted {
                    let Some(creds) = stored.get_mut(user) else { continue };
                    let before = creds.clone();
                    for change in changes {
                        match change {
                            Change::Upsert(h, c) => {
                                creds.mechanisms.insert(h.mechanism().to_string(), c.clone());
                            }
                            Change::Delete(h) => {
                                if creds.mechanisms.remove(h.mechanism()).is_none() {
                                    refused.insert(
                                        user.clone(),
                                        ApiError::new(
                                            ResponseError::ResourceNotFound,
                                            format!(
                                                "Attempt to delete a user credential that does not exist: {user} {}",
                                                h.mechanism()
                                            ),
                                        ),
                                    );
                                }
                            }
                        }
                    }
                    if refused.contains_key(user) {
                        *creds = before;
                    }
                }
                *missing.lock().expect("not poisoned") = refused;
                Ok(())
            })
            .await
            .map_err(ApiError::from)
    };
    let missing = std::mem::take(&mut *missing.lock().expect("not poisoned"));
    let mut response = AlterUserScramCredentialsResponse::default();
    response.results = order
        .into_iter()
        .map(|user| {
            let mut r = AlterUserScramCredentialsResult::default();
            let error = match (&outcomes[&user], &stored) {
                (Err(e), _) => Some(e.clone()),
                (Ok(_), Err(e)) => Some(e.clone()),
                (Ok(_), Ok(())) => missing.get(&user).cloned(),
            };
            if let Some(e) = error {
                r.error_code = e.code();
                r.error_message = Some(s(e.message));
            }
            r.user = s(user);
            r
        })
        .collect();
    response
}
