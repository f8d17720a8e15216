//! The `strata` binary: parses flags, builds settings, handles signals, runs the agent.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use strata_agent::Settings;
use strata_agent::config::{AckDurability, BackgroundPriority, MetastoreKind};

#[derive(Debug, Parser)]
#[command(
    name = "strata",
    version = strata_agent::VERSION,
    about = "A Kafka-compatible, cloud-native message broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    agent: AgentArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker agent (the default when no command is given).
    Agent(AgentArgs),
    /// Run the tiering worker alone, over the data directory of an agent on this machine
    /// that runs with --tiering-enabled false.
    Tiering(AgentArgs),
    /// Run the archive's compaction, merging and collection alone, for a cluster whose
    /// agents run with --compactor-enabled false (it needs the metastore and the
    /// archive, not the agents' disks).
    Compactor(AgentArgs),
    #[command(flatten)]
    Operator(strata_agent::cli::Operator),
}

/// What the process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Agent,
    Tiering,
    Compactor,
}

/// Flags override `STRATA_*` variables, which override the settings file.
#[derive(Debug, Clone, Default, clap::Args)]
struct AgentArgs {
    /// TOML settings file.
    #[arg(long, env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
    /// Broker id of this agent. [default: 1]
    #[arg(long, env = "STRATA_NODE_ID")]
    node_id: Option<i32>,
    /// Rack (e.g. the availability zone) of this agent.
    #[arg(long, env = "STRATA_RACK")]
    rack: Option<String>,
    /// Address the default Kafka listener (PLAINTEXT, unauthenticated) binds, or none for
    /// no such listener (then --listeners gives every one). [default: 127.0.0.1:9092]
    #[arg(long, env = "STRATA_KAFKA_LISTEN", value_parser = default_listener)]
    kafka_listen: Option<DefaultListener>,
    /// host:port clients are told to connect to. [default: the listen address; required when listening on 0.0.0.0]
    #[arg(long, env = "STRATA_KAFKA_ADVERTISED")]
    kafka_advertised: Option<String>,
    /// More Kafka listeners, as Kafka's listeners: NAME://host:port separated by commas,
    /// e.g. SASL_PLAINTEXT://0.0.0.0:9093 (the one at --kafka-listen is PLAINTEXT).
    #[arg(long, env = "STRATA_LISTENERS")]
    listeners: Option<String>,
    /// Where clients reach those listeners, as Kafka's advertised.listeners
    /// (SASL_PLAINTEXT://broker-1.internal:9093). [default: their listen addresses]
    #[arg(long, env = "STRATA_ADVERTISED_LISTENERS")]
    advertised_listeners: Option<String>,
    /// Each listener name's security protocol, as Kafka's
    /// listener.security.protocol.map (CLIENT:SASL_PLAINTEXT); needed only for
    /// listeners not named after their protocol.
    #[arg(long, env = "STRATA_LISTENER_SECURITY_PROTOCOL_MAP")]
    listener_security_protocol_map: Option<String>,
    /// SASL mechanisms offered on SASL listeners (Kafka's sasl.enabled.mechanisms).
    /// [default: SCRAM-SHA-512,SCRAM-SHA-256,PLAIN]
    #[arg(long, env = "STRATA_SASL_ENABLED_MECHANISMS")]
    sasl_enabled_mechanisms: Option<String>,
    /// JWKS file of the public keys OAUTHBEARER tokens are signed by (Kafka's
    /// sasl.oauthbearer.jwks.endpoint.url, as a file); needed with OAUTHBEARER.
    #[arg(long, env = "STRATA_SASL_OAUTHBEARER_JWKS_LOCATION")]
    sasl_oauthbearer_jwks_location: Option<PathBuf>,
    /// The iss OAUTHBEARER tokens must carry. [default: not checked]
    #[arg(long, env = "STRATA_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    sasl_oauthbearer_expected_issuer: Option<String>,
    /// Audiences, comma-separated, one of which a token's aud must name. [default: not checked]
    #[arg(long, env = "STRATA_SASL_OAUTHBEARER_EXPECTED_AUDIENCE")]
    sasl_oauthbearer_expected_audience: Option<String>,
    /// The token claim naming the principal. [default: sub]
    #[arg(long, env = "STRATA_SASL_OAUTHBEARER_SUB_CLAIM_NAME")]
    sasl_oauthbearer_sub_claim_name: Option<String>,
    /// How far (s) a token's exp and nbf may be off the agent's clock. [default: 30]
    #[arg(long, env = "STRATA_SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS")]
    sasl_oauthbearer_clock_skew_seconds: Option<u64>,
    /// How long (ms) a SASL session lasts before the client must re-authenticate
    /// (Kafka's connections.max.reauth.ms, KIP-368); 0: for ever. [default: 0]
    #[arg(long, env = "STRATA_CONNECTIONS_MAX_REAUTH_MS")]
    connections_max_reauth_ms: Option<u64>,
    /// How long (ms) a failed SASL authentication waits before its answer (Kafka's
    /// connection.failed.authentication.delay.ms), doubling for repeated failures from
    /// one address. [default: 100]
    #[arg(long, env = "STRATA_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS")]
    connection_failed_authentication_delay_ms: Option<u64>,
    /// The largest request (bytes) a SASL listener reads before the client has
    /// authenticated (Kafka's sasl.server.max.receive.size); a larger one closes the
    /// connection. [default: 524288]
    #[arg(long, env = "STRATA_SASL_SERVER_MAX_RECEIVE_SIZE")]
    sasl_server_max_receive_size: Option<u32>,
    /// PEM certificate chain (own certificate first) for SSL and SASL_SSL listeners.
    #[arg(long, env = "STRATA_SSL_CERTIFICATE_LOCATION")]
    ssl_certificate_location: Option<PathBuf>,
    /// PEM private key of --ssl-certificate-location.
    #[arg(long, env = "STRATA_SSL_KEY_LOCATION")]
    ssl_key_location: Option<PathBuf>,
    /// PEM authorities that client certificates must chain to (Kafka's
    /// ssl.truststore.location with type PEM).
    #[arg(long, env = "STRATA_SSL_TRUSTSTORE_LOCATION")]
    ssl_truststore_location: Option<PathBuf>,
    /// Client certificates on SSL listeners: none, requested or required (Kafka's
    /// ssl.client.auth). [default: none]
    #[arg(long, env = "STRATA_SSL_CLIENT_AUTH")]
    ssl_client_auth: Option<String>,
    /// The listener agents reach each other on (Kafka's inter.broker.listener.name):
    /// PLAINTEXT (at --kafka-listen) or a SASL_PLAINTEXT one of --listeners. [default: PLAINTEXT]
    #[arg(long, env = "STRATA_INTER_AGENT_LISTENER")]
    inter_agent_listener: Option<String>,
    /// SASL mechanism of the agents on a SASL inter-agent listener (Kafka's
    /// sasl.mechanism.inter.broker.protocol). [default: SCRAM-SHA-512]
    #[arg(long, env = "STRATA_INTER_AGENT_SASL_MECHANISM")]
    inter_agent_sasl_mechanism: Option<String>,
    /// The agents' own SASL user on a SASL inter-agent listener.
    #[arg(long, env = "STRATA_INTER_AGENT_SASL_USERNAME")]
    inter_agent_sasl_username: Option<String>,
    /// Its password (better given as STRATA_INTER_AGENT_SASL_PASSWORD than as a flag).
    #[arg(long, env = "STRATA_INTER_AGENT_SASL_PASSWORD", hide_env_values = true)]
    inter_agent_sasl_password: Option<String>,
    /// Incremental fetch sessions kept at once, 0 for none (Kafka's
    /// max.incremental.fetch.session.cache.slots). [default: 1000]
    #[arg(long, env = "STRATA_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS")]
    max_incremental_fetch_session_cache_slots: Option<u64>,
    /// Samples a client quota's rate is measured over (Kafka's quota.window.num). [default: 11]
    #[arg(long, env = "STRATA_QUOTA_WINDOW_NUM")]
    quota_window_num: Option<usize>,
    /// Length of each sample in seconds (Kafka's quota.window.size.seconds). [default: 1]
    #[arg(long, env = "STRATA_QUOTA_WINDOW_SIZE_SECONDS")]
    quota_window_size_seconds: Option<u64>,
    /// How HTTP API callers authenticate: basic (SCRAM users' passwords), bearer
    /// (OAUTHBEARER JWTs) or basic,bearer. [default: none, everyone is User:ANONYMOUS]
    #[arg(long, env = "STRATA_HTTP_AUTHENTICATION")]
    http_authentication: Option<String>,
    /// The authorizer (Kafka's authorizer.class.name): acl to enforce the ACLs in the
    /// metastore (CreateAcls, kafka-acls). [default: none, everything allowed]
    #[arg(long, env = "STRATA_AUTHORIZER")]
    authorizer: Option<String>,
    /// Principals allowed everything, separated by ; (Kafka's super.users), e.g.
    /// "User:admin;User:ops".
    #[arg(long, env = "STRATA_SUPER_USERS")]
    super_users: Option<String>,
    /// Open resources no ACL names to everyone (Kafka's allow.everyone.if.no.acl.found).
    /// [default: false]
    #[arg(long, env = "STRATA_ALLOW_EVERYONE_IF_NO_ACL_FOUND")]
    allow_everyone_if_no_acl_found: Option<bool>,
    /// How a client certificate's subject becomes its principal (Kafka's
    /// ssl.principal.mapping.rules), e.g. RULE:^CN=([^,]+).*$/$1/L,DEFAULT. [default: DEFAULT]
    #[arg(long, env = "STRATA_SSL_PRINCIPAL_MAPPING_RULES")]
    ssl_principal_mapping_rules: Option<String>,
    /// How often (ms) the TLS files are read again, to take up a renewed certificate
    /// without a restart. [default: 10000]
    #[arg(long, env = "STRATA_SSL_RELOAD_INTERVAL_MS")]
    ssl_reload_interval_ms: Option<u64>,
    /// Address the HTTP API binds. [default: 127.0.0.1:9644]
    #[arg(long, env = "STRATA_HTTP_LISTEN", value_parser = listen_address)]
    http_listen: Option<SocketAddr>,
    /// Directory for logs, the lock and the embedded metastore. [default: ./data]
    #[arg(long, env = "STRATA_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Metastore backend: embedded (a SQLite file) or fdb (FoundationDB). [default: embedded]
    #[arg(long, env = "STRATA_METASTORE", value_enum)]
    metastore: Option<MetastoreKind>,
    /// Embedded metastore file (default: DATA_DIR/metastore.sqlite).
    #[arg(long, env = "STRATA_METASTORE_PATH")]
    metastore_path: Option<PathBuf>,
    /// FoundationDB cluster file (default: the client's default).
    #[arg(long, env = "STRATA_FDB_CLUSTER_FILE")]
    fdb_cluster_file: Option<PathBuf>,
    /// Subspace prefix of this cluster's keys in FoundationDB (default: strata).
    #[arg(long, env = "STRATA_FDB_PREFIX")]
    fdb_prefix: Option<String>,
    /// Partitions of auto-created topics and of CreateTopics without a count. [default: 1]
    #[arg(long, env = "STRATA_NUM_PARTITIONS")]
    num_partitions: Option<i32>,
    /// Kafka's auto.create.topics.enable. [default: true]
    #[arg(long, env = "STRATA_AUTO_CREATE_TOPICS")]
    auto_create_topics: Option<bool>,
    /// Archive for closed segments: file:///dir or s3://bucket/prefix. [default: file://DATA_DIR/archive]
    #[arg(long, env = "STRATA_ARCHIVE_URL")]
    archive_url: Option<String>,
    /// Do the archive's compaction, merging and collection inside the agent (default
    /// true; false when `strata compactor` runs apart).
    #[arg(long, env = "STRATA_COMPACTOR_ENABLED")]
    compactor_enabled: Option<bool>,
    /// Run the tiering worker inside the agent (default true).
    #[arg(long, env = "STRATA_TIERING_ENABLED")]
    tiering_enabled: Option<bool>,
    /// How often (ms) the tiering worker looks for closed segments. [default: 1000]
    #[arg(long, env = "STRATA_TIERING_INTERVAL_MS")]
    tiering_interval_ms: Option<u64>,
    /// Bytes per second the tiering worker reads and encodes, at most (Kafka's
    /// remote.log.manager.copy.max.bytes.per.second); 0: no limit. [default: 0]
    #[arg(long, env = "STRATA_TIERING_MAX_BYTES_PER_SECOND")]
    tiering_max_bytes_per_second: Option<u64>,
    /// Kafka's log.cleaner.io.max.bytes.per.second: bytes per second compaction and
    /// archive merging read, at most; 0: no limit. [default: 0]
    #[arg(long, env = "STRATA_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND")]
    log_cleaner_io_max_bytes_per_second: Option<u64>,
    /// Kafka's log.cleaner.backoff.ms: how often (ms) the cleaner looks for compacted
    /// partitions that are due. [default: 15000]
    #[arg(long, env = "STRATA_LOG_CLEANER_BACKOFF_MS")]
    log_cleaner_backoff_ms: Option<u64>,
    /// Threads that run background work (tiering's encoding, compaction, merging) at a
    /// lower CPU priority; 0: half the cores. [default: 0]
    #[arg(long, env = "STRATA_BACKGROUND_THREADS")]
    background_threads: Option<usize>,
    /// CPU priority of background work: idle (SCHED_IDLE: only CPU requests leave
    /// unused) or low (nice 10). [default: idle]
    #[arg(long, env = "STRATA_BACKGROUND_PRIORITY")]
    background_priority: Option<BackgroundPriority>,
    /// Kafka's log.retention.check.interval.ms: how often retention runs (default
    /// 300000).
    #[arg(long, env = "STRATA_LOG_RETENTION_CHECK_INTERVAL_MS")]
    log_retention_check_interval_ms: Option<u64>,
    /// How long (ms) an archived object no manifest names stays before it is deleted
    /// (default 600000).
    #[arg(long, env = "STRATA_ARCHIVE_GC_GRACE_MS")]
    archive_gc_grace_ms: Option<i64>,
    /// Kafka's transaction.max.timeout.ms: the longest transaction.timeout.ms a producer
    /// may ask for (default 900000).
    #[arg(long, env = "STRATA_TRANSACTION_MAX_TIMEOUT_MS")]
    transaction_max_timeout_ms: Option<i64>,
    /// Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms: how often
    /// transactions open past their timeout are aborted (default 10000).
    #[arg(
        long,
        env = "STRATA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS"
    )]
    transaction_abort_timed_out_transaction_cleanup_interval_ms: Option<u64>,
    /// Kafka's transactional.id.expiration.ms (default 604800000, 7 days).
    #[arg(long, env = "STRATA_TRANSACTIONAL_ID_EXPIRATION_MS")]
    transactional_id_expiration_ms: Option<i64>,
    /// Archived objects smaller than this are merged into objects of at most this size
    /// (default 67108864; 0: never).
    #[arg(long, env = "STRATA_ARCHIVE_MERGE_TARGET_BYTES")]
    archive_merge_target_bytes: Option<u64>,
    /// Kafka's group.initial.rebalance.delay.ms. [default: 3000]
    #[arg(long, env = "STRATA_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    group_initial_rebalance_delay_ms: Option<i64>,
    /// Kafka's default.replication.factor. [default: 1]
    #[arg(long, env = "STRATA_DEFAULT_REPLICATION_FACTOR")]
    default_replication_factor: Option<i16>,
    /// This agent's membership lease in ms (renewed every fifth of it). [default: 10000]
    #[arg(long, env = "STRATA_LEASE_MS")]
    lease_ms: Option<u64>,
    /// Bytes of requests held in memory at once over all connections (Kafka's
    /// queued.max.request.bytes). [default: 268435456]
    #[arg(long, env = "STRATA_QUEUED_MAX_REQUEST_BYTES")]
    queued_max_request_bytes: Option<usize>,
    /// Client connections held at once (Kafka's max.connections); at the limit new
    /// connections wait in the listen backlog. [default: 10000]
    #[arg(long, env = "STRATA_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Client connections one address may hold (Kafka's max.connections.per.ip); past
    /// it new ones are closed at once. [default: unbounded]
    #[arg(long, env = "STRATA_MAX_CONNECTIONS_PER_IP")]
    max_connections_per_ip: Option<usize>,
    /// Other per-address limits, as address:limit pairs separated by commas (Kafka's
    /// max.connections.per.ip.overrides), e.g. 10.0.0.7:50,10.0.0.8:0
    #[arg(long, env = "STRATA_MAX_CONNECTIONS_PER_IP_OVERRIDES", value_parser = strata_agent::config::parse_connection_overrides)]
    max_connections_per_ip_overrides: Option<std::collections::BTreeMap<std::net::IpAddr, usize>>,
    /// Close connections idle this long (Kafka's connections.max.idle.ms). [default: 600000]
    #[arg(long, env = "STRATA_CONNECTIONS_MAX_IDLE_MS")]
    connections_max_idle_ms: Option<u64>,
    /// How long (ms) a request frame may take to arrive once its size is read. [default: 30000]
    #[arg(long, env = "STRATA_REQUEST_READ_TIMEOUT_MS")]
    request_read_timeout_ms: Option<u64>,
    /// When a leader counts a write as durable: fsync (default) or page-cache (as
    /// Kafka's defaults, for like-for-like benchmarks).
    #[arg(long, env = "STRATA_ACK_DURABILITY", value_enum)]
    ack_durability: Option<AckDurability>,
    /// Kafka's replica.lag.time.max.ms. [default: 30000]
    #[arg(long, env = "STRATA_REPLICA_LAG_TIME_MAX_MS")]
    replica_lag_time_max_ms: Option<i64>,
    /// How often (ms) leadership goes back to preferred replicas; 0: never. [default: 30000]
    #[arg(long, env = "STRATA_LEADER_REBALANCE_INTERVAL_MS")]
    leader_rebalance_interval_ms: Option<u64>,
    /// How long (ms) an agent may be gone before its replicas are replaced on live
    /// agents. [default: 300000]
    #[arg(long, env = "STRATA_REPLICA_REPLACEMENT_DELAY_MS")]
    replica_replacement_delay_ms: Option<u64>,
    /// Partitions moved at once, at most, cluster-wide (replacements, drains,
    /// balancing). [default: 20]
    #[arg(long, env = "STRATA_REPLICA_MOVES_MAX")]
    replica_moves_max: Option<usize>,
    /// Spread replicas and preferred leaderships evenly over the live agents. [default: true]
    #[arg(long, env = "STRATA_REPLICA_BALANCE_ENABLED")]
    replica_balance_enabled: Option<bool>,
    /// Bytes per second an agent copies into replicas not in sync (rebuilding); 0: no
    /// limit. [default: 104857600]
    #[arg(long, env = "STRATA_REPLICA_REBUILD_MAX_BYTES_PER_SECOND")]
    replica_rebuild_max_bytes_per_second: Option<u64>,
}

/// `--kafka-listen`: an address as [`listen_address`] takes, or `none`.
#[derive(Debug, Clone, Copy)]
struct DefaultListener(Option<SocketAddr>);

fn default_listener(given: &str) -> Result<DefaultListener, String> {
    if given.trim().eq_ignore_ascii_case("none") {
        return Ok(DefaultListener(None));
    }
    listen_address(given).map(|a| DefaultListener(Some(a)))
}

/// `host:port` or `ip:port`; a host name is resolved now, to its first address
/// (`localhost:9092` is 127.0.0.1:9092).
fn listen_address(given: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let mut addresses = given
        .to_socket_addrs()
        .map_err(|e| format!("{given:?} is not host:port or ip:port ({e})"))?;
    addresses
        .next()
        .ok_or_else(|| format!("{given:?} resolves to no address"))
}

impl AgentArgs {
    fn settings(self) -> anyhow::Result<Settings> {
        let mut s = match &self.config {
            Some(path) => Settings::from_toml_file(path)?,
            None => Settings::default(),
        };
        if let Some(v) = self.node_id {
            s.node_id = v;
        }
        if let Some(v) = self.rack {
            s.rack = Some(v);
        }
        if let Some(v) = self.kafka_listen {
            s.kafka_listen = v.0;
        }
        if let Some(v) = self.kafka_advertised {
            s.kafka_advertised = Some(v);
        }
        if let Some(v) = self.listeners {
            s.listeners = v;
        }
        if let Some(v) = self.advertised_listeners {
            s.advertised_listeners = v;
        }
        if let Some(v) = self.listener_security_protocol_map {
            s.listener_security_protocol_map = v;
        }
        if let Some(v) = self.sasl_enabled_mechanisms {
            s.sasl_enabled_mechanisms = v;
        }
        if let Some(v) = self.sasl_oauthbearer_jwks_location {
            s.sasl_oauthbearer_jwks_location = Some(v);
        }
        if let Some(v) = self.sasl_oauthbearer_expected_issuer {
            s.sasl_oauthbearer_expected_issuer = Some(v);
        }
        if let Some(v) = self.sasl_oauthbearer_expected_audience {
            s.sasl_oauthbearer_expected_audience = v;
        }
        if let Some(v) = self.sasl_oauthbearer_sub_claim_name {
            s.sasl_oauthbearer_sub_claim_name = v;
        }
        if let Some(v) = self.sasl_oauthbearer_clock_skew_seconds {
            s.sasl_oauthbearer_clock_skew_seconds = v;
        }
        if let Some(v) = self.connections_max_reauth_ms {
            s.connections_max_reauth_ms = v;
        }
        if let Some(v) = self.connection_failed_authentication_delay_ms {
            s.connection_failed_authentication_delay_ms = v;
        }
        if let Some(v) = self.sasl_server_max_receive_size {
            s.sasl_server_max_receive_size = v;
        }
        if let Some(v) = self.ssl_certificate_location {
            s.ssl_certificate_location = Some(v);
        }
        if let Some(v) = self.ssl_key_location {
            s.ssl_key_location = Some(v);
        }
        if let Some(v) = self.ssl_truststore_location {
            s.ssl_truststore_location = Some(v);
        }
        if let Some(v) = self.ssl_client_auth {
            s.ssl_client_auth = v;
        }
        if let Some(v) = self.inter_agent_listener {
            s.inter_agent_listener = v;
        }
        if let Some(v) = self.inter_agent_sasl_mechanism {
            s.inter_agent_sasl_mechanism = v;
        }
        if let Some(v) = self.inter_agent_sasl_username {
            s.inter_agent_sasl_username = v;
        }
        if let Some(v) = self.inter_agent_sasl_password {
            s.inter_agent_sasl_password = strata_agent::config::Secret(v);
        }
        if let Some(v) = self.max_incremental_fetch_session_cache_slots {
            s.max_incremental_fetch_session_cache_slots = v;
        }
        if let Some(v) = self.quota_window_num {
            s.quota_window_num = v;
        }
        if let Some(v) = self.quota_window_size_seconds {
            s.quota_window_size_seconds = v;
        }
        if let Some(v) = self.http_authentication {
            s.http_authentication = v;
        }
        if let Some(v) = self.authorizer {
            s.authorizer = v;
        }
        if let Some(v) = self.super_users {
            s.super_users = v;
        }
        if let Some(v) = self.allow_everyone_if_no_acl_found {
            s.allow_everyone_if_no_acl_found = v;
        }
        if let Some(v) = self.ssl_principal_mapping_rules {
            s.ssl_principal_mapping_rules = v;
        }
        if let Some(v) = self.ssl_reload_interval_ms {
            s.ssl_reload_interval_ms = v;
        }
        if let Some(v) = self.http_listen {
            s.http_listen = v;
        }
        if let Some(v) = self.data_dir {
            s.data_dir = v;
        }
        if let Some(v) = self.metastore {
            s.metastore = v;
        }
        if let Some(v) = self.metastore_path {
            s.metastore_path = Some(v);
        }
        if let Some(v) = self.fdb_cluster_file {
            s.fdb_cluster_file = Some(v);
        }
        if let Some(v) = self.fdb_prefix {
            s.fdb_prefix = v;
        }
        if let Some(v) = self.num_partitions {
            s.topic_defaults.num_partitions = v;
        }
        if let Some(v) = self.auto_create_topics {
            s.auto_create_topics = v;
        }
        if let Some(v) = self.archive_url {
            s.archive_url = Some(v);
        }
        if let Some(v) = self.compactor_enabled {
            s.compactor_enabled = v;
        }
        if let Some(v) = self.tiering_enabled {
            s.tiering_enabled = v;
        }
        if let Some(v) = self.tiering_interval_ms {
            s.tiering_interval_ms = v;
        }
        if let Some(v) = self.tiering_max_bytes_per_second {
            s.tiering_max_bytes_per_second = v;
        }
        if let Some(v) = self.log_cleaner_io_max_bytes_per_second {
            s.log_cleaner_io_max_bytes_per_second = v;
        }
        if let Some(v) = self.log_cleaner_backoff_ms {
            s.log_cleaner_backoff_ms = v;
        }
        if let Some(v) = self.background_threads {
            s.background_threads = v;
        }
        if let Some(v) = self.background_priority {
            s.background_priority = v;
        }
        if let Some(v) = self.log_retention_check_interval_ms {
            s.log_retention_check_interval_ms = v;
        }
        if let Some(v) = self.archive_gc_grace_ms {
            s.archive_gc_grace_ms = v;
        }
        if let Some(v) = self.transaction_max_timeout_ms {
            s.transaction_max_timeout_ms = v;
        }
        if let Some(v) = self.transaction_abort_timed_out_transaction_cleanup_interval_ms {
            s.transaction_abort_timed_out_transaction_cleanup_interval_ms = v;
        }
        if let Some(v) = self.transactional_id_expiration_ms {
            s.transactional_id_expiration_ms = v;
        }
        if let Some(v) = self.archive_merge_target_bytes {
            s.archive_merge_target_bytes = v;
        }
        if let Some(v) = self.default_replication_factor {
            s.topic_defaults.replication_factor = v;
        }
        if let Some(v) = self.lease_ms {
            s.lease_ms = v;
        }
        if let Some(v) = self.ack_durability {
            s.ack_durability = v;
        }
        if let Some(v) = self.queued_max_request_bytes {
            s.queued_max_request_bytes = v;
        }
        if let Some(v) = self.max_connections {
            s.max_connections = v;
        }
        if let Some(v) = self.max_connections_per_ip {
            s.max_connections_per_ip = v;
        }
        if let Some(v) = &self.max_connections_per_ip_overrides {
            s.max_connections_per_ip_overrides = v.clone();
        }
        if let Some(v) = self.connections_max_idle_ms {
            s.connections_max_idle_ms = v;
        }
        if let Some(v) = self.request_read_timeout_ms {
            s.request_read_timeout_ms = v;
        }
        if let Some(v) = self.replica_lag_time_max_ms {
            s.replica_lag_time_max_ms = v;
        }
        if let Some(v) = self.leader_rebalance_interval_ms {
            s.leader_rebalance_interval_ms = v;
        }
        if let Some(v) = self.replica_replacement_delay_ms {
            s.replica_replacement_delay_ms = v;
        }
        if let Some(v) = self.replica_moves_max {
            s.replica_moves_max = v;
        }
        if let Some(v) = self.replica_balance_enabled {
            s.replica_balance_enabled = v;
        }
        if let Some(v) = self.replica_rebuild_max_bytes_per_second {
            s.replica_rebuild_max_bytes_per_second = v;
        }
        if let Some(v) = self.group_initial_rebalance_delay_ms {
            s.group_initial_rebalance_delay_ms = v;
        }
        Ok(s)
    }
}

/// glibc's allocator raises its mmap threshold as large blocks are freed, and from then
/// on keeps large blocks (request frames) in its heaps after they are freed: a flood of
/// 8 MiB produce requests once left 450 MiB resident after it ended
/// (`bench/flood_bench.py`). A fixed threshold keeps blocks of 4 MiB and more in their
/// own mappings, given back to the system as soon as they are freed; request frames and
/// fetch answers come from pools bounded by the request budget (`buffers.rs`) anyway.
/// Below it, and with a heap given back only past 8 MiB free at its top (glibc's own
/// ratio, twice the threshold), the blocks produce allocates for every batch (the
/// decoded records of a 1 MB batch of small records are 1–2 MB) are reused from the
/// heap instead of mapped, faulted in and zeroed each time (issue 33: with 1 MiB and
/// glibc's default 128 KiB trim, a full-speed produce of 100-byte records took half a
/// million page faults in 8 s).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn return_large_blocks() {
    /// Heaps glibc may keep (its default is 8 per core): each may keep up to the trim
    /// threshold free, so their number bounds what the process holds after a burst.
    const ARENAS: i32 = 4;
    // SAFETY: mallopt only sets parameters of the allocator; it is called first thing
    // in main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn return_large_blocks() {}

fn main() -> std::process::ExitCode {
    return_large_blocks();
    let directives = std::env::var("STRATA_LOG").unwrap_or_else(|_| "info".to_string());
    let logging = tracing_subscriber::fmt()
        .with_env_filter(strata_agent::log_level::initial_filter(&directives))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter_reloading();
    let reload = logging.reload_handle();
    logging.init();
    strata_agent::log_level::install(
        &directives,
        Box::new(move |filter| reload.reload(filter).map_err(|e| e.to_string())),
    );
    let cli = Cli::parse();
    let (args, mode) = match cli.command {
        Some(Command::Agent(args)) => (args, Mode::Agent),
        Some(Command::Tiering(args)) => (args, Mode::Tiering),
        Some(Command::Compactor(args)) => (args, Mode::Compactor),
        Some(Command::Operator(command)) => return operate(command),
        None => (cli.agent, Mode::Agent),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strata: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(run(args, mode));
    drop(runtime);
    strata_agent::metastore::close();
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Once, through the log (which goes to stderr).
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs an operator command against a running cluster: errors once, on stderr, and
/// exit status 1.
fn operate(command: strata_agent::cli::Operator) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strata: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(strata_agent::cli::run(command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
    }
    Ok(())
}

async fn run(args: AgentArgs, mode: Mode) -> anyhow::Result<()> {
    let settings = args.settings()?;
    if mode != Mode::Agent {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let mut worker = if mode == Mode::Tiering {
            tokio::spawn(strata_agent::tiering_process::run(
                settings,
                shutdown.clone(),
            ))
        } else {
            tokio::spawn(strata_agent::compactor_process::run(
                settings,
                shutdown.clone(),
            ))
        };
        return tokio::select! {
            r = stop_signal() => {
                r?;
                shutdown.cancel();
                worker.await?
            }
            // It stopped by itself: bad settings or an unusable archive.
            done = &mut worker => done?,
        };
    }
    let agent = strata_agent::start(settings).await?;
    let replaced = agent.broker.membership().replaced().clone();
    tokio::select! {
        r = stop_signal() => r?,
        _ = replaced.cancelled() => {
            agent.shutdown().await;
            anyhow::bail!(
                "another agent took this node id over (on another data directory) while this one could not renew its lease"
            );
        }
    }
    agent.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap checks its definitions only when a command is parsed: a clash (two flags
    /// with one short name) would otherwise panic in the hands of a user.
    #[test]
    fn every_command_line_definition_is_valid() {
        super::Cli::command().debug_assert();
    }
}
