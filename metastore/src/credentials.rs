//! SASL/SCRAM credentials (Kafka's KIP-554): per user and mechanism, the salt, the
//! iteration count and the two keys a server needs to check a SCRAM proof and to prove
//! itself (RFC 5802's StoredKey and ServerKey). Never the password.
//!
//! | key                        | value           |
//! |----------------------------|-----------------|
//! | (prefix, "scram", user)    | UserCredentials |

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::kv::prefix_end;
use crate::topics::{Metastore, decode, encode};

/// One user's credential for one SCRAM mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

/// Every SCRAM credential of one user, by mechanism name (`SCRAM-SHA-512`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserCredentials {
    pub user: String,
    pub mechanisms: BTreeMap<String, ScramCredential>,
}

impl Metastore {
    fn credentials_prefix(&self) -> Vec<u8> {
        self.key().str("scram").into_bytes()
    }

    fn credentials_key(&self, user: &str) -> Vec<u8> {
        self.key().str("scram").str(user).into_bytes()
    }

    /// One user's credentials; `None` if the user has none.
    pub async fn user_credentials(&self, user: &str) -> Result<Option<UserCredentials>> {
        let key = self.credentials_key(user);
        self.transact(move |txn| {
            let key = key.clone();
            async move {
                match txn.get(&key).await? {
                    Some(v) => Ok(Some(decode(&key, &v)?)),
                    None => Ok(None),
                }
            }
            .boxed()
        })
        .await
    }

    /// Every user with a credential, by user name.
    pub async fn all_user_credentials(&self) -> Result<Vec<UserCredentials>> {
        let begin = self.credentials_prefix();
        self.transact(move |txn| {
            let begin = begin.clone();
            async move {
                let mut out = Vec::new();
                for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    out.push(decode::<UserCredentials>(&k, &v)?);
                }
                out.sort_by(|a, b| a.user.cmp(&b.user));
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    /// Changes the credentials of the users `change` is given, in one transaction:
    /// `change` gets each user's stored credentials (empty for a user without any; it
    /// may run more than once, on a retried transaction) and edits them in place, or
    /// refuses with an error that leaves everything as it was. A user left with no
    /// mechanism is removed.
    pub async fn alter_user_credentials<F>(&self, users: Vec<String>, change: F) -> Result<()>
    where
        F: Fn(&mut BTreeMap<String, UserCredentials>) -> Result<()> + Send + Sync + 'static,
    {
        let keys: Vec<(String, Vec<u8>)> = users
            .into_iter()
            .map(|u| {
                let k = self.credentials_key(&u);
                (u, k)
            })
            .collect();
        let change = Arc::new(change);
        self.transact(move |txn| {
            let (keys, change) = (keys.clone(), Arc::clone(&change));
            async move {
                let mut stored = BTreeMap::new();
                for (user, key) in &keys {
                    let creds = match txn.get(key).await? {
                        Some(v) => decode(key, &v)?,
                        None => UserCredentials {
                            user: user.clone(),
                            mechanisms: BTreeMap::new(),
                        },
                    };
                    stored.insert(user.clone(), creds);
                }
                change(&mut stored)?;
                for (user, key) in &keys {
                    match stored.get(user) {
                        Some(c) if !c.mechanisms.is_empty() => txn.set(key, &encode(c)),
                        _ => txn.clear(key),
                    }
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn credential(iterations: u32) -> ScramCredential {
        ScramCredential {
            salt: vec![1, 2, 3],
            iterations,
            stored_key: vec![4; 32],
            server_key: vec![5; 32],
        }
    }

    #[tokio::test]
    async fn credentials_by_user_and_mechanism() {
        for (name, m, _dir) in crate::test_metastores() {
            assert_eq!(m.user_credentials("alice").await.expect("read"), None);
            m.alter_user_credentials(vec!["alice".into(), "bob".into()], |users| {
                for (i, u) in users.values_mut().enumerate() {
                    u.mechanisms
                        .insert("SCRAM-SHA-512".into(), credential(4096 + i as u32));
                }
                Ok(())
            })
            .await
            .expect("set");
            let alice = m
                .user_credentials("alice")
                .await
                .expect("read")
                .expect("alice");
            assert_eq!(alice.user, "alice", "{name}");
            assert_eq!(alice.mechanisms["SCRAM-SHA-512"].iterations, 4096);
            let all = m.all_user_credentials().await.expect("list");
            assert_eq!(
                all.iter().map(|u| u.user.as_str()).collect::<Vec<_>>(),
                ["alice", "bob"],
                "{name}"
            );

            let refused = m
                .alter_user_credentials(vec!["alice".into()], |users| {
                    users.clear();
                    Err(Error::Invalid("no".into()))
                })
                .await;
            assert!(refused.is_err());
            assert!(m.user_credentials("alice").await.expect("read").is_some());

            m.alter_user_credentials(vec!["alice".into()], |users| {
                for u in users.values_mut() {
                    u.mechanisms.remove("SCRAM-SHA-512");
                }
                Ok(())
            })
            .await
            .expect("delete");
            assert_eq!(
                m.user_credentials("alice").await.expect("read"),
                None,
                "{name}"
            );
            assert_eq!(m.all_user_credentials().await.expect("list").len(), 1);
        }
    }
}
