//! Client quotas: produce and fetch byte rates, request time and connection creation
//! rates per user, client id or address, as Kafka's brokers enforce them (KIP-13,
//! KIP-55, KIP-124, KIP-219, KIP-612).
//!
//! Quotas are set with AlterClientQuotas and kept in the metastore; every agent holds
//! them in memory ([`rules::QuotaIndex`]), re-read on a metastore watch, so no request
//! waits on the metastore. Each agent measures what it serves: a client over its quota
//! is not refused but slowed down, cooperatively, as Kafka does: the answer carries
//! `throttle_time_ms` and the connection is not read from for that long (the channel is
//! muted), so a well-behaved client waits and a misbehaving one waits anyway. With no
//! quota set, nothing is measured.

pub mod edge;
pub mod rules;

use std::net::IpAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use strata_metastore::Metastore;
use tokio_util::sync::CancellationToken;

use crate::tasks::Stopped;
use rules::{QuotaIndex, Rate, SensorKey};
pub use rules::{QuotaKind, Windows};

/// Usage of clients unheard of for this long is forgotten (Kafka expires its quota
/// sensors after an hour).
const SENSOR_IDLE: Duration = Duration::from_secs(3600);
/// At most this many clients' usage is kept; the least recently seen go first.
const MAX_SENSORS: u64 = 100_000;

/// The agent's quotas and the usage they are measured against.
pub struct Quotas {
    metastore: Metastore,
    windows: Windows,
    index: RwLock<Arc<QuotaIndex>>,
    sensors: moka::sync::Cache<SensorKey, Arc<Mutex<Rate>>>,
    connections: moka::sync::Cache<IpAddr, Arc<Mutex<Rate>>>,
    /// The clock's zero for the rates' milliseconds.
    started: tokio::time::Instant,
}

impl std::fmt::Debug for Quotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quotas")
            .field("windows", &self.windows)
            .finish_non_exhaustive()
    }
}

/// Usage by client, forgetting the least recently seen.
fn usage<K: std::hash::Hash + Eq + Send + Sync + 'static>() -> moka::sync::Cache<K, Arc<Mutex<Rate>>>
{
    moka::sync::Cache::builder()
        .max_capacity(MAX_SENSORS)
        .time_to_idle(SENSOR_IDLE)
        .build()
}

impl Quotas {
    pub fn new(windows: Windows, metastore: Metastore) -> Quotas {
        Quotas {
            metastore,
            windows,
            index: RwLock::new(Arc::new(QuotaIndex::default())),
            sensors: usage(),
            connections: usage(),
            started: crate::clock::instant(),
        }
    }

    fn index(&self) -> Arc<QuotaIndex> {
        Arc::clone(&self.index.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Whether any quota is set: without one, nothing is measured.
    pub fn any(&self) -> bool {
        !self.index().is_empty()
    }

    /// Counts `amount` of `kind` (bytes, or request time in hundredths of a second)
    /// for `user` (the principal's name) and `client_id`, and answers how long the
    /// client must now wait; zero when no quota applies or it is within its quota.
    pub fn record(&self, kind: QuotaKind, user: &str, client_id: &str, amount: f64) -> Duration {
        let Some((quota, key)) = self.index().quota(kind, user, client_id) else {
            return Duration::ZERO;
        };
        let windows = self.windows;
        let sensor = self
            .sensors
            .get_with(key, || Arc::new(Mutex::new(Rate::new(windows))));
        let now = self.now_ms();
        let mut rate = sensor.lock().unwrap_or_else(|p| p.into_inner());
        rate.record(now, amount);
        let throttle = Duration::from_millis(rate.throttle_ms(now, quota));
        if !throttle.is_zero() {
            crate::metrics::quota_throttled(kind.key(), throttle);
        }
        throttle
    }

    /// Takes back `amount` counted by [`Quotas::record`] (a fetch answered empty
    /// because it was throttled sent nothing).
    pub fn unrecord(&self, kind: QuotaKind, user: &str, client_id: &str, amount: f64) {
        if let Some((_, key)) = self.index().quota(kind, user, client_id)
            && let Some(sensor) = self.sensors.get(&key)
        {
            let now = self.now_ms();
            sensor
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(now, -amount);
        }
    }

    /// Counts a new connection from `ip`: false when that makes its rate exceed the
    /// address's `connection_creation_rate` (the connection is then refused).
    pub fn admit_connection(&self, ip: IpAddr) -> bool {
        let Some(quota) = self.index().connection_rate(&ip.to_string()) else {
            return true;
        };
        let windows = self.windows;
        let sensor = self
            .connections
            .get_with(ip, || Arc::new(Mutex::new(Rate::new(windows))));
        let now = self.now_ms();
        let mut rate = sensor.lock().unwrap_or_else(|p| p.into_inner());
        rate.record(now, 1.0);
        if rate.per_second(now) > quota {
            // A refused connection does not count against the address.
            rate.record(now, -1.0);
            return false;
        }
        true
    }

    /// Every quota set, for DescribeClientQuotas.
    pub fn snapshot(&self) -> Arc<QuotaIndex> {
        self.index()
    }

    /// Re-reads every quota from the metastore.
    pub async fn refresh(&self) -> strata_metastore::Result<()> {
        let index = Arc::new(QuotaIndex::new(self.metastore.quotas().await?));
        *self.index.write().unwrap_or_else(|p| p.into_inner()) = index;
        Ok(())
    }

    /// Keeps the quotas current (a metastore watch, and `backstop`). Stops on shutdown.
    pub async fn follow_changes(
        self: Arc<Self>,
        backstop: Duration,
        shutdown: CancellationToken,
    ) -> Stopped {
        crate::tasks::follow(
            "client quotas",
            || self.metastore.watch_quotas(),
            || self.refresh(),
            backstop,
            shutdown,
        )
        .await
    }
}
