//! Topic configs by Kafka's names, with Kafka's defaults and validation.
//!
//! A topic's effective config is: the built-in default, overridden by what the broker
//! sets (the agent's `topic_defaults.configs`, then the dynamic broker configs of
//! `broker_config.rs`), overridden by what the topic sets. Only what the topic sets is
//! stored with the topic in the metastore.

use std::collections::BTreeMap;

use strata_log::{LogConfig, TimestampType};

/// Kafka's config value types, as DescribeConfigs v3+ reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

#[derive(Debug, Clone, Copy)]
enum Rule {
    Any,
    AtLeast(i64),
    Fraction,
    OneOf(&'static [&'static str]),
    ListOf(&'static [&'static str]),
}

/// One known topic config.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    rule: Rule,
    pub doc: &'static str,
}

const fn def(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    rule: Rule,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        kind,
        default,
        rule,
        doc,
    }
}

/// Every topic config strata accepts, in Kafka's order (alphabetical).
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    def(
        "cleanup.policy",
        Kind::List,
        "delete",
        Rule::ListOf(&["delete", "compact"]),
        "Retention policy for old segments: delete, compact, or both.",
    ),
    def(
        "compression.type",
        Kind::String,
        "producer",
        Rule::OneOf(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
        "Accepted for compatibility; strata stores batches as the producer compressed them.",
    ),
    def(
        "delete.retention.ms",
        Kind::Long,
        "86400000",
        Rule::AtLeast(0),
        "How long tombstones are kept on compacted topics.",
    ),
    def(
        "file.delete.delay.ms",
        Kind::Long,
        "60000",
        Rule::AtLeast(0),
        "Delay before deleting a file from disk.",
    ),
    def(
        "flush.messages",
        Kind::Long,
        "9223372036854775807",
        Rule::AtLeast(1),
        "Accepted for compatibility; strata fsyncs by group commit (see docs/log-format.md).",
    ),
    def(
        "flush.ms",
        Kind::Long,
        "9223372036854775807",
        Rule::AtLeast(0),
        "Accepted for compatibility; strata fsyncs by group commit (see docs/log-format.md).",
    ),
    def(
        "index.interval.bytes",
        Kind::Int,
        "4096",
        Rule::AtLeast(0),
        "Bytes between entries of the sparse offset and time indexes.",
    ),
    def(
        "local.retention.bytes",
        Kind::Long,
        "-2",
        Rule::AtLeast(-2),
        "Bytes kept on local disk when tiering is on (-2: retention.bytes).",
    ),
    def(
        "local.retention.ms",
        Kind::Long,
        "-2",
        Rule::AtLeast(-2),
        "Time kept on local disk when tiering is on (-2: retention.ms).",
    ),
    def(
        "max.compaction.lag.ms",
        Kind::Long,
        "9223372036854775807",
        Rule::AtLeast(1),
        "Longest a record stays uncompacted.",
    ),
    def(
        "max.message.bytes",
        Kind::Int,
        "1048588",
        Rule::AtLeast(0),
        "Largest record batch accepted.",
    ),
    def(
        "message.timestamp.after.max.ms",
        Kind::Long,
        "9223372036854775807",
        Rule::AtLeast(0),
        "How far in the future a CreateTime timestamp may be.",
    ),
    def(
        "message.timestamp.before.max.ms",
        Kind::Long,
        "9223372036854775807",
        Rule::AtLeast(0),
        "How far in the past a CreateTime timestamp may be.",
    ),
    def(
        "message.timestamp.type",
        Kind::String,
        "CreateTime",
        Rule::OneOf(&["CreateTime", "LogAppendTime"]),
        "Whether records keep the producer's timestamp or get the broker's.",
    ),
    def(
        "min.cleanable.dirty.ratio",
        Kind::Double,
        "0.5",
        Rule::Fraction,
        "Dirty ratio at which compaction starts.",
    ),
    def(
        "min.compaction.lag.ms",
        Kind::Long,
        "0",
        Rule::AtLeast(0),
        "Shortest time a record stays uncompacted.",
    ),
    def(
        "min.insync.replicas",
        Kind::Int,
        "1",
        Rule::AtLeast(1),
        "Replicas that must have a write for acks=all to succeed.",
    ),
    def(
        "preallocate",
        Kind::Boolean,
        "false",
        Rule::Any,
        "Accepted for compatibility; segments are not preallocated.",
    ),
    def(
        "remote.storage.enable",
        Kind::Boolean,
        "true",
        Rule::Any,
        "Whether closed segments are tiered to object storage (strata tiers by default).",
    ),
    def(
        "retention.bytes",
        Kind::Long,
        "-1",
        Rule::AtLeast(-1),
        "Largest a partition may grow before old segments are deleted (-1: no limit).",
    ),
    def(
        "retention.ms",
        Kind::Long,
        "604800000",
        Rule::AtLeast(-1),
        "How long records are kept (-1: forever).",
    ),
    def(
        "segment.bytes",
        Kind::Int,
        "1073741824",
        Rule::AtLeast(14),
        "Size at which a segment is closed and a new one started.",
    ),
    def(
        "segment.index.bytes",
        Kind::Int,
        "10485760",
        Rule::AtLeast(4),
        "Accepted for compatibility; indexes are sized by their entries.",
    ),
    def(
        "segment.jitter.ms",
        Kind::Long,
        "0",
        Rule::AtLeast(0),
        "Accepted for compatibility; segments roll without jitter.",
    ),
    def(
        "segment.ms",
        Kind::Long,
        "604800000",
        Rule::AtLeast(1),
        "Age at which a non-empty segment is closed.",
    ),
    def(
        "unclean.leader.election.enable",
        Kind::Boolean,
        "false",
        Rule::Any,
        "Whether an out-of-sync replica may become leader.",
    ),
];

pub fn lookup(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks one config name and value the way Kafka does; the error is the message
/// returned with INVALID_CONFIG.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    validate_as(name, name, value)
}

/// [`validate`] for topic config `name` set under another name, `shown` (a broker
/// config that sets its default), which the error names.
pub fn validate_as(name: &str, shown: &str, value: &str) -> Result<(), String> {
    let def = lookup(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    let name = shown;
    let bad = |why: &str| {
        Err(format!(
            "Invalid value {value} for configuration {name}: {why}"
        ))
    };
    match def.kind {
        Kind::Boolean => {
            if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") {
                return bad("Expected value to be either true or false");
            }
        }
        Kind::Int | Kind::Long => {
            let parsed = if def.kind == Kind::Int {
                value.trim().parse::<i32>().map(i64::from).ok()
            } else {
                value.trim().parse::<i64>().ok()
            };
            let Some(n) = parsed else {
                return bad(if def.kind == Kind::Int {
                    "Not a number of type INT"
                } else {
                    "Not a number of type LONG"
                });
            };
            if let Rule::AtLeast(min) = def.rule
                && n < min
            {
                return bad(&format!("Value must be at least {min}"));
            }
        }
        Kind::Double => match value.trim().parse::<f64>() {
            Ok(x) if matches!(def.rule, Rule::Fraction) && !(0.0..=1.0).contains(&x) => {
                return bad("Value must be between 0 and 1");
            }
            Ok(_) => {}
            Err(_) => return bad("Not a number of type DOUBLE"),
        },
        Kind::String => {
            if let Rule::OneOf(allowed) = def.rule
                && !allowed.contains(&value)
            {
                return bad(&format!("String must be one of: {}", allowed.join(", ")));
            }
        }
        Kind::List => {
            if let Rule::ListOf(allowed) = def.rule {
                let items: Vec<&str> = value.split(',').map(str::trim).collect();
                if items.iter().any(|i| !allowed.contains(i)) || items.is_empty() {
                    return bad(&format!("Each item must be one of: {}", allowed.join(", ")));
                }
            }
        }
    }
    Ok(())
}

/// Validates a whole set of configs.
pub fn validate_all<'a>(
    configs: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), String> {
    configs.into_iter().try_for_each(|(k, v)| validate(k, v))
}

/// Where an effective value came from (Kafka's config source codes): set on the topic,
/// as a dynamic config of this broker or of the cluster's default (e.g.
/// `log.retention.ms` for `retention.ms`), in the agent's `topic_defaults`, or Kafka's
/// default.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[schema(as = TopicConfigSource)]
pub enum Source {
    Topic = 1,
    DynamicBroker = 2,
    DynamicDefault = 3,
    #[serde(rename = "broker")]
    StaticBroker = 4,
    Default = 5,
}

impl Source {
    /// How the HTTP API and the CLI name it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Topic => "topic",
            Source::DynamicBroker => "dynamic_broker",
            Source::DynamicDefault => "dynamic_default",
            Source::StaticBroker => "broker",
            Source::Default => "default",
        }
    }
}

/// What topics inherit from the broker, by topic config name: the value and the level
/// that set it.
pub type Inherited = BTreeMap<String, (String, Source)>;

/// A topic's effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    values: BTreeMap<&'static str, (String, Source)>,
}

impl TopicConfig {
    /// Combines defaults, broker defaults and the topic's own settings. All inputs must
    /// have passed [`validate`].
    pub fn resolve(broker: &Inherited, topic: &BTreeMap<String, String>) -> TopicConfig {
        let mut values = BTreeMap::new();
        for d in TOPIC_CONFIGS {
            let v = if let Some(v) = topic.get(d.name) {
                (v.clone(), Source::Topic)
            } else if let Some(v) = broker.get(d.name) {
                v.clone()
            } else {
                (d.default.to_string(), Source::Default)
            };
            values.insert(d.name, v);
        }
        TopicConfig { values }
    }

    pub fn entries(&self) -> impl Iterator<Item = (&'static str, &str, Source)> {
        self.values.iter().map(|(k, (v, s))| (*k, v.as_str(), *s))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|(v, _)| v.as_str())
    }

    fn long(&self, name: &str) -> i64 {
        self.get(name)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| {
                lookup(name)
                    .and_then(|d| d.default.parse().ok())
                    .unwrap_or_default()
            })
    }

    /// `min.insync.replicas`: in-sync replicas an acks=all write needs.
    pub fn min_insync_replicas(&self) -> usize {
        self.long("min.insync.replicas").max(1) as usize
    }

    /// `unclean.leader.election.enable`: whether an out-of-sync replica may lead when no
    /// in-sync one is live (availability over acknowledged writes).
    pub fn unclean_leader_election(&self) -> bool {
        self.get("unclean.leader.election.enable")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// Whether the topic's closed segments go to the archive (compacted topics too:
    /// their archive is compacted as well, where Kafka leaves them out of KIP-405).
    pub fn tiered(&self) -> bool {
        self.get("remote.storage.enable")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// The compaction settings, if `cleanup.policy` compacts (`compact` or
    /// `compact,delete`).
    pub fn compaction(&self) -> Option<strata_compactor::CompactionPolicy> {
        let compacts = self
            .get("cleanup.policy")
            .is_some_and(|p| p.split(',').any(|x| x.trim() == "compact"));
        compacts.then(|| strata_compactor::CompactionPolicy {
            min_cleanable_dirty_ratio: self
                .get("min.cleanable.dirty.ratio")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.5),
            min_compaction_lag_ms: self.long("min.compaction.lag.ms"),
            max_compaction_lag_ms: self.long("max.compaction.lag.ms"),
            delete_retention_ms: self.long("delete.retention.ms"),
        })
    }

    /// `(local.retention.ms, local.retention.bytes)`, with -2 resolved to the total
    /// retention as KIP-405 says.
    pub fn local_retention(&self) -> (i64, i64) {
        let ms = match self.long("local.retention.ms") {
            -2 => self.long("retention.ms"),
            v => v,
        };
        let bytes = match self.long("local.retention.bytes") {
            -2 => self.long("retention.bytes"),
            v => v,
        };
        (ms, bytes)
    }

    /// `retention.ms` and `retention.bytes`, if `cleanup.policy` deletes (`delete` or
    /// `compact,delete`).
    pub fn retention(&self) -> Option<strata_compactor::Policy> {
        let deletes = self
            .get("cleanup.policy")
            .is_some_and(|p| p.split(',').any(|x| x.trim() == "delete"));
        deletes.then(|| strata_compactor::Policy {
            retention_ms: self.long("retention.ms"),
            retention_bytes: self.long("retention.bytes"),
        })
    }

    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            segment_bytes: self.long("segment.bytes").max(14) as u64,
            segment_ms: self.long("segment.ms").max(1),
            index_interval_bytes: self.long("index.interval.bytes").max(0) as u64,
            max_message_bytes: self.long("max.message.bytes").max(0) as usize,
            max_decompressed_bytes: strata_log::batch::MAX_DECOMPRESSED_BYTES,
            timestamp_type: if self.get("message.timestamp.type") == Some("LogAppendTime") {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            },
            keys_required: self
                .get("cleanup.policy")
                .is_some_and(|p| p.split(',').any(|x| x.trim() == "compact")),
            ack_after_fsync: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_like_kafka() {
        assert!(validate("retention.ms", "-1").is_ok());
        assert!(validate("retention.ms", "-2").is_err());
        assert!(validate("retention.ms", "abc").is_err());
        assert!(validate("segment.bytes", "13").is_err());
        assert!(
            validate("segment.bytes", "99999999999").is_err(),
            "INT overflow"
        );
        assert!(validate("cleanup.policy", "compact,delete").is_ok());
        assert!(validate("cleanup.policy", "shred").is_err());
        assert!(validate("message.timestamp.type", "LogAppendTime").is_ok());
        assert!(validate("message.timestamp.type", "Whenever").is_err());
        assert!(validate("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(validate("preallocate", "yes").is_err());
        assert_eq!(
            validate("no.such.config", "1"),
            Err("Unknown topic config name: no.such.config".to_string())
        );
    }

    #[test]
    fn resolves_in_order() {
        let broker = Inherited::from([(
            "segment.bytes".to_string(),
            ("2048".to_string(), Source::StaticBroker),
        )]);
        let topic = BTreeMap::from([("max.message.bytes".to_string(), "100".to_string())]);
        let c = TopicConfig::resolve(&broker, &topic);
        let log = c.log_config();
        assert_eq!((log.segment_bytes, log.max_message_bytes), (2048, 100));
        assert_eq!(
            c.entries().find(|e| e.0 == "segment.bytes").map(|e| e.2),
            Some(Source::StaticBroker)
        );
        assert_eq!(
            c.entries().find(|e| e.0 == "retention.ms").map(|e| e.2),
            Some(Source::Default)
        );
    }
}
