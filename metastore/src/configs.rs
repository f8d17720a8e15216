//! Dynamic broker configs (Kafka's KIP-226): the cluster-wide defaults (Kafka's
//! `<default>` broker entity) and each broker's own overrides, by Kafka config name.
//!
//! They sit beside the topics because topics inherit from them: a change here bumps the
//! topics' version key, so every agent watching topics re-reads them, and these with them.

use std::collections::BTreeMap;

use futures::FutureExt;

use crate::error::Result;
use crate::kv::KvTransaction;
use crate::topics::{Metastore, decode, encode};

/// Whose dynamic configs: every broker's defaults, or one broker's overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigScope {
    /// The cluster-wide default (Kafka's broker resource with an empty name).
    Cluster,
    /// One broker, by node id.
    Broker(u32),
}

/// The dynamic configs one broker sees: the cluster's defaults and its own overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerConfigs {
    pub cluster: BTreeMap<String, String>,
    pub broker: BTreeMap<String, String>,
}

impl Metastore {
    fn broker_config_key(&self, scope: ConfigScope) -> Vec<u8> {
        let key = self.key().str("broker-config");
        match scope {
            ConfigScope::Cluster => key.str("default"),
            ConfigScope::Broker(id) => key.str("node").u32(id),
        }
        .into_bytes()
    }

    async fn read_configs(
        txn: &mut dyn KvTransaction,
        key: &[u8],
    ) -> Result<BTreeMap<String, String>> {
        match txn.get(key).await? {
            Some(v) => decode(key, &v),
            None => Ok(BTreeMap::new()),
        }
    }

    /// The cluster's dynamic defaults and broker `node`'s overrides, read together.
    pub async fn broker_configs(&self, node: u32) -> Result<BrokerConfigs> {
        let cluster = self.broker_config_key(ConfigScope::Cluster);
        let broker = self.broker_config_key(ConfigScope::Broker(node));
        self.transact(|txn| {
            let (cluster, broker) = (cluster.clone(), broker.clone());
            async move {
                Ok(BrokerConfigs {
                    cluster: Self::read_configs(txn, &cluster).await?,
                    broker: Self::read_configs(txn, &broker).await?,
                })
            }
            .boxed()
        })
        .await
    }

    /// Changes the dynamic configs of `scope` in one transaction: `change` gets what is
    /// stored now (it may run more than once, on a retried transaction) and edits it, or
    /// refuses with an error that leaves everything as it was. Returns what was stored.
    pub async fn alter_broker_configs<F>(
        &self,
        scope: ConfigScope,
        change: F,
    ) -> Result<BTreeMap<String, String>>
    where
        F: Fn(&mut BTreeMap<String, String>) -> Result<()> + Send + Sync + 'static,
    {
        let key = self.broker_config_key(scope);
        let change = std::sync::Arc::new(change);
        let this = self.clone();
        self.transact(move |txn| {
            let (key, change, this) = (key.clone(), change.clone(), this.clone());
            async move {
                let mut configs = Self::read_configs(txn, &key).await?;
                let before = configs.clone();
                change(&mut configs)?;
                if configs != before {
                    if configs.is_empty() {
                        txn.clear(&key);
                    } else {
                        txn.set(&key, &encode(&configs));
                    }
                    this.touch_topics(txn);
                }
                Ok(configs)
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
    use crate::Error;

    #[tokio::test]
    async fn broker_configs_by_scope() {
        for (name, m, _dir) in crate::test_metastores() {
            assert_eq!(
                m.broker_configs(1).await.expect("read"),
                BrokerConfigs::default()
            );
            let watch = m.watch_topics().await.expect("watch");
            m.alter_broker_configs(ConfigScope::Cluster, |c| {
                c.insert("log.retention.ms".into(), "1000".into());
                Ok(())
            })
            .await
            .expect("set default");
            tokio::time::timeout(Duration::from_secs(10), watch)
                .await
                .unwrap_or_else(|_| panic!("{name}: a config change fires the topic watch"))
                .expect("watch");
            m.alter_broker_configs(ConfigScope::Broker(2), |c| {
                c.insert("log.retention.ms".into(), "2000".into());
                Ok(())
            })
            .await
            .expect("set broker");
            let one = m.broker_configs(1).await.expect("read");
            assert_eq!(
                one.cluster.get("log.retention.ms").map(String::as_str),
                Some("1000")
            );
            assert!(
                one.broker.is_empty(),
                "{name}: broker 2's override is its own"
            );
            let two = m.broker_configs(2).await.expect("read");
            assert_eq!(
                two.broker.get("log.retention.ms").map(String::as_str),
                Some("2000")
            );

            let refused = m
                .alter_broker_configs(ConfigScope::Cluster, |c| {
                    c.clear();
                    Err(Error::Invalid("no".into()))
                })
                .await;
            assert!(refused.is_err());
            assert_eq!(
                m.broker_configs(1).await.expect("read").cluster.len(),
                1,
                "{name}"
            );

            m.alter_broker_configs(ConfigScope::Cluster, |c| {
                c.remove("log.retention.ms");
                Ok(())
            })
            .await
            .expect("delete");
            assert!(m.broker_configs(1).await.expect("read").cluster.is_empty());
        }
    }
}
