//! An in-process cluster: N agents on one metastore, each behind a switch that can cut
//! it off from the metastore and a proxy that can cut it off from the network, so that
//! cluster behaviour (elections, fencing, ISR changes, handover) is tested at the
//! protocol level from Rust.
//!
//! Every agent advertises its proxy's address, so clients and the other agents' fetchers
//! reach it through the proxy. The proxy tells an agent's fetcher from a client by the
//! client id of the first request on the connection (`strata-replica-<id>`), so a link
//! between two agents can be cut while clients still reach both, or the other way round.
//!
//! Faults, per agent:
//! - [`Cluster::stop`]: a clean shutdown (leadership handed over, lease released).
//! - [`Cluster::kill`]: a crash as the cluster sees it: the agent is cut off from the
//!   metastore and the network first, so nothing of its shutdown reaches anyone; its
//!   lease runs out; what it wrote stays on disk (a process crash keeps the page cache).
//! - [`Cluster::pause`] / [`Cluster::resume`]: a stopped process (a long GC pause, a
//!   frozen VM) as the others see it: its connections carry nothing and its metastore
//!   calls wait, until resumed; then it works through its backlog.
//! - [`Cluster::isolate`] / [`Cluster::heal`]: a network partition: its connections are
//!   cut, new ones refused, its metastore calls fail.
//! - [`Cluster::cut`] / [`Cluster::mend`]: one link between two agents only.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::Buf;
use kafka_protocol::messages::RequestHeader;
use kafka_protocol::protocol::Decodable;
use strata_agent::{Agent, Settings};
use strata_metastore::kv::{KeyValue, KvStore, KvTransaction, Watch};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::Client;

/// How an agent reaches the metastore and the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Up,
    /// Calls and bytes wait.
    Paused,
    /// Calls fail, connections are cut.
    Isolated,
}

/// Who may talk to whom.
#[derive(Debug, Default)]
struct Links {
    /// Agent pairs (lower id first) whose link is cut.
    cut: BTreeSet<(i32, i32)>,
}

/// The network state every proxy consults; changes wake every connection.
#[derive(Debug, Clone)]
struct Network {
    reach: Arc<Vec<watch::Sender<Reach>>>,
    links: Arc<Mutex<Links>>,
    changed: watch::Sender<u64>,
}

impl Network {
    fn reach(&self, id: i32) -> Reach {
        *self.reach[(id - 1) as usize].borrow()
    }

    /// Whether bytes flow between `from` (an agent, or `None` for a client) and agent
    /// `to` now; `None` while either end is paused.
    fn open(&self, from: Option<i32>, to: i32) -> Option<bool> {
        let ends = [Some(to), from];
        let reaches: Vec<Reach> = ends.iter().flatten().map(|&id| self.reach(id)).collect();
        if reaches.contains(&Reach::Isolated) {
            return Some(false);
        }
        if reaches.contains(&Reach::Paused) {
            return None;
        }
        if let Some(from) = from {
            let pair = (from.min(to), from.max(to));
            let links = self.links.lock().unwrap_or_else(|p| p.into_inner());
            if links.cut.contains(&pair) {
                return Some(false);
            }
        }
        Some(true)
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// One agent's way to the shared metastore, through its [`Reach`].
#[derive(Debug)]
struct Switch {
    inner: Arc<dyn KvStore>,
    reach: watch::Receiver<Reach>,
}

impl Switch {
    async fn pass(reach: &watch::Receiver<Reach>) -> strata_metastore::Result<()> {
        let mut reach = reach.clone();
        let now = *reach
            .wait_for(|r| *r != Reach::Paused)
            .await
            .map_err(|e| unreachable_error(e.to_string()))?;
        match now {
            Reach::Isolated => Err(unreachable_error("isolated from the metastore".into())),
            _ => Ok(()),
        }
    }
}

fn unreachable_error(why: String) -> strata_metastore::Error {
    strata_metastore::Error::Backend {
        context: "cluster harness",
        source: why.into(),
    }
}

#[async_trait]
impl KvStore for Switch {
    async fn begin(&self) -> strata_metastore::Result<Box<dyn KvTransaction>> {
        Switch::pass(&self.reach).await?;
        let inner = self.inner.begin().await?;
        Ok(Box::new(SwitchedTransaction {
            inner,
            reach: self.reach.clone(),
        }))
    }

    async fn watch(&self, key: &[u8]) -> strata_metastore::Result<Watch> {
        Switch::pass(&self.reach).await?;
        self.inner.watch(key).await
    }
}

struct SwitchedTransaction {
    inner: Box<dyn KvTransaction>,
    reach: watch::Receiver<Reach>,
}

#[async_trait]
impl KvTransaction for SwitchedTransaction {
    async fn get(&mut self, key: &[u8]) -> strata_metastore::Result<Option<Vec<u8>>> {
        Switch::pass(&self.reach).await?;
        self.inner.get(key).await
    }

    async fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> strata_metastore::Result<Vec<KeyValue>> {
        Switch::pass(&self.reach).await?;
        self.inner.get_range(begin, end, limit, reverse).await
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.inner.set(key, value)
    }

    fn clear(&mut self, key: &[u8]) {
        self.inner.clear(key)
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) {
        self.inner.clear_range(begin, end)
    }

    fn atomic_add(&mut self, key: &[u8], delta: i64) {
        self.inner.atomic_add(key, delta)
    }

    async fn commit(self: Box<Self>) -> strata_metastore::Result<()> {
        Switch::pass(&self.reach).await?;
        self.inner.commit().await
    }
}

/// One member of the cluster.
struct Member {
    settings: Settings,
    agent: Option<Agent>,
    /// Where the proxy forwards to: the agent's own listener, while it runs.
    target: watch::Sender<Option<SocketAddr>>,
    proxy: SocketAddr,
    _dir: tempfile::TempDir,
}

/// N agents on one metastore; agent ids are 1..=N.
pub struct Cluster {
    members: Vec<Member>,
    store: Arc<dyn KvStore>,
    network: Network,
    _metastore_dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` agents, each with settings from [`Cluster::settings`] changed by
    /// `adjust` (which may set, say, `topic_defaults`).
    pub async fn start(n: usize, adjust: impl Fn(&mut Settings)) -> anyhow::Result<Cluster> {
        let metastore_dir = tempfile::tempdir()?;
        let store: Arc<dyn KvStore> = Arc::new(strata_metastore::SqliteStore::open(
            &metastore_dir.path().join("metastore.sqlite"),
        )?);
        let network = Network {
            reach: Arc::new((0..n).map(|_| watch::Sender::new(Reach::Up)).collect()),
            links: Arc::default(),
            changed: watch::Sender::new(0),
        };
        let mut members = Vec::new();
        for i in 0..n {
            let id = i as i32 + 1;
            let dir = tempfile::tempdir()?;
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let proxy = listener.local_addr()?;
            let mut settings = Cluster::settings(id, dir.path(), proxy);
            adjust(&mut settings);
            let target = watch::Sender::new(None);
            tokio::spawn(run_proxy(listener, id, target.subscribe(), network.clone()));
            members.push(Member {
                settings,
                agent: None,
                target,
                proxy,
                _dir: dir,
            });
        }
        let mut cluster = Cluster {
            members,
            store,
            network,
            _metastore_dir: metastore_dir,
        };
        for id in cluster.ids() {
            cluster.start_agent(id).await?;
        }
        Ok(cluster)
    }

    /// What every agent runs with: ephemeral ports, its own data directory, short
    /// leases and lag times so that failures are noticed within seconds.
    pub fn settings(id: i32, dir: &std::path::Path, proxy: SocketAddr) -> Settings {
        Settings {
            node_id: id,
            kafka_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            kafka_advertised: Some(proxy.to_string()),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: dir.join("data"),
            lease_ms: 2_000,
            // Above the lease: a follower that stops fetching leaves the ISR once its
            // lease runs out; lag alone, on a loaded machine, should not take it out.
            replica_lag_time_max_ms: 5_000,
            leader_rebalance_interval_ms: 3_600_000,
            group_initial_rebalance_delay_ms: 0,
            tiering_enabled: false,
            ..Settings::default()
        }
    }

    pub fn ids(&self) -> Vec<i32> {
        (1..=self.members.len() as i32).collect()
    }

    fn member(&self, id: i32) -> &Member {
        &self.members[(id - 1) as usize]
    }

    fn member_mut(&mut self, id: i32) -> &mut Member {
        &mut self.members[(id - 1) as usize]
    }

    /// The running agent `id`.
    pub fn agent(&self, id: i32) -> &Agent {
        self.member(id).agent.as_ref().expect("the agent runs")
    }

    pub fn is_running(&self, id: i32) -> bool {
        self.member(id).agent.is_some()
    }

    /// The address agent `id` advertises (its proxy): what clients bootstrap from.
    pub fn addr(&self, id: i32) -> SocketAddr {
        self.member(id).proxy
    }

    /// A client of agent `id` through its proxy, as any client reaches it.
    pub async fn client(&self, id: i32) -> anyhow::Result<Client> {
        Client::connect(self.addr(id)).await
    }

    /// A client of agent `id` past the proxy (it reaches even an isolated agent, to see
    /// what that agent would answer).
    pub async fn direct_client(&self, id: i32) -> anyhow::Result<Client> {
        Client::connect(self.agent(id).kafka_addr).await
    }

    /// Starts agent `id` (again) on its data directory.
    pub async fn start_agent(&mut self, id: i32) -> anyhow::Result<()> {
        if self.is_running(id) {
            bail!("agent {id} already runs");
        }
        let reach = self.network.reach[(id - 1) as usize].subscribe();
        let store: Arc<dyn KvStore> = Arc::new(Switch {
            inner: Arc::clone(&self.store),
            reach,
        });
        let settings = self.member(id).settings.clone();
        let agent = strata_agent::start_on(settings, store)
            .await
            .with_context(|| format!("starting agent {id}"))?;
        let member = self.member_mut(id);
        member.target.send_replace(Some(agent.kafka_addr));
        member.agent = Some(agent);
        Ok(())
    }

    /// A clean shutdown of agent `id`.
    pub async fn stop(&mut self, id: i32) {
        let member = self.member_mut(id);
        member.target.send_replace(None);
        if let Some(agent) = member.agent.take() {
            agent.shutdown().await;
        }
        self.network.notify();
    }

    /// Agent `id` crashes, as the cluster sees it: cut off first, so that nothing of
    /// its shutdown reaches anyone; its lease runs out. It stays cut off until started
    /// again.
    pub async fn kill(&mut self, id: i32) {
        self.set_reach(id, Reach::Isolated);
        self.stop(id).await;
        self.set_reach(id, Reach::Up);
    }

    /// Restarts agent `id` after a [`Cluster::stop`] or [`Cluster::kill`].
    pub async fn restart(&mut self, id: i32) -> anyhow::Result<()> {
        if self.is_running(id) {
            self.stop(id).await;
        }
        self.start_agent(id).await
    }

    pub fn pause(&self, id: i32) {
        self.set_reach(id, Reach::Paused);
    }

    pub fn resume(&self, id: i32) {
        self.set_reach(id, Reach::Up);
    }

    pub fn isolate(&self, id: i32) {
        self.set_reach(id, Reach::Isolated);
    }

    pub fn heal(&self, id: i32) {
        self.set_reach(id, Reach::Up);
    }

    /// Cuts the link between agents `a` and `b` only.
    pub fn cut(&self, a: i32, b: i32) {
        self.links().cut.insert((a.min(b), a.max(b)));
        self.network.notify();
    }

    pub fn mend(&self, a: i32, b: i32) {
        self.links().cut.remove(&(a.min(b), a.max(b)));
        self.network.notify();
    }

    fn links(&self) -> std::sync::MutexGuard<'_, Links> {
        self.network.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_reach(&self, id: i32, reach: Reach) {
        self.network.reach[(id - 1) as usize].send_replace(reach);
        self.network.notify();
    }

    /// Stops every agent cleanly.
    pub async fn shutdown(mut self) {
        for id in self.ids() {
            self.heal(id);
        }
        for id in self.ids() {
            self.stop(id).await;
        }
    }
}

/// Waits until `check` answers `Some`, trying every 50 ms for at most `within`: for
/// cluster conditions that no single event announces (a new leader everyone agrees on).
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            match last_error {
                Some(e) => bail!("{what}: not within {within:?} (last error: {e:#})"),
                None => bail!("{what}: not within {within:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Forwards connections to agent `to`'s listener, as the network allows.
async fn run_proxy(
    listener: TcpListener,
    to: i32,
    target: watch::Receiver<Option<SocketAddr>>,
    network: Network,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let Some(addr) = *target.borrow() else {
            // The agent is down: the connection is refused, as by a closed port.
            continue;
        };
        tokio::spawn(proxy_connection(client, addr, to, network.clone()));
    }
}

/// One proxied connection: learns who is calling from the first request's client id,
/// then forwards bytes both ways while the link is open, holds them while an end is
/// paused, and closes both sides once the link is cut.
async fn proxy_connection(mut client: TcpStream, addr: SocketAddr, to: i32, network: Network) {
    let mut first = Vec::new();
    let Ok(from) = caller(&mut client, &mut first).await else {
        return;
    };
    let mut changed = network.changed.subscribe();
    if !wait_open(&network, &mut changed, from, to).await {
        return;
    }
    let Ok(mut server) = TcpStream::connect(addr).await else {
        return;
    };
    if server.write_all(&first).await.is_err() {
        return;
    }
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let mut up = [0u8; 64 * 1024];
    let mut down = [0u8; 64 * 1024];
    loop {
        tokio::select! {
            n = client_read.read(&mut up) => {
                let Ok(n @ 1..) = n else { return };
                if !wait_open(&network, &mut changed, from, to).await
                    || server_write.write_all(&up[..n]).await.is_err()
                {
                    return;
                }
            }
            n = server_read.read(&mut down) => {
                let Ok(n @ 1..) = n else { return };
                if !wait_open(&network, &mut changed, from, to).await
                    || client_write.write_all(&down[..n]).await.is_err()
                {
                    return;
                }
            }
            _ = changed.changed() => {
                if network.open(from, to) == Some(false) {
                    return;
                }
            }
        }
    }
}

/// Waits while the link is paused; whether it is open (else it is cut).
async fn wait_open(
    network: &Network,
    changed: &mut watch::Receiver<u64>,
    from: Option<i32>,
    to: i32,
) -> bool {
    loop {
        match network.open(from, to) {
            Some(open) => return open,
            None => {
                if changed.changed().await.is_err() {
                    return false;
                }
            }
        }
    }
}

/// Reads the first request frame into `first` and answers which agent sent it (`None`:
/// a client).
async fn caller(stream: &mut TcpStream, first: &mut Vec<u8>) -> anyhow::Result<Option<i32>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let len = usize::try_from(i32::from_be_bytes(size)).context("negative frame size")?;
    if len > 64 * 1024 * 1024 {
        bail!("frame of {len} bytes");
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    first.extend_from_slice(&size);
    first.extend_from_slice(&body);
    let mut buf = bytes::Bytes::from(body);
    if buf.remaining() < 4 {
        return Ok(None);
    }
    // The header's own version depends on the API's; version 1 (client id, no tagged
    // fields) reads the client id of every request header version.
    let header = RequestHeader::decode(&mut buf, 1)?;
    Ok(header
        .client_id
        .as_ref()
        .and_then(|c| c.strip_prefix("strata-replica-"))
        .and_then(|id| id.parse().ok()))
}
