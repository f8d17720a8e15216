//! Access-control entries (Kafka's ACL bindings): who may do what to which resources.
//!
//! The metastore keeps each binding as Kafka's codes and strings, without their meaning:
//! matching a request against them is the agent's authorizer's business. A binding is
//! its own key, so creating one twice stores it once, and every change bumps one version
//! key that agents watch to re-read the set.
//!
//! | key                                                              | value      |
//! |------------------------------------------------------------------|------------|
//! | (prefix, "acl", type, name, pattern, principal, host, op, perm)  | AclRecord  |
//! | (prefix, "acls-version")                                         | counter    |

use std::sync::Arc;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::kv::{Watch, prefix_end};
use crate::topics::{Metastore, decode, encode};

/// One ACL binding, in Kafka's codes: resource type (`2` topic, `3` group, `4` cluster,
/// `5` transactional id), pattern type (`3` literal, `4` prefixed), operation (`2` all
/// to `12` idempotent write) and permission (`2` deny, `3` allow).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclRecord {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    /// `type:name`, such as `User:alice` or `User:*`.
    pub principal: String,
    /// A client address, or `*`.
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl Metastore {
    fn acls_prefix(&self) -> Vec<u8> {
        self.key().str("acl").into_bytes()
    }

    fn acl_key(&self, acl: &AclRecord) -> Vec<u8> {
        self.key()
            .str("acl")
            .u32(acl.resource_type as u8 as u32)
            .str(&acl.resource_name)
            .u32(acl.pattern_type as u8 as u32)
            .str(&acl.principal)
            .str(&acl.host)
            .u32(acl.operation as u8 as u32)
            .u32(acl.permission as u8 as u32)
            .into_bytes()
    }

    fn acls_version_key(&self) -> Vec<u8> {
        self.key().str("acls-version").into_bytes()
    }

    /// Starts a watch that resolves after any ACL is created or deleted.
    pub async fn watch_acls(&self) -> Result<Watch> {
        self.kv().watch(&self.acls_version_key()).await
    }

    /// Every stored binding, in key order.
    pub async fn acls(&self) -> Result<Vec<AclRecord>> {
        let begin = self.acls_prefix();
        self.transact(move |txn| {
            let begin = begin.clone();
            async move {
                let mut out = Vec::new();
                for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    out.push(decode::<AclRecord>(&k, &v)?);
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    /// Stores `acls` in one transaction; one already stored stays as it is.
    pub async fn create_acls(&self, acls: Vec<AclRecord>) -> Result<()> {
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            acls.iter().map(|a| (self.acl_key(a), encode(a))).collect();
        let version = self.acls_version_key();
        self.transact(move |txn| {
            let (entries, version) = (entries.clone(), version.clone());
            async move {
                for (k, v) in &entries {
                    txn.set(k, v);
                }
                txn.atomic_add(&version, 1);
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Deletes, in one transaction, every stored binding `matches` picks, and returns
    /// them. `matches` may run more than once, on a retried transaction.
    pub async fn delete_acls<F>(&self, matches: F) -> Result<Vec<AclRecord>>
    where
        F: Fn(&AclRecord) -> bool + Send + Sync + 'static,
    {
        let begin = self.acls_prefix();
        let version = self.acls_version_key();
        let matches = Arc::new(matches);
        self.transact(move |txn| {
            let (begin, version, matches) = (begin.clone(), version.clone(), matches.clone());
            async move {
                let mut deleted = Vec::new();
                for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    let acl = decode::<AclRecord>(&k, &v)?;
                    if matches(&acl) {
                        txn.clear(&k);
                        deleted.push(acl);
                    }
                }
                if !deleted.is_empty() {
                    txn.atomic_add(&version, 1);
                }
                Ok(deleted)
            }
            .boxed()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn acl(name: &str, principal: &str, operation: i8) -> AclRecord {
        AclRecord {
            resource_type: 2,
            resource_name: name.to_string(),
            pattern_type: 3,
            principal: principal.to_string(),
            host: "*".to_string(),
            operation,
            permission: 3,
        }
    }

    /// Bindings are stored once each, deleted by a predicate in one transaction, and
    /// every change resolves a watch armed before it.
    #[tokio::test]
    async fn acls_are_stored_once_deleted_by_filter_and_watched() {
        for (name, m, _dir) in crate::test_metastores() {
            assert!(m.acls().await.expect("read").is_empty(), "{name}");
            let watch = m.watch_acls().await.expect("watch");
            let read = acl("orders", "User:alice", 3);
            let write = acl("orders", "User:bob\0odd", 4);
            m.create_acls(vec![read.clone(), write.clone(), read.clone()])
                .await
                .expect("create");
            tokio::time::timeout(Duration::from_secs(5), watch)
                .await
                .unwrap_or_else(|_| panic!("{name}: no watch event after create"))
                .expect("watch");
            m.create_acls(vec![read.clone()]).await.expect("again");
            let mut all = m.acls().await.expect("read");
            all.sort();
            let mut expected = vec![read.clone(), write.clone()];
            expected.sort();
            assert_eq!(all, expected, "{name}");

            let watch = m.watch_acls().await.expect("watch");
            let deleted = m
                .delete_acls(|a| a.principal == "User:alice")
                .await
                .expect("delete");
            assert_eq!(deleted, vec![read.clone()], "{name}");
            tokio::time::timeout(Duration::from_secs(5), watch)
                .await
                .unwrap_or_else(|_| panic!("{name}: no watch event after delete"))
                .expect("watch");
            assert_eq!(m.acls().await.expect("read"), vec![write], "{name}");
            assert!(
                m.delete_acls(|_| false).await.expect("none").is_empty(),
                "{name}"
            );
        }
    }
}
