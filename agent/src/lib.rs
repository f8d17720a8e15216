//! The strata broker agent: Kafka listener, HTTP API, and the partitions it serves.
//!
//! [`start`] builds an agent from [`Settings`] and returns once it accepts connections;
//! [`Agent::shutdown`] stops it cleanly (in-flight requests finished, logs fsynced).
//! The `strata` binary is a thin shell around these.

pub mod api;
pub mod audit;
pub mod authz;
pub mod broker;
pub mod broker_config;
pub mod buffers;
pub mod caller;
pub mod cli;
pub mod clock;
pub mod commit;
pub mod compactor_process;
pub mod config;
pub mod context;
pub mod controller;
pub mod datadir;
pub mod error;
pub mod error_map;
pub mod fetch_sessions;
pub mod fetcher;
pub mod frame;
pub mod group;
pub mod http;
pub mod isr;
pub mod log_level;
pub mod membership;
pub mod metastore;
pub mod metrics;
pub mod observe;
pub mod open_files;
pub mod partition;
mod peer;
pub mod peers;
pub mod producer_ids;
pub mod quota;
pub mod rebuild;
pub mod replicas;
pub mod sasl;
pub mod server;
pub mod service;
pub mod tasks;
pub mod throttle;
pub mod tiering_process;
pub mod tls;
pub mod topic_config;
pub mod txn;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::Settings;

use crate::broker::Broker;
use crate::datadir::DataDir;
use crate::tasks::{Stopped, Tasks};

/// How long shutdown waits for in-flight requests before closing anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    pub kafka_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub broker: Arc<Broker>,
    tasks: Tasks,
    abandon_metastore: CancellationToken,
    _data_dir: DataDir,
}

/// This build: the crate version and the git commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("STRATA_COMMIT"), ")");

/// Starts an agent; returns once both listeners accept connections.
pub async fn start(settings: Settings) -> anyhow::Result<Agent> {
    settings.validate()?;
    // The embedded metastore lives in the data directory by default.
    datadir::create_private_dir(&settings.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            settings.data_dir.display()
        )
    })?;
    let store = metastore::open_store(&settings)?;
    start_on(settings, store).await
}

/// Starts an agent on a metastore backend the caller opened (`settings.metastore` is
/// not consulted): the in-process cluster harness of `strata-tests` wraps each agent's
/// backend so that it can cut the agent off from the metastore.
pub async fn start_on(
    settings: Settings,
    store: Arc<dyn strata_metastore::KvStore>,
) -> anyhow::Result<Agent> {
    settings.validate()?;
    // Before anything is recorded: events before the recorder exists are lost.
    metrics::handle();
    // Where things are, as paths a reader can open.
    let absolute = |p: std::path::PathBuf| std::path::absolute(&p).unwrap_or(p);
    let metastore_at = match settings.metastore {
        config::MetastoreKind::Embedded => {
            format!("embedded {}", absolute(settings.metastore_path()).display())
        }
        config::MetastoreKind::Fdb => match &settings.fdb_cluster_file {
            Some(f) => format!("fdb {}", f.display()),
            None => "fdb (the default cluster file)".to_string(),
        },
    };
    let archive_at = settings.archive_url.clone().unwrap_or_else(|| {
        let dir = absolute(settings.data_dir.join("archive"));
        format!("file://{}", dir.display())
    });
    tracing::info!(
        version = VERSION,
        node_id = settings.node_id,
        data_dir = %absolute(settings.data_dir.clone()).display(),
        metastore = %metastore_at,
        archive = %archive_at,
        tiering = settings.tiering_enabled,
        compactor = settings.compactor_enabled,
        ack_durability = ?settings.ack_durability,
        lease_ms = settings.lease_ms,
        auto_create_topics = settings.auto_create_topics,
        "starting strata"
    );
    let files = open_files::FileBudget::raise();
    let data_dir = DataDir::open(&settings.data_dir)?;
    let shutdown = CancellationToken::new();
    // Every metastore call is bounded; calls still in flight once the tasks drained (or
    // failed to) are abandoned, so a hung metastore cannot hold shutdown up.
    let abandon_metastore = CancellationToken::new();
    let clock = clock::SystemClock::shared();
    let metastore = strata_metastore::Metastore::new(store, metastore::PREFIX).with_limits(
        strata_metastore::CallLimits {
            deadline: strata_metastore::kv::DEFAULT_DEADLINE,
            abandon: Some(abandon_metastore.clone()),
            clock: Arc::clone(&clock),
        },
    );
    let mut sockets = Vec::new();
    for spec in settings.listener_specs()? {
        let socket = TcpListener::bind(spec.listen).await.with_context(|| {
            format!("cannot listen for Kafka ({}) on {}", spec.name, spec.listen)
        })?;
        let bound = socket.local_addr()?;
        sockets.push((spec, socket, bound));
    }
    let http_listener = TcpListener::bind(settings.http_listen)
        .await
        .with_context(|| format!("cannot listen for HTTP on {}", settings.http_listen))?;
    // The agent's own address: its default listener's, or without one its inter-agent
    // listener's (bound now, so a port 0 in the settings is the port given).
    let (own_spec, _, kafka_addr) = if settings.kafka_listen.is_some() {
        &sockets[0]
    } else {
        let name = settings.inter_agent_listener.trim();
        sockets
            .iter()
            .find(|(spec, _, _)| spec.name == name)
            .context("the inter-agent listener is bound")?
    };
    let kafka_addr = *kafka_addr;
    let own_advertised = match &own_spec.advertised {
        Some((host, port)) if settings.kafka_listen.is_none() => format!("{host}:{port}"),
        _ => kafka_addr.to_string(),
    };
    let http_addr = http_listener.local_addr()?;
    let mut settings = settings;
    if settings.kafka_advertised.is_none() {
        settings.kafka_advertised = Some(own_advertised);
    }
    let archive_url = match &settings.archive_url {
        Some(url) => url.clone(),
        None => {
            let dir = std::fs::canonicalize(data_dir.path())?.join("archive");
            format!("file://{}", dir.display())
        }
    };
    let archive = strata_tiering::Archive::from_url(&archive_url)?;
    let reader = Arc::new(strata_tiering::ArchiveReader::new(
        archive,
        metastore.clone(),
        settings.archive_cache_bytes,
    ));
    let tiering_every = Duration::from_millis(settings.tiering_interval_ms.max(10));
    // Loaded before the agents connect to each other: a TLS inter-agent listener needs it.
    let tls = match settings.tls_files()? {
        Some(files) => {
            let rules = tls::PrincipalRules::parse(&settings.ssl_principal_mapping_rules).map_err(
                |why| anyhow::anyhow!("invalid setting ssl_principal_mapping_rules: {why}"),
            )?;
            Some(Arc::new(tls::Tls::load(files, rules)?))
        }
        None => None,
    };
    let peers = settings.peer_access(tls.as_ref())?;
    peers.seed_credential(&metastore).await?;
    let membership = Arc::new(
        membership::Membership::join(
            metastore.clone(),
            Arc::clone(&clock),
            membership::Joining {
                node_id: settings.node_id,
                kafka: settings.advertised()?,
                listeners: sockets
                    .iter()
                    .map(|(spec, _, bound)| {
                        let (host, port) = spec
                            .advertised
                            .clone()
                            .unwrap_or_else(|| (bound.ip().to_string(), i32::from(bound.port())));
                        strata_metastore::ListenerAddress {
                            name: spec.name.clone(),
                            host,
                            port,
                        }
                    })
                    .collect(),
                http: http_addr.to_string(),
                rack: settings.rack.clone(),
                data_dir_id: data_dir.id().to_string(),
                lease: Duration::from_millis(settings.lease_ms),
                peers,
            },
        )
        .await?,
    );
    let broker = Broker::new(broker::Parts {
        settings,
        metastore,
        membership: Arc::clone(&membership),
        logs_dir: data_dir.logs(),
        archive: reader,
        files,
        shutdown: shutdown.clone(),
    })
    .await?;
    let settings = broker.settings();
    let replicas = broker.replicas();
    let tasks = Tasks::new(shutdown.clone());
    tasks.spawn(
        "maintenance",
        Arc::clone(replicas).maintenance(Duration::from_secs(5)),
    );
    tasks.spawn("data lifecycle", Arc::clone(broker.lifecycle()).run());
    tasks.spawn("metrics upkeep", metrics::upkeep(shutdown.clone()));
    tasks.spawn("transaction coordinator", {
        let transactions = Arc::clone(broker.transactions());
        let shutdown = shutdown.clone();
        async move { transactions.run(shutdown).await }
    });
    tasks.spawn(
        "follow quota changes",
        Arc::clone(broker.quotas()).follow_changes(Duration::from_secs(60), shutdown.clone()),
    );
    tasks.spawn(
        "follow acl changes",
        Arc::clone(broker.authorizer()).follow_changes(Duration::from_secs(60), shutdown.clone()),
    );
    tasks.spawn(
        "follow topic changes",
        Arc::clone(replicas).follow_topic_changes(),
    );
    tasks.spawn(
        "follow lease regained",
        Arc::clone(replicas).follow_lease_regained(),
    );
    tasks.spawn(
        "controller",
        controller::run(
            Arc::clone(replicas),
            Duration::from_millis(settings.lease_ms),
            Duration::from_millis(settings.leader_rebalance_interval_ms),
            settings.healing(),
        ),
    );
    tasks.spawn(
        "isr manager",
        isr::manage_isr(Arc::clone(replicas), settings.replica_lag_time_max_ms),
    );
    {
        let shutdown = shutdown.clone();
        tasks.spawn("membership", async move { membership.run(shutdown).await });
    }
    tasks.spawn(
        "group coordinator",
        Arc::clone(broker.groups().coordinator()).run(shutdown.clone()),
    );
    if let Some(worker) = broker.tiering() {
        let replicas = Arc::clone(replicas);
        let run = Arc::clone(worker).run(
            move || replicas.tiered_partitions(),
            tiering_every,
            shutdown.clone(),
        );
        tasks.spawn("tiering", async move {
            run.await;
            Stopped::Shutdown
        });
        tracing::info!(archive = %archive_url, "tiering closed segments");
    }
    let sasl = if sockets.iter().any(|(spec, _, _)| spec.protocol.is_sasl()) {
        Some(Arc::new(sasl::Sasl::new(
            broker.metastore().clone(),
            &settings.sasl_mechanisms()?,
            Arc::clone(broker.login_failures()),
            match settings.oauth_settings()? {
                Some(o) => Some(sasl::oauth::Validator::load(o)?),
                None => None,
            },
        )))
    } else {
        None
    };
    if let Some(tls) = &tls {
        let watch = Arc::clone(tls).watch(
            Duration::from_millis(settings.ssl_reload_interval_ms),
            shutdown.clone(),
        );
        tasks.spawn("tls reload", async move {
            watch.await;
            Stopped::Shutdown
        });
    }
    let reauth = (settings.connections_max_reauth_ms > 0)
        .then(|| Duration::from_millis(settings.connections_max_reauth_ms));
    let shared = server::Shared::new(settings);
    let mut bound = Vec::new();
    for (spec, socket, address) in sockets {
        let advertised = match &spec.advertised {
            Some((host, port)) => format!("{host}:{port}"),
            None => address.to_string(),
        };
        bound.push((spec.name.clone(), address, advertised));
        let endpoint = server::Endpoint {
            socket,
            listener: Arc::new(context::Listener::new(&spec.name, spec.protocol)),
            sasl: sasl.clone().filter(|_| spec.protocol.is_sasl()),
            tls: tls.clone().filter(|_| spec.protocol.is_tls()),
            reauth,
        };
        tasks.spawn(
            "kafka listener",
            server::serve(endpoint, shared.clone(), Arc::clone(&broker), tasks.clone()),
        );
    }
    {
        let http = http::serve(http_listener, Arc::clone(&broker));
        tasks.spawn("http listener", async move {
            match http.await {
                Ok(()) => Stopped::Shutdown,
                Err(e) => Stopped::Failed(format!("HTTP listener: {e}")),
            }
        });
    }
    ready_log(&broker, &bound, http_addr);
    Ok(Agent {
        kafka_addr,
        http_addr,
        broker,
        tasks,
        abandon_metastore,
        _data_dir: data_dir,
    })
}

fn ready_log(broker: &Broker, kafka: &[(String, SocketAddr, String)], http: SocketAddr) {
    let id = broker.identity();
    for (name, address, advertised) in kafka {
        tracing::info!(
            listener = "kafka",
            name = %name,
            address = %address,
            advertised = %advertised,
            node_id = id.node_id,
            cluster_id = %id.cluster_id,
            "listening"
        );
    }
    tracing::info!(listener = "http", address = %http, "listening");
}

impl Agent {
    /// Hands leadership to other in-sync replicas where there are any, stops accepting,
    /// lets in-flight requests finish, fsyncs every log, and releases the data directory.
    pub async fn shutdown(self) {
        if tokio::time::timeout(DRAIN_TIMEOUT, self.broker.replicas().resign_leadership())
            .await
            .is_err()
        {
            tracing::warn!("could not hand every leadership over in time");
        }
        if !self.tasks.drain(DRAIN_TIMEOUT).await {
            tracing::warn!(
                "in-flight requests did not finish within {DRAIN_TIMEOUT:?}; closing anyway"
            );
        }
        self.abandon_metastore.cancel();
        if tokio::time::timeout(DRAIN_TIMEOUT, self.broker.replicas().close())
            .await
            .is_err()
        {
            tracing::warn!("partition tasks did not stop within {DRAIN_TIMEOUT:?}");
        }
        tracing::info!("stopped: every log flushed");
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.broker.shutdown().is_cancelled()
    }
}
