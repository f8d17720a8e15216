//! Agent settings: defaults in one place ([`Settings::default`]), overridden by an
//! optional TOML file, then by `STRATA_*` environment variables and flags (clap reads
//! both; a flag beats its variable).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Everything an agent needs to start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// This agent's broker id, as clients see it.
    pub node_id: i32,
    /// Kafka's `broker.rack`: shown in Metadata (placement by rack comes with replication).
    pub rack: Option<String>,
    /// Where the Kafka listener binds.
    pub kafka_listen: SocketAddr,
    /// `host:port` clients are told to connect to; defaults to `kafka_listen`.
    pub kafka_advertised: Option<String>,
    /// Where the HTTP API binds.
    pub http_listen: SocketAddr,
    /// Segments, the lock file and (by default) the embedded metastore live here.
    pub data_dir: PathBuf,
    /// Which metastore holds the cluster's authoritative state.
    pub metastore: MetastoreKind,
    /// The embedded metastore file; defaults to `{data_dir}/metastore.sqlite`.
    pub metastore_path: Option<PathBuf>,
    /// FoundationDB's cluster file (`metastore = "fdb"`); defaults to the client's own
    /// default, `/etc/foundationdb/fdb.cluster` or `FDB_CLUSTER_FILE`.
    pub fdb_cluster_file: Option<PathBuf>,
    /// Every key this cluster keeps in FoundationDB is under the tuple `(fdb_prefix,)`;
    /// strata clusters sharing one FoundationDB cluster need different prefixes.
    pub fdb_prefix: String,
    /// Largest request frame accepted (Kafka's `socket.request.max.bytes`).
    pub max_request_bytes: usize,
    /// Kafka's `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// Defaults for new topics.
    pub topic_defaults: TopicDefaults,
    /// Kafka's `group.initial.rebalance.delay.ms`: how long the first rebalance of an
    /// empty group waits for more members.
    pub group_initial_rebalance_delay_ms: i64,
    /// Kafka's `group.min.session.timeout.ms` and `group.max.session.timeout.ms`.
    pub group_min_session_timeout_ms: i64,
    pub group_max_session_timeout_ms: i64,
    /// Kafka's `offsets.retention.minutes`: offsets of an empty group older than this go.
    pub offsets_retention_minutes: i64,
    /// Kafka's `producer.id.expiration.ms`: idempotent-producer state idle this long goes.
    pub producer_id_expiration_ms: i64,
    /// Where archived segments go: `file:///dir` or `s3://bucket/prefix` (AWS settings
    /// from the environment). Default: `file://{data_dir}/archive`.
    pub archive_url: Option<String>,
    /// Run the tiering worker inside this agent (off when `strata tiering` runs apart).
    pub tiering_enabled: bool,
    /// How often the tiering worker looks for closed segments.
    pub tiering_interval_ms: u64,
    /// Bytes of archived data (rebuilt row groups) kept in memory for replays.
    pub archive_cache_bytes: u64,
    /// This agent's membership lease (ms), renewed every fifth of it. An agent whose
    /// lease ran out is out of the cluster: its partitions get new leaders.
    pub lease_ms: u64,
    /// Kafka's `replica.lag.time.max.ms`: a follower not caught up for this long leaves
    /// the ISR.
    pub replica_lag_time_max_ms: i64,
    /// How often the controller hands leadership back to preferred replicas (Kafka's
    /// `leader.imbalance.check.interval.seconds`, in ms); 0 turns it off (Kafka's
    /// `auto.leader.rebalance.enable=false`).
    pub leader_rebalance_interval_ms: u64,
}

/// The metastore backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum MetastoreKind {
    /// A SQLite file on this machine (agents on one machine may share it).
    #[default]
    Embedded,
    /// FoundationDB: production, and any cluster spanning machines. Needs a `strata`
    /// built with `--features fdb`.
    Fdb,
}

/// Defaults for topics created without explicit values.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicDefaults {
    /// Kafka's `num.partitions`.
    pub num_partitions: i32,
    /// Kafka's `default.replication.factor`.
    pub replication_factor: i16,
    /// Topic configs (Kafka names, e.g. `segment.bytes`) applied to every topic that does
    /// not set them itself; validated at start like topic configs.
    pub configs: BTreeMap<String, String>,
}

impl Default for TopicDefaults {
    fn default() -> Self {
        TopicDefaults {
            num_partitions: 1,
            replication_factor: 1,
            configs: BTreeMap::new(),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node_id: 1,
            rack: None,
            kafka_listen: SocketAddr::from(([127, 0, 0, 1], 9092)),
            kafka_advertised: None,
            http_listen: SocketAddr::from(([127, 0, 0, 1], 9644)),
            data_dir: PathBuf::from("./data"),
            metastore: MetastoreKind::Embedded,
            metastore_path: None,
            fdb_cluster_file: None,
            fdb_prefix: "strata".to_string(),
            max_request_bytes: 100 * 1024 * 1024,
            auto_create_topics: true,
            topic_defaults: TopicDefaults::default(),
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 1_800_000,
            offsets_retention_minutes: 7 * 24 * 60,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            archive_url: None,
            tiering_enabled: true,
            tiering_interval_ms: 1000,
            archive_cache_bytes: 256 * 1024 * 1024,
            lease_ms: 10_000,
            replica_lag_time_max_ms: 30_000,
            leader_rebalance_interval_ms: 30_000,
        }
    }
}

impl Settings {
    /// Reads a TOML settings file; absent keys keep their defaults.
    pub fn from_toml_file(path: &Path) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read settings file {}: {e}", path.display()))?;
        toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("invalid settings file {}: {e}", path.display()))
    }

    pub fn metastore_path(&self) -> PathBuf {
        self.metastore_path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("metastore.sqlite"))
    }

    /// The `(host, port)` clients are told to use.
    pub fn advertised(&self) -> anyhow::Result<(String, i32)> {
        match &self.kafka_advertised {
            None => Ok((
                self.kafka_listen.ip().to_string(),
                i32::from(self.kafka_listen.port()),
            )),
            Some(a) => {
                let (host, port) = a
                    .rsplit_once(':')
                    .ok_or_else(|| anyhow::anyhow!("kafka_advertised '{a}' is not host:port"))?;
                let port: u16 = port
                    .parse()
                    .map_err(|_| anyhow::anyhow!("kafka_advertised '{a}' has a bad port"))?;
                Ok((host.to_string(), i32::from(port)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_defaults() {
        let s: Settings = toml::from_str(
            r#"
            node_id = 3
            kafka_listen = "0.0.0.0:19092"
            kafka_advertised = "broker-3.internal:19092"
            [topic_defaults]
            num_partitions = 6
            configs = { "segment.bytes" = "1048576" }
            "#,
        )
        .expect("parse");
        assert_eq!(s.node_id, 3);
        assert_eq!(s.topic_defaults.num_partitions, 6);
        assert_eq!(s.topic_defaults.replication_factor, 1);
        assert_eq!(
            s.advertised().expect("advertised"),
            ("broker-3.internal".to_string(), 19092)
        );
        assert_eq!(s.http_listen, Settings::default().http_listen);
        assert!(toml::from_str::<Settings>("no_such_setting = 1").is_err());
    }
}
