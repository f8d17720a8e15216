//! The strata broker agent: Kafka listener, HTTP API, and the partitions it serves.
//!
//! [`start`] builds an agent from [`Settings`] and returns once it accepts connections;
//! [`Agent::shutdown`] stops it cleanly (in-flight requests finished, logs fsynced).
//! The `strata` binary is a thin shell around these.

pub mod api;
pub mod broker;
pub mod clock;
pub mod config;
pub mod controller;
pub mod datadir;
pub mod group;
pub mod http;
pub mod membership;
pub mod metastore;
pub mod open_files;
pub mod partition;
pub mod producer_ids;
pub mod replication;
pub mod server;
pub mod tiering_process;
pub mod topic_config;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::Settings;

use crate::broker::Broker;
use crate::datadir::DataDir;

/// How long shutdown waits for in-flight requests before closing anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    pub kafka_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub broker: Arc<Broker>,
    tracker: TaskTracker,
    http: JoinHandle<std::io::Result<()>>,
    _data_dir: DataDir,
}

/// Starts an agent; returns once both listeners accept connections.
pub async fn start(settings: Settings) -> anyhow::Result<Agent> {
    settings.validate()?;
    let files = open_files::FileBudget::raise();
    let data_dir = DataDir::open(&settings.data_dir)?;
    let metastore = metastore::open(&settings)?;
    let shutdown = CancellationToken::new();
    let kafka_listener = TcpListener::bind(settings.kafka_listen)
        .await
        .with_context(|| format!("cannot listen for Kafka on {}", settings.kafka_listen))?;
    let http_listener = TcpListener::bind(settings.http_listen)
        .await
        .with_context(|| format!("cannot listen for HTTP on {}", settings.http_listen))?;
    let kafka_addr = kafka_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    let mut settings = settings;
    if settings.kafka_advertised.is_none() {
        settings.kafka_advertised = Some(kafka_addr.to_string());
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
    let membership = Arc::new(
        membership::Membership::join(
            metastore.clone(),
            settings.node_id,
            settings.advertised()?,
            http_addr.to_string(),
            settings.rack.clone(),
            data_dir.id(),
            Duration::from_millis(settings.lease_ms),
        )
        .await?,
    );
    let broker = Broker::new(
        settings,
        metastore,
        Arc::clone(&membership),
        data_dir.logs(),
        reader,
        files,
        shutdown.clone(),
    )
    .await?;
    let tracker = TaskTracker::new();
    tracker.spawn(Arc::clone(&broker).maintenance(Duration::from_secs(5)));
    tracker.spawn(Arc::clone(&broker).follow_topic_changes());
    tracker.spawn(Arc::clone(&broker).follow_lease_regained());
    tracker.spawn(controller::run(Arc::clone(&broker)));
    tracker.spawn(replication::manage_isr(Arc::clone(&broker)));
    {
        let shutdown = broker.shutdown.clone();
        tracker.spawn(async move { membership.run(shutdown).await });
    }
    tracker.spawn(Arc::clone(&broker.groups).run(broker.shutdown.clone()));
    if let Some(worker) = &broker.tiering {
        let b = Arc::clone(&broker);
        tracker.spawn(Arc::clone(worker).run(
            move || b.tiered_partitions(),
            tiering_every,
            broker.shutdown.clone(),
        ));
        tracing::info!(archive = %archive_url, "tiering closed segments");
    }
    tracker.spawn(server::serve(
        kafka_listener,
        Arc::clone(&broker),
        tracker.clone(),
    ));
    let http = tokio::spawn(http::serve(http_listener, Arc::clone(&broker)));
    ready_log(&broker, kafka_addr, http_addr);
    Ok(Agent {
        kafka_addr,
        http_addr,
        broker,
        tracker,
        http,
        _data_dir: data_dir,
    })
}

fn ready_log(broker: &Broker, kafka: SocketAddr, http: SocketAddr) {
    tracing::info!(
        listener = "kafka",
        address = %kafka,
        advertised = %format!("{}:{}", broker.advertised_host, broker.advertised_port),
        node_id = broker.node_id,
        cluster_id = %broker.cluster_id,
        "listening"
    );
    tracing::info!(listener = "http", address = %http, "listening");
}

impl Agent {
    /// Hands leadership to other in-sync replicas where there are any, stops accepting,
    /// lets in-flight requests finish, fsyncs every log, and releases the data directory.
    pub async fn shutdown(self) {
        if tokio::time::timeout(DRAIN_TIMEOUT, self.broker.resign_leadership())
            .await
            .is_err()
        {
            tracing::warn!("could not hand every leadership over in time");
        }
        self.broker.shutdown.cancel();
        self.tracker.close();
        if tokio::time::timeout(DRAIN_TIMEOUT, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "in-flight requests did not finish within {DRAIN_TIMEOUT:?}; closing anyway"
            );
        }
        let _ = self.http.await;
        self.broker.close().await;
        tracing::info!("stopped: every log flushed");
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.broker.shutdown.is_cancelled()
    }
}
