//! Broker configs by Kafka's names: the static ones from the agent's settings, and the
//! dynamic ones (Kafka's KIP-226) an admin sets without a restart, stored in the
//! metastore for the whole cluster (the broker resource with an empty name) or for one
//! broker (its node id).
//!
//! A broker config's value comes from, first to last: this broker's dynamic value, the
//! cluster's dynamic default, the agent's settings, the built-in default; DescribeConfigs
//! names which as the source. The dynamic configs are the defaults topics inherit
//! (`log.retention.ms` for `retention.ms`, and the rest of Kafka's synonyms) and the
//! defaults for new topics (`num.partitions`, `default.replication.factor`). Every agent
//! re-reads them whenever the metastore's topics change (the replica manager's
//! refresh), and applies them to the topics it serves at once.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use strata_metastore::BrokerConfigs;

use crate::config::{MAX_PARTITIONS_PER_TOPIC, Settings};
use crate::topic_config::{self, Inherited, Kind, Source};

/// Topic configs and the broker configs that set their default (Kafka's synonyms).
/// `remote.storage.enable` has none: Kafka has no broker-wide default for it either.
pub const TOPIC_SYNONYMS: &[(&str, &str)] = &[
    ("cleanup.policy", "log.cleanup.policy"),
    ("compression.type", "compression.type"),
    ("delete.retention.ms", "log.cleaner.delete.retention.ms"),
    ("file.delete.delay.ms", "log.segment.delete.delay.ms"),
    ("flush.messages", "log.flush.interval.messages"),
    ("flush.ms", "log.flush.interval.ms"),
    ("index.interval.bytes", "log.index.interval.bytes"),
    ("local.retention.bytes", "log.local.retention.bytes"),
    ("local.retention.ms", "log.local.retention.ms"),
    ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    ("max.message.bytes", "message.max.bytes"),
    (
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
    ),
    (
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
    ),
    ("message.timestamp.type", "log.message.timestamp.type"),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
    ),
    ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
    ("min.insync.replicas", "min.insync.replicas"),
    ("preallocate", "log.preallocate"),
    ("retention.bytes", "log.retention.bytes"),
    ("retention.ms", "log.retention.ms"),
    ("segment.bytes", "log.segment.bytes"),
    ("segment.index.bytes", "log.index.size.max.bytes"),
    ("segment.jitter.ms", "log.roll.jitter.ms"),
    ("segment.ms", "log.roll.ms"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
    ),
];

/// The broker config that sets the default of topic config `topic`.
pub fn broker_synonym(topic: &str) -> Option<&'static str> {
    TOPIC_SYNONYMS
        .iter()
        .find(|(t, _)| *t == topic)
        .map(|(_, b)| *b)
}

fn topic_synonym(broker: &str) -> Option<&'static str> {
    TOPIC_SYNONYMS
        .iter()
        .find(|(_, b)| *b == broker)
        .map(|(t, _)| *t)
}

const NUM_PARTITIONS: &str = "num.partitions";
const REPLICATION_FACTOR: &str = "default.replication.factor";

/// One broker config as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub name: String,
    pub value: String,
    pub source: Source,
    pub kind: Kind,
    pub read_only: bool,
    /// Every level that sets it, first the one in effect (Kafka's synonyms).
    pub synonyms: Vec<(String, Source)>,
    pub doc: &'static str,
}

/// A config's value at one level, if that level sets it.
struct Levels<'a> {
    broker: Option<&'a String>,
    cluster: Option<&'a String>,
    settings: Option<String>,
    default: String,
}

impl Levels<'_> {
    fn all(&self) -> Vec<(String, Source)> {
        let mut out = Vec::new();
        if let Some(v) = self.broker {
            out.push((v.clone(), Source::DynamicBroker));
        }
        if let Some(v) = self.cluster {
            out.push((v.clone(), Source::DynamicDefault));
        }
        if let Some(v) = &self.settings {
            out.push((v.clone(), Source::StaticBroker));
        }
        out.push((self.default.clone(), Source::Default));
        out
    }
}

/// The agent's broker configs: its settings, and the dynamic configs as last read from
/// the metastore.
#[derive(Debug)]
pub struct BrokerConfig {
    /// What the agent started with: read-only configs by Kafka name, with their kind
    /// and whether the settings (rather than the built-in default) gave them.
    settings: Vec<(&'static str, String, Kind, bool)>,
    /// `topic_defaults.configs` of the settings, by topic config name.
    topic_settings: BTreeMap<String, String>,
    num_partitions: (i32, bool),
    replication_factor: (i16, bool),
    dynamic: RwLock<BrokerConfigs>,
    /// What topics inherit, derived from the above at each change (every topic's
    /// reconciliation reads it).
    inherited: RwLock<Arc<Inherited>>,
}

impl BrokerConfig {
    pub fn new(settings: &Settings, advertised: (&str, i32)) -> BrokerConfig {
        let built_in = Settings::default();
        // Every listener, the default PLAINTEXT one first if there is one (this agent's
        // own address; a named listener that is not advertised is reached at its listen
        // address).
        let specs = settings.listener_specs().unwrap_or_default();
        let listed = |f: &dyn Fn(&crate::config::ListenerSpec) -> String| {
            specs.iter().map(f).collect::<Vec<_>>()
        };
        let advertised_listeners = listed(&|l| match &l.advertised {
            _ if l.name == crate::config::DEFAULT_LISTENER && settings.kafka_listen.is_some() => {
                format!("{}://{}:{}", l.name, advertised.0, advertised.1)
            }
            Some((host, port)) => format!("{}://{host}:{port}", l.name),
            None => format!("{}://{}", l.name, l.listen),
        });
        let listeners = listed(&|l| format!("{}://{}", l.name, l.listen));
        let protocols = listed(&|l| format!("{}:{}", l.name, l.protocol.name()));
        let mut statics: Vec<(&'static str, String, Kind, bool)> = vec![
            (
                "advertised.listeners",
                advertised_listeners.join(","),
                Kind::String,
                true,
            ),
            ("listeners", listeners.join(","), Kind::String, true),
            (
                "listener.security.protocol.map",
                protocols.join(","),
                Kind::String,
                true,
            ),
            ("broker.id", settings.node_id.to_string(), Kind::Int, true),
            (
                "log.dirs",
                settings.data_dir.join("logs").display().to_string(),
                Kind::String,
                true,
            ),
        ];
        let mut push = |name: &'static str, kind: Kind, f: &dyn Fn(&Settings) -> String| {
            let v = f(settings);
            let set = v != f(&built_in);
            statics.push((name, v, kind, set));
        };
        push("auto.create.topics.enable", Kind::Boolean, &|s| {
            s.auto_create_topics.to_string()
        });
        push("broker.rack", Kind::String, &|s| {
            s.rack.clone().unwrap_or_default()
        });
        push("connections.max.idle.ms", Kind::Long, &|s| {
            s.connections_max_idle_ms.to_string()
        });
        push("connections.max.reauth.ms", Kind::Long, &|s| {
            s.connections_max_reauth_ms.to_string()
        });
        push(
            "connection.failed.authentication.delay.ms",
            Kind::Int,
            &|s| s.connection_failed_authentication_delay_ms.to_string(),
        );
        push("sasl.server.max.receive.size", Kind::Int, &|s| {
            s.sasl_server_max_receive_size.to_string()
        });
        push("sasl.enabled.mechanisms", Kind::List, &|s| {
            s.sasl_enabled_mechanisms.clone()
        });
        push(
            "authorizer.class.name",
            Kind::String,
            &|s| match s.authz().map(|a| a.enabled) {
                Ok(true) => "org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_string(),
                _ => String::new(),
            },
        );
        push("super.users", Kind::String, &|s| s.super_users.clone());
        push(
            "max.incremental.fetch.session.cache.slots",
            Kind::Int,
            &|s| s.max_incremental_fetch_session_cache_slots.to_string(),
        );
        push("quota.window.num", Kind::Int, &|s| {
            s.quota_window_num.to_string()
        });
        push("quota.window.size.seconds", Kind::Int, &|s| {
            s.quota_window_size_seconds.to_string()
        });
        push("inter.broker.listener.name", Kind::String, &|s| {
            s.inter_agent_listener.clone()
        });
        push("sasl.mechanism.inter.broker.protocol", Kind::String, &|s| {
            s.inter_agent_sasl_mechanism.clone()
        });
        push("allow.everyone.if.no.acl.found", Kind::Boolean, &|s| {
            s.allow_everyone_if_no_acl_found.to_string()
        });
        push("ssl.client.auth", Kind::String, &|s| {
            s.ssl_client_auth.clone()
        });
        push("ssl.principal.mapping.rules", Kind::String, &|s| {
            s.ssl_principal_mapping_rules.clone()
        });
        push("group.initial.rebalance.delay.ms", Kind::Int, &|s| {
            s.group_initial_rebalance_delay_ms.to_string()
        });
        push("group.max.session.timeout.ms", Kind::Int, &|s| {
            s.group_max_session_timeout_ms.to_string()
        });
        push("group.min.session.timeout.ms", Kind::Int, &|s| {
            s.group_min_session_timeout_ms.to_string()
        });
        push("log.cleaner.dedupe.buffer.size", Kind::Long, &|s| {
            s.log_cleaner_dedupe_buffer_size.to_string()
        });
        push("log.retention.check.interval.ms", Kind::Long, &|s| {
            s.log_retention_check_interval_ms.to_string()
        });
        push("max.connections", Kind::Int, &|s| {
            s.max_connections.to_string()
        });
        push("offsets.retention.minutes", Kind::Int, &|s| {
            s.offsets_retention_minutes.to_string()
        });
        push("producer.id.expiration.ms", Kind::Int, &|s| {
            s.producer_id_expiration_ms.to_string()
        });
        push("queued.max.request.bytes", Kind::Long, &|s| {
            s.queued_max_request_bytes.to_string()
        });
        push("replica.lag.time.max.ms", Kind::Long, &|s| {
            s.replica_lag_time_max_ms.to_string()
        });
        push("socket.request.max.bytes", Kind::Int, &|s| {
            s.max_request_bytes.to_string()
        });
        push("transaction.max.timeout.ms", Kind::Int, &|s| {
            s.transaction_max_timeout_ms.to_string()
        });
        push("transactional.id.expiration.ms", Kind::Int, &|s| {
            s.transactional_id_expiration_ms.to_string()
        });
        let defaults = &built_in.topic_defaults;
        let ours = &settings.topic_defaults;
        let config = BrokerConfig {
            settings: statics,
            topic_settings: ours.configs.clone(),
            num_partitions: (
                ours.num_partitions,
                ours.num_partitions != defaults.num_partitions,
            ),
            replication_factor: (
                ours.replication_factor,
                ours.replication_factor != defaults.replication_factor,
            ),
            dynamic: RwLock::new(BrokerConfigs::default()),
            inherited: RwLock::new(Arc::default()),
        };
        let inherited = config.derive_inherited(&BrokerConfigs::default());
        *config.inherited.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(inherited);
        config
    }

    fn dynamic(&self) -> std::sync::RwLockReadGuard<'_, BrokerConfigs> {
        self.dynamic.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the dynamic configs just read from the metastore; true if they changed.
    pub fn update(&self, configs: BrokerConfigs) -> bool {
        let mut dynamic = self.dynamic.write().unwrap_or_else(|p| p.into_inner());
        if *dynamic == configs {
            return false;
        }
        tracing::info!(cluster = ?configs.cluster, broker = ?configs.broker, "dynamic broker configs changed");
        *dynamic = configs;
        // Derived under the lock, so that concurrent updates store it in their order.
        let inherited = Arc::new(self.derive_inherited(&dynamic));
        *self.inherited.write().unwrap_or_else(|p| p.into_inner()) = inherited;
        true
    }

    /// What a dynamic config is at each level (`None` for a config that is not dynamic).
    fn levels<'a>(&self, name: &str, dynamic: &'a BrokerConfigs) -> Option<Levels<'a>> {
        let (settings, default) = if let Some(topic) = topic_synonym(name) {
            let def = topic_config::lookup(topic)?;
            (
                self.topic_settings.get(topic).cloned(),
                def.default.to_string(),
            )
        } else if name == NUM_PARTITIONS {
            let (v, set) = self.num_partitions;
            (set.then(|| v.to_string()), "1".to_string())
        } else if name == REPLICATION_FACTOR {
            let (v, set) = self.replication_factor;
            (set.then(|| v.to_string()), "1".to_string())
        } else {
            return None;
        };
        Some(Levels {
            broker: dynamic.broker.get(name),
            cluster: dynamic.cluster.get(name),
            settings,
            default,
        })
    }

    /// A dynamic config's value now (`None` for a config that is not dynamic).
    pub fn value(&self, name: &str) -> Option<String> {
        let dynamic = self.dynamic();
        let levels = self.levels(name, &dynamic)?;
        levels.all().into_iter().next().map(|(v, _)| v)
    }

    /// The broker-level values topics inherit, by topic config name, with their source.
    pub fn inherited(&self) -> Arc<Inherited> {
        Arc::clone(&self.inherited.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn derive_inherited(&self, dynamic: &BrokerConfigs) -> Inherited {
        let mut out = Inherited::new();
        for (topic, broker) in TOPIC_SYNONYMS {
            if let Some(levels) = self.levels(broker, dynamic)
                && let Some((v, source)) = levels.all().into_iter().next()
                && source != Source::Default
            {
                out.insert(topic.to_string(), (v, source));
            }
        }
        out
    }

    /// Where topic config `topic` would come from without the topic's own value:
    /// `(broker config name, value, source)` per level that sets it, first the one in
    /// effect, ending with the built-in default under the topic config's own name.
    pub fn topic_synonyms(&self, topic: &str) -> Vec<(String, String, Source)> {
        let dynamic = self.dynamic();
        match broker_synonym(topic).and_then(|b| Some((b, self.levels(b, &dynamic)?))) {
            Some((broker, levels)) => levels
                .all()
                .into_iter()
                .map(|(v, s)| {
                    let name = if s == Source::Default { topic } else { broker };
                    (name.to_string(), v, s)
                })
                .collect(),
            None => topic_config::lookup(topic)
                .map(|d| vec![(topic.to_string(), d.default.to_string(), Source::Default)])
                .unwrap_or_default(),
        }
    }

    /// A dynamic config's type.
    pub fn kind(&self, name: &str) -> Kind {
        dynamic_kind(name)
    }

    /// `num.partitions` now.
    pub fn num_partitions(&self) -> i32 {
        self.value(NUM_PARTITIONS)
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.num_partitions.0)
    }

    /// `default.replication.factor` now.
    pub fn replication_factor(&self) -> i16 {
        self.value(REPLICATION_FACTOR)
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.replication_factor.0)
    }

    /// Every config of this broker, in name order, as DescribeConfigs reports them.
    pub fn describe(&self) -> Vec<Described> {
        let dynamic = self.dynamic();
        let mut out: Vec<Described> = self
            .settings
            .iter()
            .map(|(name, value, kind, set)| {
                let source = if *set {
                    Source::StaticBroker
                } else {
                    Source::Default
                };
                Described {
                    name: name.to_string(),
                    value: value.clone(),
                    source,
                    kind: *kind,
                    read_only: true,
                    synonyms: vec![(value.clone(), source)],
                    doc: "Set in the agent's settings; changing it needs a restart.",
                }
            })
            .collect();
        for name in dynamic_names() {
            let Some(levels) = self.levels(name, &dynamic) else {
                continue;
            };
            let synonyms = levels.all();
            let (value, source) = synonyms[0].clone();
            out.push(Described {
                name: name.to_string(),
                value,
                source,
                kind: dynamic_kind(name),
                read_only: false,
                synonyms,
                doc: dynamic_doc(name),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The cluster's dynamic defaults, as DescribeConfigs on the default broker resource
    /// reports them (Kafka lists only what is set at that level).
    pub fn describe_cluster_defaults(&self) -> Vec<Described> {
        let dynamic = self.dynamic();
        dynamic
            .cluster
            .iter()
            .map(|(name, value)| Described {
                name: name.clone(),
                value: value.clone(),
                source: Source::DynamicDefault,
                kind: dynamic_kind(name),
                read_only: false,
                synonyms: vec![(value.clone(), Source::DynamicDefault)],
                doc: dynamic_doc(name),
            })
            .collect()
    }
}

/// Every dynamic broker config, by name.
fn dynamic_names() -> impl Iterator<Item = &'static str> {
    TOPIC_SYNONYMS
        .iter()
        .map(|(_, b)| *b)
        .chain([NUM_PARTITIONS, REPLICATION_FACTOR])
}

fn dynamic_kind(name: &str) -> Kind {
    match topic_synonym(name).and_then(topic_config::lookup) {
        Some(def) => def.kind,
        None if name == REPLICATION_FACTOR || name == NUM_PARTITIONS => Kind::Int,
        None => Kind::String,
    }
}

fn dynamic_doc(name: &str) -> &'static str {
    match topic_synonym(name).and_then(topic_config::lookup) {
        Some(def) => def.doc,
        None if name == NUM_PARTITIONS => "Partitions of a topic created without a count.",
        None if name == REPLICATION_FACTOR => "Replication factor of a topic created without one.",
        None => "",
    }
}

/// Checks that `name` may be set dynamically to `value`; the error is the message sent
/// with INVALID_CONFIG.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    validate_name(name)?;
    if let Some(topic) = topic_synonym(name) {
        return topic_config::validate_as(topic, name, value);
    }
    let range = match name {
        NUM_PARTITIONS => 1..=i64::from(MAX_PARTITIONS_PER_TOPIC),
        _ => 1..=i64::from(i16::MAX),
    };
    match value.trim().parse::<i64>() {
        Ok(n) if range.contains(&n) => Ok(()),
        Ok(_) => Err(format!(
            "Invalid value {value} for configuration {name}: Value must be between {} and {}",
            range.start(),
            range.end()
        )),
        Err(_) => Err(format!(
            "Invalid value {value} for configuration {name}: Not a number of type INT"
        )),
    }
}

/// Checks that `name` is a dynamic broker config.
pub fn validate_name(name: &str) -> Result<(), String> {
    if dynamic_names().any(|n| n == name) {
        Ok(())
    } else if is_static(name) {
        Err(format!(
            "Cannot update these configs dynamically: {name} (it is read-only: set it in \
             the agent's settings and restart)"
        ))
    } else {
        Err(format!("Unknown broker config name: {name}"))
    }
}

/// Whether `name` is a broker config strata reports but does not change at run time.
fn is_static(name: &str) -> bool {
    BrokerConfig::new(&Settings::default(), ("localhost", 9092))
        .settings
        .iter()
        .any(|(n, ..)| *n == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_synonym_names_a_topic_config() {
        for (topic, _) in TOPIC_SYNONYMS {
            assert!(topic_config::lookup(topic).is_some(), "{topic}");
        }
        let without: Vec<_> = topic_config::TOPIC_CONFIGS
            .iter()
            .filter(|d| broker_synonym(d.name).is_none())
            .map(|d| d.name)
            .collect();
        assert_eq!(without, ["remote.storage.enable"]);
    }

    #[test]
    fn levels_resolve_in_kafka_order() {
        let mut settings = Settings::default();
        settings
            .topic_defaults
            .configs
            .insert("segment.bytes".into(), "4096".into());
        let config = BrokerConfig::new(&settings, ("localhost", 9092));
        let inherited = config.inherited();
        assert_eq!(
            inherited.get("segment.bytes"),
            Some(&("4096".to_string(), Source::StaticBroker))
        );
        assert!(!inherited.contains_key("retention.ms"), "defaults stay out");

        assert!(config.update(BrokerConfigs {
            cluster: BTreeMap::from([
                ("log.segment.bytes".into(), "8192".into()),
                ("log.retention.ms".into(), "1000".into()),
                ("num.partitions".into(), "6".into()),
            ]),
            broker: BTreeMap::from([("log.retention.ms".into(), "2000".into())]),
        }));
        let inherited = config.inherited();
        assert_eq!(
            inherited.get("segment.bytes"),
            Some(&("8192".to_string(), Source::DynamicDefault))
        );
        assert_eq!(
            inherited.get("retention.ms"),
            Some(&("2000".to_string(), Source::DynamicBroker))
        );
        assert_eq!(config.num_partitions(), 6);
        let retention = config
            .describe()
            .into_iter()
            .find(|d| d.name == "log.retention.ms")
            .expect("described");
        assert_eq!(
            retention.synonyms,
            vec![
                ("2000".to_string(), Source::DynamicBroker),
                ("1000".to_string(), Source::DynamicDefault),
                ("604800000".to_string(), Source::Default),
            ]
        );
        assert_eq!(
            config.topic_synonyms("retention.ms")[0],
            (
                "log.retention.ms".to_string(),
                "2000".to_string(),
                Source::DynamicBroker
            )
        );
        let same = config.dynamic().clone();
        assert!(!config.update(same), "no change");
    }

    #[test]
    fn validates_dynamic_values() {
        assert!(validate("log.retention.ms", "1000").is_ok());
        assert_eq!(
            validate("log.retention.ms", "soon"),
            Err(
                "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"
                    .to_string()
            )
        );
        assert!(validate("num.partitions", "0").is_err());
        assert!(validate("num.partitions", "12").is_ok());
        assert!(
            validate("broker.id", "7")
                .unwrap_err()
                .contains("Cannot update")
        );
        assert!(
            validate("no.such.thing", "1")
                .unwrap_err()
                .contains("Unknown")
        );
    }
}
