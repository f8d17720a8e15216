//! Client quotas (Kafka's KIP-546 entities): the rates one user, client id, pair of
//! them, or client address may use, and the defaults of each. Stored as Kafka names
//! them (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`,
//! `connection_creation_rate`); what they mean is the agent's business. Every change
//! bumps one version key that agents watch.
//!
//! | key                                   | value        |
//! |---------------------------------------|--------------|
//! | (prefix, "quota", entity as text)     | QuotaRecord  |
//! | (prefix, "quotas-version")            | counter      |

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::kv::{Watch, prefix_end};
use crate::topics::{Metastore, decode, encode};

/// A quota entity: its components by type (`user`, `client-id`, `ip`), each a name or
/// `None` for the type's default (Kafka's `<default>`).
pub type QuotaEntity = BTreeMap<String, Option<String>>;

/// One entity's quotas, by key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaRecord {
    pub entity: QuotaEntity,
    pub values: BTreeMap<String, f64>,
}

/// One change to an entity's quotas: a key set to a value, or removed (`None`).
pub type QuotaChange = (QuotaEntity, Vec<(String, Option<f64>)>);

impl Metastore {
    fn quotas_prefix(&self) -> Vec<u8> {
        self.key().str("quota").into_bytes()
    }

    fn quota_key(&self, entity: &QuotaEntity) -> Vec<u8> {
        // A name is never confused with the default: `=` prefixes a name, `*` is the
        // default, and the types are in order (a BTreeMap).
        let text: Vec<String> = entity
            .iter()
            .map(|(t, n)| match n {
                Some(n) => format!("{t}={n}"),
                None => format!("{t}*"),
            })
            .collect();
        self.key()
            .str("quota")
            .str(&text.join("\u{0}"))
            .into_bytes()
    }

    fn quotas_version_key(&self) -> Vec<u8> {
        self.key().str("quotas-version").into_bytes()
    }

    /// Starts a watch that resolves after any quota changes.
    pub async fn watch_quotas(&self) -> Result<Watch> {
        self.kv().watch(&self.quotas_version_key()).await
    }

    /// Every entity with a quota.
    pub async fn quotas(&self) -> Result<Vec<QuotaRecord>> {
        let begin = self.quotas_prefix();
        self.transact(move |txn| {
            let begin = begin.clone();
            async move {
                let mut out = Vec::new();
                for (k, v) in txn.get_range(&begin, &prefix_end(&begin), 0, false).await? {
                    out.push(decode::<QuotaRecord>(&k, &v)?);
                }
                Ok(out)
            }
            .boxed()
        })
        .await
    }

    /// Applies `changes` in one transaction; an entity left without a quota is removed.
    pub async fn alter_quotas(&self, changes: Vec<QuotaChange>) -> Result<()> {
        let keyed: Vec<(Vec<u8>, QuotaChange)> = changes
            .into_iter()
            .map(|c| (self.quota_key(&c.0), c))
            .collect();
        let keyed = Arc::new(keyed);
        let version = self.quotas_version_key();
        self.transact(move |txn| {
            let (keyed, version) = (Arc::clone(&keyed), version.clone());
            async move {
                for (key, (entity, ops)) in keyed.iter() {
                    let mut record = match txn.get(key).await? {
                        Some(v) => decode::<QuotaRecord>(key, &v)?,
                        None => QuotaRecord {
                            entity: entity.clone(),
                            values: BTreeMap::new(),
                        },
                    };
                    for (name, value) in ops {
                        match value {
                            Some(v) => record.values.insert(name.clone(), *v),
                            None => record.values.remove(name),
                        };
                    }
                    if record.values.is_empty() {
                        txn.clear(key);
                    } else {
                        txn.set(key, &encode(&record));
                    }
                }
                txn.atomic_add(&version, 1);
                Ok(())
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

    fn entity(parts: &[(&str, Option<&str>)]) -> QuotaEntity {
        parts
            .iter()
            .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
            .collect()
    }

    /// Set, changed and removed per key, defaults apart from names, and watched.
    #[tokio::test]
    async fn quotas_by_entity_and_key() {
        for (name, m, _dir) in crate::test_metastores() {
            let alice = entity(&[("user", Some("alice"))]);
            let default_user = entity(&[("user", None)]);
            let pair = entity(&[("user", Some("alice")), ("client-id", Some("app"))]);
            let watch = m.watch_quotas().await.expect("watch");
            m.alter_quotas(vec![
                (
                    alice.clone(),
                    vec![("producer_byte_rate".into(), Some(1e6))],
                ),
                (
                    default_user.clone(),
                    vec![("consumer_byte_rate".into(), Some(2e6))],
                ),
                (
                    pair.clone(),
                    vec![("request_percentage".into(), Some(50.0))],
                ),
            ])
            .await
            .expect("set");
            tokio::time::timeout(Duration::from_secs(5), watch)
                .await
                .unwrap_or_else(|_| panic!("{name}: no watch event"))
                .expect("watch");
            assert_eq!(m.quotas().await.expect("read").len(), 3, "{name}");
            m.alter_quotas(vec![
                (alice.clone(), vec![("producer_byte_rate".into(), None)]),
                (pair.clone(), vec![("consumer_byte_rate".into(), Some(3.0))]),
            ])
            .await
            .expect("change");
            let all = m.quotas().await.expect("read");
            let mut entities: Vec<&QuotaEntity> = all.iter().map(|q| &q.entity).collect();
            entities.sort();
            let mut expected = vec![&default_user, &pair];
            expected.sort();
            assert_eq!(entities, expected, "{name}");
            let p = all.iter().find(|q| q.entity == pair).expect("pair");
            assert_eq!(p.values.len(), 2, "{name}");
        }
    }
}
