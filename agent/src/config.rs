//! Agent settings: defaults in one place ([`Settings::default`]), overridden by an
//! optional TOML file, then by `STRATA_*` environment variables and flags (clap reads
//! both; a flag beats its variable).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::context::SecurityProtocol;

/// A setting never shown: `Debug` prints `<hidden>`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<hidden>"
        })
    }
}

/// `ip:port`, `localhost:port`, or `none` (no listener there).
pub fn parse_listen(given: &str) -> Result<Option<SocketAddr>, String> {
    let given = given.trim();
    if given.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    if let Ok(address) = given.parse::<SocketAddr>() {
        return Ok(Some(address));
    }
    match split_host_port(given) {
        Some(("localhost", port)) => Ok(Some(SocketAddr::from(([127, 0, 0, 1], port)))),
        _ => Err(format!(
            "{given:?} is not ip:port, localhost:port or none (e.g. 0.0.0.0:9092)"
        )),
    }
}

fn listen_or_none<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    let given = String::deserialize(deserializer)?;
    parse_listen(&given).map_err(serde::de::Error::custom)
}

/// Everything an agent needs to start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// This agent's broker id, as clients see it.
    pub node_id: i32,
    /// Kafka's `broker.rack`: shown in Metadata (placement by rack comes with replication).
    pub rack: Option<String>,
    /// Where the default Kafka listener (named PLAINTEXT, unauthenticated) binds;
    /// `None` (`"none"` in the file or the flag): there is none, only `listeners`.
    #[serde(deserialize_with = "listen_or_none")]
    pub kafka_listen: Option<SocketAddr>,
    /// `host:port` clients are told to connect to; defaults to `kafka_listen`.
    pub kafka_advertised: Option<String>,
    /// More Kafka listeners beside the default one at `kafka_listen` (which is named
    /// PLAINTEXT and carries the agents' own traffic), in Kafka's `listeners` form:
    /// `NAME://host:port` separated by commas (`SASL_PLAINTEXT://0.0.0.0:9093`). With
    /// `kafka_listen` none, these are every listener, as Kafka's `listeners` is.
    pub listeners: String,
    /// Where clients reach those listeners, in Kafka's `advertised.listeners` form; a
    /// listener left out is advertised at its listen address.
    pub advertised_listeners: String,
    /// Each listener name's security protocol, in Kafka's
    /// `listener.security.protocol.map` form (`CLIENT:SASL_PLAINTEXT`); a listener named
    /// after a protocol has that protocol without an entry.
    pub listener_security_protocol_map: String,
    /// The SASL mechanisms SASL listeners offer (Kafka's `sasl.enabled.mechanisms`).
    pub sasl_enabled_mechanisms: String,
    /// The JWKS document (a file) whose public keys OAUTHBEARER tokens must be signed
    /// by (Kafka's `sasl.oauthbearer.jwks.endpoint.url`, as a file).
    pub sasl_oauthbearer_jwks_location: Option<PathBuf>,
    /// The `iss` OAUTHBEARER tokens must carry, if set
    /// (`sasl.oauthbearer.expected.issuer`).
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// Audiences, comma-separated, one of which a token's `aud` must name; empty: not
    /// checked (`sasl.oauthbearer.expected.audience`).
    pub sasl_oauthbearer_expected_audience: String,
    /// The claim naming the principal (`sasl.oauthbearer.sub.claim.name`).
    pub sasl_oauthbearer_sub_claim_name: String,
    /// How far a token's `exp` and `nbf` may be off the agent's clock
    /// (`sasl.oauthbearer.clock.skew.seconds`).
    pub sasl_oauthbearer_clock_skew_seconds: u64,
    /// How long an authenticated SASL session lasts before the client must
    /// re-authenticate (Kafka's `connections.max.reauth.ms`, KIP-368); 0: for ever.
    pub connections_max_reauth_ms: u64,
    /// How long a failed authentication waits before its answer (Kafka's
    /// `connection.failed.authentication.delay.ms`); doubled for each further failure
    /// from the same address within ten minutes, up to 5 s.
    pub connection_failed_authentication_delay_ms: u64,
    /// The largest request frame a SASL listener reads before the connection has
    /// authenticated (Kafka's `sasl.server.max.receive.size`): a larger one closes the
    /// connection unread, so an unauthenticated client cannot make the agent hold (or
    /// echo back) a large message.
    pub sasl_server_max_receive_size: u32,
    /// The agent's certificate chain for SSL and SASL_SSL listeners, PEM (its own
    /// certificate first; Kafka's `ssl.keystore.location` with type PEM).
    pub ssl_certificate_location: Option<PathBuf>,
    /// The private key of that certificate, PEM.
    pub ssl_key_location: Option<PathBuf>,
    /// The authorities client certificates must chain to, PEM (Kafka's
    /// `ssl.truststore.location` with type PEM).
    pub ssl_truststore_location: Option<PathBuf>,
    /// Whether SSL listeners ask clients for certificates: `none`, `requested` or
    /// `required` (Kafka's `ssl.client.auth`; SASL_SSL listeners ask for none, KIP-684).
    pub ssl_client_auth: String,
    /// The listener agents reach each other on (Kafka's `inter.broker.listener.name`):
    /// `PLAINTEXT`, the one at `kafka_listen`, or a SASL_PLAINTEXT one of `listeners`,
    /// on which they authenticate as `inter_agent_sasl_username`.
    pub inter_agent_listener: String,
    /// The SASL mechanism agents authenticate to each other with (Kafka's
    /// `sasl.mechanism.inter.broker.protocol`): SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN.
    pub inter_agent_sasl_mechanism: String,
    /// The agents' own user on a SASL inter-agent listener (its SCRAM credential is in
    /// the metastore, like any user's).
    pub inter_agent_sasl_username: String,
    pub inter_agent_sasl_password: Secret,
    /// How many samples a client quota's rate is measured over (Kafka's
    /// `quota.window.num`).
    pub quota_window_num: usize,
    /// How long each sample lasts (Kafka's `quota.window.size.seconds`).
    pub quota_window_size_seconds: u64,
    /// How HTTP API callers authenticate: empty for not at all (everyone is
    /// `User:ANONYMOUS`), or `basic` (SCRAM users' passwords), `bearer` (OAUTHBEARER's
    /// JWTs), or both, comma-separated.
    pub http_authentication: String,
    /// The authorizer (Kafka's `authorizer.class.name`): empty for none (every request
    /// allowed, as Kafka without one), `acl` for ACLs in the metastore (Kafka's
    /// `StandardAuthorizer` and `AclAuthorizer` class names mean the same).
    pub authorizer: String,
    /// Principals allowed everything, separated by `;` (Kafka's `super.users`:
    /// `User:admin;User:ops`).
    pub super_users: String,
    /// Whether a resource no ACL names is open to everyone (Kafka's
    /// `allow.everyone.if.no.acl.found`); false: closed to all but super users.
    pub allow_everyone_if_no_acl_found: bool,
    /// How a client certificate's subject becomes its principal (Kafka's
    /// `ssl.principal.mapping.rules`).
    pub ssl_principal_mapping_rules: String,
    /// How often the TLS files are read again, so a renewed certificate is used without
    /// a restart.
    pub ssl_reload_interval_ms: u64,
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
    /// How many incremental fetch sessions (KIP-227) the agent keeps at once (Kafka's
    /// `max.incremental.fetch.session.cache.slots`); 0 turns them off, and every fetch
    /// is then answered as a full one.
    pub max_incremental_fetch_session_cache_slots: u64,
    /// Bytes of requests being read or handled that the agent holds in memory at once,
    /// over all connections (Kafka's `queued.max.request.bytes`); a connection whose
    /// next frame does not fit waits, without reading it, until others finish.
    pub queued_max_request_bytes: usize,
    /// How long a request frame may take to arrive once its size is read; a connection
    /// that sends part of a frame and stalls is closed after this.
    pub request_read_timeout_ms: u64,
    /// Kafka's `max.connections`: client connections the agent holds at once. At the
    /// limit it stops accepting until one closes (new ones wait in the listen backlog).
    pub max_connections: usize,
    /// Kafka's `max.connections.per.ip`: client connections one address may hold at
    /// once; past it a new connection is closed as soon as it is accepted. Unbounded by
    /// default, as in Kafka.
    pub max_connections_per_ip: usize,
    /// Kafka's `max.connections.per.ip.overrides`: other limits for some addresses
    /// (IP address to limit; 0 refuses an address altogether).
    pub max_connections_per_ip_overrides: BTreeMap<std::net::IpAddr, usize>,
    /// Kafka's `connections.max.idle.ms`: a connection that sends no request for this
    /// long, with no reply on its way, is closed.
    pub connections_max_idle_ms: u64,
    /// How long the agent works on a request whose API has no timeout of its own
    /// (Produce has `timeout_ms`, Fetch `max_wait_ms`): Kafka clients' default
    /// `request.timeout.ms`, after which they give up on the answer.
    pub request_timeout_ms: u64,
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
    /// Do the archive's compaction, merging and collection inside this agent, for the
    /// partitions it leads (off when `strata compactor` runs apart; a lease per
    /// partition keeps the two from working on one partition at once either way).
    pub compactor_enabled: bool,
    /// Run the tiering worker inside this agent (off when `strata tiering` runs apart).
    pub tiering_enabled: bool,
    /// How often the tiering worker looks for closed segments.
    pub tiering_interval_ms: u64,
    /// Bytes per second, at most, of closed segments the tiering worker reads and
    /// encodes for the archive (Kafka's `remote.log.manager.copy.max.bytes.per.second`);
    /// 0: no limit.
    pub tiering_max_bytes_per_second: u64,
    /// Kafka's `log.cleaner.io.max.bytes.per.second`: bytes per second, at most, that
    /// log and archive compaction and archive merging read; 0: no limit.
    pub log_cleaner_io_max_bytes_per_second: u64,
    /// Threads of the background pool, which runs tiering's encoding, compaction and
    /// merging at a lower CPU priority than requests; 0: half the cores (at least one).
    pub background_threads: usize,
    /// The background pool's CPU priority: `idle` (only CPU requests leave unused) or
    /// `low` (nice 10: about a tenth of a saturated CPU).
    pub background_priority: BackgroundPriority,
    /// Kafka's `log.retention.check.interval.ms`: how often the leader applies
    /// `retention.ms` and `retention.bytes` and collects archived objects.
    pub log_retention_check_interval_ms: u64,
    /// How long an archived object that no manifest names any more (past retention, of
    /// a deleted topic, or an upload never published) stays in the store before it is
    /// deleted: longer than any read or upload in flight (calls time out after a
    /// minute).
    pub archive_gc_grace_ms: i64,
    /// Kafka's `log.cleaner.backoff.ms`: how often the cleaner looks for compacted
    /// partitions whose dirty ratio (or `max.compaction.lag.ms`) asks for a pass.
    pub log_cleaner_backoff_ms: u64,
    /// Kafka's `log.cleaner.dedupe.buffer.size`: the most a log-compaction pass holds
    /// in its key map (allocated as keys come, not up front).
    pub log_cleaner_dedupe_buffer_size: usize,
    /// Kafka's `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a
    /// transactional producer may ask for.
    pub transaction_max_timeout_ms: i64,
    /// Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often
    /// the coordinator aborts transactions open past their timeout.
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: u64,
    /// Kafka's `transactional.id.expiration.ms`: how long a transactional id with no
    /// transaction is remembered.
    pub transactional_id_expiration_ms: i64,
    /// Archived objects smaller than this (low-traffic partitions) are merged with their
    /// neighbours into objects of at most this size; 0 turns merging off.
    pub archive_merge_target_bytes: u64,
    /// Bytes of archived data (rebuilt row groups) kept in memory for replays.
    pub archive_cache_bytes: u64,
    /// This agent's membership lease (ms), renewed every fifth of it. An agent whose
    /// lease ran out is out of the cluster: its partitions get new leaders.
    pub lease_ms: u64,
    /// Kafka's `replica.lag.time.max.ms`: a follower not caught up for this long leaves
    /// the ISR.
    pub replica_lag_time_max_ms: i64,
    /// When a leader counts what it wrote as durable, and so when acks=all is answered
    /// and consumers may read it: after fsync (the default), or once it is in the page
    /// cache, as Kafka does by default (for like-for-like comparisons; a power loss on
    /// every replica at once may then lose acknowledged writes).
    pub ack_durability: AckDurability,
    /// How often the controller hands leadership back to preferred replicas (Kafka's
    /// `leader.imbalance.check.interval.seconds`, in ms); 0 turns it off (Kafka's
    /// `auto.leader.rebalance.enable=false`).
    pub leader_rebalance_interval_ms: u64,
    /// How long (ms) an agent may be gone (its lease ended, or it left) before the
    /// controller replaces its replicas with replicas on live agents.
    pub replica_replacement_delay_ms: u64,
    /// Partitions the controller moves at once, at most, cluster-wide (replacements,
    /// drains and balancing).
    pub replica_moves_max: usize,
    /// Whether the controller spreads replicas and preferred leaderships evenly over the
    /// live agents (a new agent receives its share).
    pub replica_balance_enabled: bool,
    /// Bytes per second, at most, one agent copies into replicas that are not in sync
    /// (a new or emptied replica rebuilding, from the archive and from its leader);
    /// 0: no limit. Followers in sync are never held back.
    pub replica_rebuild_max_bytes_per_second: u64,
}

/// What the controller's self-healing and balancing may do (`controller.rs`,
/// [`strata_replication::placement::Policy`]).
#[derive(Debug, Clone, Copy)]
pub struct Healing {
    pub replacement_delay: std::time::Duration,
    pub max_moves: usize,
    pub balance: bool,
}

impl Healing {
    pub fn policy(&self) -> strata_replication::placement::Policy {
        strata_replication::placement::Policy {
            replacement_delay_ms: self.replacement_delay.as_millis() as i64,
            max_moves: self.max_moves,
            balance: self.balance,
        }
    }
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

/// The CPU priority of background work (`background_priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BackgroundPriority {
    /// Linux's SCHED_IDLE: only CPU that requests leave unused.
    #[default]
    Idle,
    /// Nice 10: about a tenth of the CPU when requests saturate it.
    Low,
}

/// What a leader waits for before it counts a write as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AckDurability {
    /// fsync (group commit): acknowledged writes survive a power loss of every replica.
    #[default]
    Fsync,
    /// The page cache, as Kafka's defaults (`flush.messages`/`flush.ms` unset): the
    /// flusher still fsyncs in the background, but nothing waits for it.
    PageCache,
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
            kafka_listen: Some(SocketAddr::from(([127, 0, 0, 1], 9092))),
            kafka_advertised: None,
            listeners: String::new(),
            advertised_listeners: String::new(),
            listener_security_protocol_map: String::new(),
            sasl_enabled_mechanisms: "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN".to_string(),
            sasl_oauthbearer_jwks_location: None,
            sasl_oauthbearer_expected_issuer: None,
            sasl_oauthbearer_expected_audience: String::new(),
            sasl_oauthbearer_sub_claim_name: "sub".to_string(),
            sasl_oauthbearer_clock_skew_seconds: 30,
            connections_max_reauth_ms: 0,
            connection_failed_authentication_delay_ms: 100,
            sasl_server_max_receive_size: 524_288,
            inter_agent_listener: DEFAULT_LISTENER.to_string(),
            inter_agent_sasl_mechanism: "SCRAM-SHA-512".to_string(),
            inter_agent_sasl_username: String::new(),
            inter_agent_sasl_password: Secret::default(),
            quota_window_num: 11,
            max_incremental_fetch_session_cache_slots: 1000,
            quota_window_size_seconds: 1,
            http_authentication: String::new(),
            authorizer: String::new(),
            super_users: String::new(),
            allow_everyone_if_no_acl_found: false,
            ssl_certificate_location: None,
            ssl_key_location: None,
            ssl_truststore_location: None,
            ssl_client_auth: "none".to_string(),
            ssl_principal_mapping_rules: "DEFAULT".to_string(),
            ssl_reload_interval_ms: 10_000,
            http_listen: SocketAddr::from(([127, 0, 0, 1], 9644)),
            data_dir: PathBuf::from("./data"),
            metastore: MetastoreKind::Embedded,
            metastore_path: None,
            fdb_cluster_file: None,
            fdb_prefix: "strata".to_string(),
            max_request_bytes: 100 * 1024 * 1024,
            queued_max_request_bytes: 256 * 1024 * 1024,
            request_read_timeout_ms: 30_000,
            max_connections: 10_000,
            max_connections_per_ip: usize::MAX,
            max_connections_per_ip_overrides: BTreeMap::new(),
            connections_max_idle_ms: 600_000,
            request_timeout_ms: 30_000,
            auto_create_topics: true,
            topic_defaults: TopicDefaults::default(),
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 1_800_000,
            offsets_retention_minutes: 7 * 24 * 60,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            archive_url: None,
            compactor_enabled: true,
            tiering_enabled: true,
            tiering_interval_ms: 1000,
            tiering_max_bytes_per_second: 0,
            log_cleaner_io_max_bytes_per_second: 0,
            background_threads: 0,
            log_cleaner_backoff_ms: 15_000,
            background_priority: BackgroundPriority::Idle,
            log_retention_check_interval_ms: 300_000,
            archive_gc_grace_ms: 600_000,
            log_cleaner_dedupe_buffer_size: 128 * 1024 * 1024,
            archive_merge_target_bytes: 64 * 1024 * 1024,
            transaction_max_timeout_ms: 900_000,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            archive_cache_bytes: 256 * 1024 * 1024,
            lease_ms: 10_000,
            replica_lag_time_max_ms: 30_000,
            leader_rebalance_interval_ms: 30_000,
            replica_replacement_delay_ms: 300_000,
            replica_moves_max: 20,
            replica_balance_enabled: true,
            replica_rebuild_max_bytes_per_second: 100 * 1024 * 1024,
            ack_durability: AckDurability::Fsync,
        }
    }
}

/// The most partitions one topic may have, and the most one CreatePartitions may bring
/// a topic to (INVALID_PARTITIONS above). Kafka has no fixed limit; this one keeps a
/// topic's creation within one metastore transaction (well under FoundationDB's 10 MB
/// even with 249-character names) and bounds what a request can make the agent allocate.
pub const MAX_PARTITIONS_PER_TOPIC: i32 = 10_000;

/// The smallest `max_request_bytes`: room for any request header and a small batch.
const MIN_REQUEST_BYTES: usize = 64 * 1024;

/// Parses Kafka's `max.connections.per.ip.overrides` form, `address:limit` pairs
/// separated by commas (`10.0.0.7:50,[::1]:0`). Addresses must be IP addresses.
pub fn parse_connection_overrides(text: &str) -> Result<BTreeMap<std::net::IpAddr, usize>, String> {
    let mut out = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (host, limit) = pair
            .rsplit_once(':')
            .ok_or_else(|| format!("{pair:?} is not address:limit"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip: std::net::IpAddr = host
            .parse()
            .map_err(|_| format!("{host:?} in {pair:?} is not an IP address"))?;
        let limit: usize = limit
            .parse()
            .map_err(|_| format!("{limit:?} in {pair:?} is not a connection count"))?;
        out.insert(ip, limit);
    }
    Ok(out)
}

impl Settings {
    /// Checks every setting whose wrong value would only show later (a panic on the
    /// first auto-created topic, a lease that can never be renewed), so that the agent
    /// What the controller's self-healing and balancing may do.
    pub fn healing(&self) -> Healing {
        Healing {
            replacement_delay: std::time::Duration::from_millis(self.replica_replacement_delay_ms),
            max_moves: self.replica_moves_max,
            balance: self.replica_balance_enabled,
        }
    }

    /// The background pool: its threads and each kind's byte rate.
    pub fn background(&self) -> strata_core::background::Limits {
        strata_core::background::Limits {
            threads: match self.background_threads {
                0 => strata_core::background::Limits::for_this_machine().threads,
                n => n,
            },
            priority: match self.background_priority {
                BackgroundPriority::Idle => strata_core::background::Priority::Idle,
                BackgroundPriority::Low => strata_core::background::Priority::Low,
            },
            tiering_bytes_per_second: self.tiering_max_bytes_per_second,
            compaction_bytes_per_second: self.log_cleaner_io_max_bytes_per_second,
        }
    }

    /// Checks every setting whose wrong value would only show later (a panic on the
    /// first auto-created topic, a lease that can never be renewed), so that the agent
    /// refuses to start with a message naming the setting instead.
    pub fn validate(&self) -> anyhow::Result<()> {
        let fail = |name: &str, why: String| Err(anyhow::anyhow!("invalid setting {name}: {why}"));
        self.listener_specs()?;
        self.advertised()?;
        self.sasl_mechanisms()?;
        self.oauth_settings()?;
        self.tls_files()?;
        self.authz()?;
        self.peer_access(None)?;
        self.http_authentication_methods()?;
        if !(2..=1000).contains(&self.quota_window_num) {
            return fail(
                "quota_window_num (--quota-window-num)",
                format!("{}; must be between 2 and 1000", self.quota_window_num),
            );
        }
        if !(1..=3600).contains(&self.quota_window_size_seconds) {
            return fail(
                "quota_window_size_seconds (--quota-window-size-seconds)",
                format!(
                    "{}; must be between 1 and 3600",
                    self.quota_window_size_seconds
                ),
            );
        }
        crate::tls::PrincipalRules::parse(&self.ssl_principal_mapping_rules)
            .map_err(|why| anyhow::anyhow!("invalid setting ssl_principal_mapping_rules: {why}"))?;
        if self.ssl_reload_interval_ms == 0 {
            return fail("ssl_reload_interval_ms", "must be at least 1".to_string());
        }
        if self.replica_moves_max == 0 {
            return fail(
                "replica_moves_max (--replica-moves-max)",
                "must be at least 1 (replicas of gone agents could never be replaced)".to_string(),
            );
        }
        let partitions = self.topic_defaults.num_partitions;
        if !(1..=MAX_PARTITIONS_PER_TOPIC).contains(&partitions) {
            return fail(
                "topic_defaults.num_partitions (--num-partitions)",
                format!("{partitions}; must be between 1 and {MAX_PARTITIONS_PER_TOPIC}"),
            );
        }
        let rf = self.topic_defaults.replication_factor;
        if rf < 1 {
            return fail(
                "topic_defaults.replication_factor (--default-replication-factor)",
                format!("{rf}; must be at least 1"),
            );
        }
        if self.node_id < 0 {
            return fail("node_id", format!("{}; must be 0 or more", self.node_id));
        }
        if !(MIN_REQUEST_BYTES..=i32::MAX as usize).contains(&self.max_request_bytes) {
            return fail(
                "max_request_bytes",
                format!(
                    "{}; must be between {MIN_REQUEST_BYTES} and {}",
                    self.max_request_bytes,
                    i32::MAX
                ),
            );
        }
        if self.queued_max_request_bytes < self.max_request_bytes {
            return fail(
                "queued_max_request_bytes",
                format!(
                    "{} is below max_request_bytes ({}): a request of the largest size could never be read",
                    self.queued_max_request_bytes, self.max_request_bytes
                ),
            );
        }
        if self.max_connections == 0 {
            return fail("max_connections", "must be above 0".to_string());
        }
        if self.max_connections_per_ip == 0 {
            return fail(
                "max_connections_per_ip (--max-connections-per-ip)",
                "must be above 0 (refuse single addresses with max_connections_per_ip_overrides)"
                    .to_string(),
            );
        }
        if self.connections_max_idle_ms == 0 {
            return fail("connections_max_idle_ms", "must be above 0".to_string());
        }
        if self.request_timeout_ms == 0 {
            return fail("request_timeout_ms", "must be above 0".to_string());
        }
        if self.transaction_max_timeout_ms <= 0
            || self.transaction_max_timeout_ms > i64::from(i32::MAX)
        {
            return fail(
                "transaction_max_timeout_ms",
                format!(
                    "{}; must be between 1 and {}",
                    self.transaction_max_timeout_ms,
                    i32::MAX
                ),
            );
        }
        if self.transaction_abort_timed_out_transaction_cleanup_interval_ms == 0 {
            return fail(
                "transaction_abort_timed_out_transaction_cleanup_interval_ms",
                "must be above 0".to_string(),
            );
        }
        if self.transactional_id_expiration_ms <= 0 {
            return fail(
                "transactional_id_expiration_ms",
                "must be above 0".to_string(),
            );
        }
        if self.sasl_server_max_receive_size < 1024 {
            return fail(
                "sasl_server_max_receive_size",
                format!(
                    "{}; must be at least 1024 (ApiVersions and the SASL exchanges must fit)",
                    self.sasl_server_max_receive_size
                ),
            );
        }
        if self.request_read_timeout_ms == 0 {
            return fail("request_read_timeout_ms", "must be above 0".to_string());
        }
        if self.lease_ms < 500 {
            return fail(
                "lease_ms (--lease-ms)",
                format!("{}; must be at least 500", self.lease_ms),
            );
        }
        if self.replica_lag_time_max_ms < 1 {
            return fail(
                "replica_lag_time_max_ms (--replica-lag-time-max-ms)",
                format!("{}; must be above 0", self.replica_lag_time_max_ms),
            );
        }
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms {
            return fail(
                "group_min_session_timeout_ms",
                format!(
                    "{} is above group_max_session_timeout_ms ({})",
                    self.group_min_session_timeout_ms, self.group_max_session_timeout_ms
                ),
            );
        }
        for (name, value) in &self.topic_defaults.configs {
            crate::topic_config::validate(name, value)
                .map_err(|m| anyhow::anyhow!("invalid setting topic_defaults.configs: {m}"))?;
        }
        Ok(())
    }

    /// Reads a TOML settings file; absent keys keep their defaults.
    pub fn from_toml_file(path: &Path) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read settings file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "invalid settings file {}: {}",
                path.display(),
                with_suggestion(&e.to_string())
            )
        })
    }

    pub fn metastore_path(&self) -> PathBuf {
        self.metastore_path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("metastore.sqlite"))
    }

    /// The `(host, port)` that names this agent: where clients and the other agents
    /// reach its default listener (or, without one, its inter-agent listener).
    /// Listening on every address (0.0.0.0 or ::) names no address a client could use,
    /// so then `kafka_advertised` must be set, as Kafka requires of
    /// `advertised.listeners`.
    pub fn advertised(&self) -> anyhow::Result<(String, i32)> {
        if let Some(a) = &self.kafka_advertised {
            let (host, port) = a
                .rsplit_once(':')
                .ok_or_else(|| anyhow::anyhow!("kafka_advertised '{a}' is not host:port"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| anyhow::anyhow!("kafka_advertised '{a}' has a bad port"))?;
            return Ok((host.to_string(), i32::from(port)));
        }
        match self.kafka_listen {
            Some(listen) if listen.ip().is_unspecified() => Err(anyhow::anyhow!(
                "invalid setting kafka_advertised (--kafka-advertised): it must be set when \
                 kafka_listen is {listen} (every address): clients cannot connect to {}; give the \
                 host:port they should use, e.g. --kafka-advertised broker-1.internal:{}",
                listen.ip(),
                listen.port()
            )),
            Some(listen) => Ok((listen.ip().to_string(), i32::from(listen.port()))),
            None => {
                let specs = self.named_listeners()?;
                let spec = self.inter_agent_spec(&specs)?;
                Ok(spec.advertised.clone().unwrap_or_else(|| {
                    (spec.listen.ip().to_string(), i32::from(spec.listen.port()))
                }))
            }
        }
    }

    /// The listener named by `inter_agent_listener`, among `specs`.
    fn inter_agent_spec<'a>(&self, specs: &'a [ListenerSpec]) -> anyhow::Result<&'a ListenerSpec> {
        let name = self.inter_agent_listener.trim();
        specs.iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            let without = if self.kafka_listen.is_none() {
                " (kafka_listen is none, so there is no default PLAINTEXT listener: name one \
                 of listeners)"
            } else {
                ""
            };
            anyhow::anyhow!(
                "invalid setting inter_agent_listener: {name:?} is not a listener (there are \
                 {}){without}",
                names.join(", ")
            )
        })
    }
}

/// One Kafka listener, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub listen: SocketAddr,
    /// Where clients reach it; `None`: at the address it is bound to.
    pub advertised: Option<(String, i32)>,
}

/// The name of the default listener, at `kafka_listen`: the one the agents use among
/// themselves unless `inter_agent_listener` names another.
pub const DEFAULT_LISTENER: &str = "PLAINTEXT";

fn split_host_port(text: &str) -> Option<(&str, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

/// Kafka's `NAME://host:port,...` lists, by name, in order.
fn parse_listener_list(setting: &str, text: &str) -> anyhow::Result<Vec<(String, String, u16)>> {
    let mut out: Vec<(String, String, u16)> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || {
            anyhow::anyhow!(
                "invalid setting {setting}: {entry:?} is not NAME://host:port (e.g. SASL_PLAINTEXT://0.0.0.0:9093)"
            )
        };
        let (name, address) = entry.split_once("://").ok_or_else(bad)?;
        let (host, port) = split_host_port(address).ok_or_else(bad)?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(anyhow::anyhow!(
                "invalid setting {setting}: listener name {name:?} must be letters, digits and _"
            ));
        }
        let name = name.to_ascii_uppercase();
        if out.iter().any(|(n, _, _)| *n == name) {
            return Err(anyhow::anyhow!(
                "invalid setting {setting}: listener {name} appears twice"
            ));
        }
        out.push((name, host.to_string(), port));
    }
    Ok(out)
}

impl Settings {
    /// Every Kafka listener: the default PLAINTEXT one at `kafka_listen` first, then
    /// `listeners`, each with its protocol and advertised address.
    pub fn listener_specs(&self) -> anyhow::Result<Vec<ListenerSpec>> {
        let mut specs = Vec::new();
        if let Some(listen) = self.kafka_listen {
            specs.push(ListenerSpec {
                name: DEFAULT_LISTENER.to_string(),
                protocol: SecurityProtocol::Plaintext,
                listen,
                advertised: Some(self.advertised()?),
            });
        }
        specs.extend(self.named_listeners()?);
        let advertised = parse_listener_list("advertised_listeners", &self.advertised_listeners)?;
        if let Some((name, _, _)) = advertised
            .iter()
            .find(|(n, _, _)| !specs.iter().any(|s| s.name == *n))
        {
            return Err(anyhow::anyhow!(
                "invalid setting advertised_listeners: {name} is not one of listeners"
            ));
        }
        if specs.is_empty() {
            return Err(anyhow::anyhow!(
                "invalid setting listeners: kafka_listen is none and listeners is empty, so \
                 clients could not connect; give at least one (e.g. \
                 SASL_SSL://0.0.0.0:9093 with advertised_listeners)"
            ));
        }
        Ok(specs)
    }

    /// The listeners of `listeners`, checked against `advertised_listeners` and the
    /// protocol map.
    fn named_listeners(&self) -> anyhow::Result<Vec<ListenerSpec>> {
        let mut protocols = BTreeMap::new();
        for pair in self
            .listener_security_protocol_map
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (name, protocol) = pair.split_once(':').ok_or_else(|| {
                anyhow::anyhow!(
                    "invalid setting listener_security_protocol_map: {pair:?} is not NAME:PROTOCOL"
                )
            })?;
            let protocol = SecurityProtocol::from_name(protocol).map_err(|m| {
                anyhow::anyhow!("invalid setting listener_security_protocol_map: {m}")
            })?;
            protocols.insert(name.to_ascii_uppercase(), protocol);
        }
        let advertised = parse_listener_list("advertised_listeners", &self.advertised_listeners)?;
        let mut specs = Vec::new();
        for (name, host, port) in parse_listener_list("listeners", &self.listeners)? {
            if name == DEFAULT_LISTENER && self.kafka_listen.is_some() {
                return Err(anyhow::anyhow!(
                    "invalid setting listeners: {DEFAULT_LISTENER} is the listener at kafka_listen; \
                     name this one otherwise (e.g. CLIENT://{host}:{port} with \
                     listener_security_protocol_map CLIENT:PLAINTEXT), or set kafka_listen to \
                     none"
                ));
            }
            let protocol = match protocols.get(&name) {
                Some(p) => *p,
                None => SecurityProtocol::from_name(&name).map_err(|_| {
                    anyhow::anyhow!(
                        "invalid setting listener_security_protocol_map: it gives no protocol for \
                         listener {name} (add {name}:SASL_PLAINTEXT, for example)"
                    )
                })?,
            };
            let listen = format!("{host}:{port}")
                .parse::<SocketAddr>()
                .or_else(|_| match host.as_str() {
                    "localhost" => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
                    _ => Err(()),
                })
                .map_err(|_| {
                    anyhow::anyhow!(
                        "invalid setting listeners: {name} listens on {host:?}, which is not an IP address"
                    )
                })?;
            let advertised = advertised
                .iter()
                .find(|(n, _, _)| *n == name)
                .map(|(_, h, p)| (h.clone(), i32::from(*p)));
            if advertised.is_none() && listen.ip().is_unspecified() {
                return Err(anyhow::anyhow!(
                    "invalid setting advertised_listeners: listener {name} listens on every address \
                     ({listen}), so it must be advertised: add {name}://broker-1.internal:{port}"
                ));
            }
            specs.push(ListenerSpec {
                name,
                protocol,
                listen,
                advertised,
            });
        }
        Ok(specs)
    }

    /// How this agent reaches the others: the inter-agent listener, checked to exist,
    /// the credentials a SASL one needs, and for a TLS one `tls`, the agent's loaded TLS
    /// files (`None` only to check the settings).
    pub fn peer_access(
        &self,
        tls: Option<&Arc<crate::tls::Tls>>,
    ) -> anyhow::Result<crate::peer::PeerAccess> {
        let name = self.inter_agent_listener.trim();
        let specs = self.listener_specs()?;
        let spec = self.inter_agent_spec(&specs)?;
        if spec.protocol.is_tls() && self.ssl_truststore_location.is_none() {
            anyhow::bail!(
                "invalid setting inter_agent_listener: {name} is {}, so the agents need \
                 ssl_truststore_location, the PEM authorities their certificates chain to, \
                 to verify each other",
                spec.protocol.name()
            );
        }
        let sasl = match spec.protocol {
            SecurityProtocol::Plaintext | SecurityProtocol::Ssl => None,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
                let mechanism = self.inter_agent_sasl_mechanism.trim();
                let parsed = crate::sasl::Mechanism::from_name(mechanism)
                    .filter(|m| *m != crate::sasl::Mechanism::OAuthBearer)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "invalid setting inter_agent_sasl_mechanism: {mechanism:?} is not \
                             SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN"
                        )
                    })?;
                if !self.sasl_mechanisms()?.iter().any(|m| m == mechanism) {
                    anyhow::bail!(
                        "invalid setting inter_agent_sasl_mechanism: {mechanism} is not among \
                         sasl_enabled_mechanisms, so the agents' listener would refuse it"
                    );
                }
                if self.inter_agent_sasl_username.is_empty()
                    || self.inter_agent_sasl_password.0.is_empty()
                {
                    anyhow::bail!(
                        "invalid setting inter_agent_listener: {name} is {}, so the agents \
                         need inter_agent_sasl_username and inter_agent_sasl_password \
                         (STRATA_INTER_AGENT_SASL_PASSWORD)",
                        spec.protocol.name()
                    );
                }
                Some(crate::peer::PeerCredentials {
                    mechanism: parsed,
                    username: self.inter_agent_sasl_username.clone(),
                    password: self.inter_agent_sasl_password.0.clone(),
                })
            }
        };
        Ok(crate::peer::PeerAccess {
            listener: name.to_string(),
            sasl,
            tls: tls.filter(|_| spec.protocol.is_tls()).cloned(),
        })
    }

    /// The HTTP API's authentication methods, checked: `bearer` needs OAUTHBEARER's
    /// settings (its JWKS).
    pub fn http_authentication_methods(&self) -> anyhow::Result<Vec<String>> {
        let mut methods = Vec::new();
        for m in self
            .http_authentication
            .split(',')
            .map(|m| m.trim().to_ascii_lowercase())
            .filter(|m| !m.is_empty() && m != "none")
        {
            match m.as_str() {
                "basic" => {}
                "bearer" if self.oauth_settings()?.is_none() => anyhow::bail!(
                    "invalid setting http_authentication: bearer tokens are validated as \
                     OAUTHBEARER's, so sasl_enabled_mechanisms must include OAUTHBEARER with \
                     sasl_oauthbearer_jwks_location set"
                ),
                "bearer" => {}
                other => anyhow::bail!(
                    "invalid setting http_authentication: {other:?} is not basic or bearer"
                ),
            }
            methods.push(m);
        }
        Ok(methods)
    }

    /// How requests are authorized: `authorizer` and `super_users` checked.
    pub fn authz(&self) -> anyhow::Result<crate::authz::AuthzConfig> {
        let enabled = match self.authorizer.trim() {
            "" | "none" => false,
            "acl"
            | "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            | "kafka.security.authorizer.AclAuthorizer" => true,
            other => anyhow::bail!(
                "invalid setting authorizer: {other:?} is not an authorizer (acl, or empty for none)"
            ),
        };
        let mut super_users = Vec::new();
        for user in self
            .super_users
            .split(';')
            .map(str::trim)
            .filter(|u| !u.is_empty())
        {
            match user.split_once(':') {
                Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
                    super_users.push(user.to_string())
                }
                _ => anyhow::bail!(
                    "invalid setting super_users: {user:?} is not a principal (User:admin; \
                     several are separated by ;)"
                ),
            }
        }
        Ok(crate::authz::AuthzConfig {
            enabled,
            super_users,
            allow_if_no_acl: self.allow_everyone_if_no_acl_found,
        })
    }

    /// The TLS files, when a listener is SSL or SASL_SSL; an error when one is and they
    /// are not all given.
    pub fn tls_files(&self) -> anyhow::Result<Option<crate::tls::TlsFiles>> {
        let client_auth = crate::tls::ClientAuth::from_name(&self.ssl_client_auth)
            .map_err(|why| anyhow::anyhow!("invalid setting ssl_client_auth: {why}"))?;
        let tls: Vec<String> = self
            .listener_specs()?
            .into_iter()
            .filter(|s| s.protocol.is_tls())
            .map(|s| s.name)
            .collect();
        if tls.is_empty() {
            return Ok(None);
        }
        let named = tls.join(", ");
        let (Some(certificate), Some(key)) =
            (&self.ssl_certificate_location, &self.ssl_key_location)
        else {
            return Err(anyhow::anyhow!(
                "invalid setting ssl_certificate_location: listener {named} uses TLS, so \
                 ssl_certificate_location and ssl_key_location must name the agent's PEM \
                 certificate chain and key"
            ));
        };
        if client_auth != crate::tls::ClientAuth::None && self.ssl_truststore_location.is_none() {
            return Err(anyhow::anyhow!(
                "invalid setting ssl_client_auth: {} needs ssl_truststore_location, the PEM \
                 authorities client certificates chain to",
                self.ssl_client_auth
            ));
        }
        Ok(Some(crate::tls::TlsFiles {
            certificate: certificate.clone(),
            key: key.clone(),
            truststore: self.ssl_truststore_location.clone(),
            client_auth,
        }))
    }

    /// What OAUTHBEARER tokens must satisfy, when the mechanism is enabled (it then needs
    /// a JWKS file).
    pub fn oauth_settings(&self) -> anyhow::Result<Option<crate::sasl::oauth::OAuthSettings>> {
        if !self.sasl_mechanisms()?.iter().any(|m| m == "OAUTHBEARER") {
            return Ok(None);
        }
        let Some(jwks) = &self.sasl_oauthbearer_jwks_location else {
            return Err(anyhow::anyhow!(
                "invalid setting sasl_oauthbearer_jwks_location: sasl_enabled_mechanisms names \
                 OAUTHBEARER, so it must name the JWKS file of the keys tokens are signed by"
            ));
        };
        if self.sasl_oauthbearer_sub_claim_name.trim().is_empty() {
            return Err(anyhow::anyhow!(
                "invalid setting sasl_oauthbearer_sub_claim_name: must name a claim"
            ));
        }
        Ok(Some(crate::sasl::oauth::OAuthSettings {
            jwks: jwks.clone(),
            issuer: self
                .sasl_oauthbearer_expected_issuer
                .clone()
                .filter(|i| !i.is_empty()),
            audience: self
                .sasl_oauthbearer_expected_audience
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect(),
            sub_claim: self.sasl_oauthbearer_sub_claim_name.trim().to_string(),
            clock_skew: std::time::Duration::from_secs(self.sasl_oauthbearer_clock_skew_seconds),
        }))
    }

    /// The SASL mechanisms offered, as configured (at least one, each one strata has).
    pub fn sasl_mechanisms(&self) -> anyhow::Result<Vec<String>> {
        let mechanisms: Vec<String> = self
            .sasl_enabled_mechanisms
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect();
        if mechanisms.is_empty() {
            return Err(anyhow::anyhow!(
                "invalid setting sasl_enabled_mechanisms: it names no mechanism"
            ));
        }
        for m in &mechanisms {
            if !crate::sasl::MECHANISMS.contains(&m.as_str()) {
                return Err(anyhow::anyhow!(
                    "invalid setting sasl_enabled_mechanisms: {m} is not one of {}",
                    crate::sasl::MECHANISMS.join(", ")
                ));
            }
        }
        Ok(mechanisms)
    }
}

/// serde's "unknown field `kafka_lisen`, expected one of `node_id`, … (70 names)"
/// as a reader wants it: the setting meant, when one is close, instead of the list.
fn with_suggestion(message: &str) -> String {
    let Some(start) = message.find("unknown field `") else {
        return message.to_string();
    };
    let rest = &message[start + "unknown field `".len()..];
    let Some((unknown, rest)) = rest.split_once('`') else {
        return message.to_string();
    };
    let Some(names) = rest.strip_prefix(", expected one of ") else {
        return message.to_string();
    };
    let line_end = names.find('\n').unwrap_or(names.len());
    let closest = names[..line_end]
        .split(", ")
        .map(|n| n.trim_matches('`'))
        .map(|n| (strsim::jaro_winkler(unknown, n), n))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .filter(|(score, _)| *score >= 0.8);
    let hint = match closest {
        Some((_, name)) => format!("unknown setting `{unknown}`: did you mean `{name}`?"),
        None => format!("unknown setting `{unknown}` (`strata agent --help` lists every one)"),
    };
    format!("{}{hint}{}", &message[..start], &names[line_end..])
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

    /// Settings that would fail later (the first auto-created topic panicked a worker
    /// with `num_partitions = 0`) are refused at start, naming the setting.
    #[test]
    fn listeners_are_read_in_kafka_form() {
        let s = Settings {
            listeners: "SASL_PLAINTEXT://127.0.0.1:9093, client://0.0.0.0:9094".to_string(),
            advertised_listeners: "CLIENT://broker-1.internal:19094".to_string(),
            listener_security_protocol_map: "CLIENT:SASL_PLAINTEXT".to_string(),
            ..Settings::default()
        };
        let specs = s.listener_specs().expect("valid");
        let spec =
            |name: &str, protocol, listen: &str, advertised: Option<(&str, i32)>| ListenerSpec {
                name: name.to_string(),
                protocol,
                listen: listen.parse().expect("address"),
                advertised: advertised.map(|(h, p)| (h.to_string(), p)),
            };
        assert_eq!(
            specs,
            [
                spec(
                    "PLAINTEXT",
                    SecurityProtocol::Plaintext,
                    "127.0.0.1:9092",
                    Some(("127.0.0.1", 9092))
                ),
                spec(
                    "SASL_PLAINTEXT",
                    SecurityProtocol::SaslPlaintext,
                    "127.0.0.1:9093",
                    None
                ),
                spec(
                    "CLIENT",
                    SecurityProtocol::SaslPlaintext,
                    "0.0.0.0:9094",
                    Some(("broker-1.internal", 19094))
                ),
            ]
        );
        let refused = |listeners: &str, advertised: &str, map: &str, why: &str| {
            let s = Settings {
                listeners: listeners.to_string(),
                advertised_listeners: advertised.to_string(),
                listener_security_protocol_map: map.to_string(),
                ..Settings::default()
            };
            let e = s.validate().expect_err(why).to_string();
            assert!(e.contains(why), "{listeners} {advertised} {map}: {e}");
        };
        refused("SASL_PLAINTEXT:9093", "", "", "is not NAME://host:port");
        refused(
            "A://127.0.0.1:1,a://127.0.0.1:2",
            "",
            "A:PLAINTEXT",
            "appears twice",
        );
        refused(
            "PLAINTEXT://127.0.0.1:9093",
            "",
            "",
            "name this one otherwise",
        );
        refused(
            "CLIENT://127.0.0.1:9093",
            "",
            "",
            "gives no protocol for listener CLIENT",
        );
        refused(
            "SSL://127.0.0.1:9093",
            "",
            "",
            "ssl_certificate_location and ssl_key_location must name",
        );
        refused(
            "SASL_PLAINTEXT://0.0.0.0:9093",
            "",
            "",
            "must be advertised",
        );
        refused(
            "SASL_PLAINTEXT://127.0.0.1:9093",
            "OTHER://h:1",
            "",
            "not one of listeners",
        );
        refused(
            "SASL_PLAINTEXT://example.com:9093",
            "",
            "",
            "not an IP address",
        );
        let s = Settings {
            sasl_enabled_mechanisms: "SCRAM-SHA-512,GSSAPI".to_string(),
            ..Settings::default()
        };
        let e = s.validate().expect_err("GSSAPI").to_string();
        assert!(e.contains("GSSAPI is not one of"), "{e}");
    }

    /// `kafka_listen = "none"`: the listeners of `listeners` are all there is, the
    /// agent is known by its inter-agent listener's address, and PLAINTEXT is a name
    /// `listeners` may use.
    #[test]
    fn the_default_listener_can_be_turned_off() {
        let s: Settings = toml::from_str(
            r#"
            kafka_listen = "none"
            listeners = "PLAINTEXT://127.0.0.1:9092,INTERNAL://0.0.0.0:9093"
            advertised_listeners = "INTERNAL://broker-1.internal:9093"
            listener_security_protocol_map = "INTERNAL:SASL_PLAINTEXT"
            inter_agent_listener = "INTERNAL"
            inter_agent_sasl_username = "broker"
            inter_agent_sasl_password = "secret"
            "#,
        )
        .expect("parse");
        assert_eq!(s.kafka_listen, None);
        s.validate().expect("valid");
        let names: Vec<String> = s
            .listener_specs()
            .expect("specs")
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(names, ["PLAINTEXT", "INTERNAL"]);
        assert_eq!(
            s.advertised().expect("advertised"),
            ("broker-1.internal".to_string(), 9093)
        );
        let refused = |s: Settings, why: &str| {
            let e = s.validate().expect_err(why).to_string();
            assert!(e.contains(why), "{e}");
        };
        refused(
            Settings {
                kafka_listen: None,
                ..Settings::default()
            },
            "kafka_listen is none and listeners is empty",
        );
        refused(
            Settings {
                kafka_listen: None,
                listeners: "SASL_PLAINTEXT://127.0.0.1:9093".to_string(),
                ..Settings::default()
            },
            "kafka_listen is none, so there is no default PLAINTEXT listener",
        );
        // The file takes what the flag takes: host names for this machine, and says
        // what it expects otherwise.
        let s: Settings = toml::from_str(r#"kafka_listen = "localhost:9092""#).expect("parse");
        assert_eq!(
            s.kafka_listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 9092)))
        );
        let e = toml::from_str::<Settings>(r#"kafka_listen = "9092""#)
            .expect_err("no host")
            .to_string();
        assert!(e.contains("is not ip:port, localhost:port or none"), "{e}");
    }

    #[test]
    fn bad_settings_are_refused_at_start() {
        assert!(Settings::default().validate().is_ok());
        let refused = |s: Settings, name: &str| {
            let e = s.validate().expect_err(name).to_string();
            assert!(e.contains(name), "{name}: {e}");
        };
        for n in [0, -1, MAX_PARTITIONS_PER_TOPIC + 1] {
            let mut s = Settings::default();
            s.topic_defaults.num_partitions = n;
            refused(s, "num_partitions");
        }
        let mut s = Settings::default();
        s.topic_defaults.replication_factor = 0;
        refused(s, "replication_factor");
        let s = Settings {
            max_request_bytes: 10,
            ..Settings::default()
        };
        refused(s, "max_request_bytes");
        let mut s = Settings::default();
        s.queued_max_request_bytes = s.max_request_bytes - 1;
        refused(s, "queued_max_request_bytes");
        let s = Settings {
            lease_ms: 0,
            ..Settings::default()
        };
        refused(s, "lease_ms");
        let mut s = Settings::default();
        s.topic_defaults
            .configs
            .insert("cleanup.policy".to_string(), "shred".to_string());
        refused(s, "topic_defaults.configs");
    }

    #[test]
    fn a_misspelt_setting_is_named_with_the_one_meant() {
        let e = toml::from_str::<Settings>("kafka_lisen = \"127.0.0.1:9092\"\n").unwrap_err();
        let said = super::with_suggestion(&e.to_string());
        assert!(
            said.contains("unknown setting `kafka_lisen`: did you mean `kafka_listen`?"),
            "{said}"
        );
        assert!(!said.contains("node_id"), "{said}");
        let e = toml::from_str::<Settings>("zzz = 1\n").unwrap_err();
        let said = super::with_suggestion(&e.to_string());
        assert!(
            said.contains("unknown setting `zzz` (`strata agent --help`"),
            "{said}"
        );
    }
}
