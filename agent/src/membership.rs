//! This agent's membership in the cluster: it registers under its node id at start,
//! renews its lease while it runs, deregisters on a clean shutdown, and keeps the set of
//! live agents that Metadata, FindCoordinator and topic placement use.
//!
//! The lease (`lease_ms`, 10 s by default) is renewed every fifth of it, so an agent that
//! stops (SIGKILL, a lost machine) leaves the live set at most one lease later, and an
//! agent that stops cleanly leaves at once.
//!
//! The lease is also what lets a leader lead: the controller elects new leaders for an
//! agent's partitions only once its lease ran out, and the agent stops taking writes a
//! renewal interval before that ([`Membership::holds_lease`]), measured on its own
//! monotonic clock from the moment it sent the renewal that succeeded.
//!
//! A renewal that comes after the lease lapsed (the process was paused, or cut off from
//! the metastore) does not give the right to write back by itself: others may have
//! elected new leaders meanwhile. It is offered on [`Membership::regained`]; the agent
//! re-reads every partition it serves from the metastore (stepping down where it was
//! replaced) and only then calls [`Membership::confirm_regained`].
//!
//! The live set is read from the metastore at every renewal and whenever an agent joins
//! or leaves, and an agent whose lease runs out leaves it at that moment, by its lease
//! time, without waiting for the next read.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use anyhow::Context;
use strata_metastore::{AgentRecord, LiveAgents, Metastore, Roster};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::tasks::Stopped;

/// Who joins, and on what lease.
#[derive(Debug, Clone)]
pub struct Joining {
    pub node_id: i32,
    /// The inter-agent listener's advertised address.
    pub kafka: (String, i32),
    /// Every Kafka listener's advertised address, by name.
    pub listeners: Vec<strata_metastore::ListenerAddress>,
    pub http: String,
    pub rack: Option<String>,
    /// The id of this agent's data directory (a node id in use by another directory
    /// is refused).
    pub data_dir_id: String,
    pub lease: Duration,
    /// How this agent reaches the others (their inter-agent listener).
    pub peers: crate::peer::PeerAccess,
}

#[derive(Debug)]
pub struct Membership {
    metastore: Metastore,
    clock: Arc<dyn Clock>,
    me: AgentRecord,
    lease: Duration,
    /// Every agent record and drain as last read; live agents are those whose lease has
    /// not ended by now, this one always among them.
    roster: RwLock<Roster>,
    /// Until when (on the clock's monotonic reading) this agent may act as a leader:
    /// one renewal interval short of the lease its last successful renewal bought.
    held_until: watch::Sender<Duration>,
    /// What a renewal after a lapse bought, until the agent confirms it has re-read
    /// its partitions ([`Membership::confirm_regained`]).
    regained: watch::Sender<Option<Duration>>,
    /// The controller lease's holder as last seen (-1: not known yet).
    controller: AtomicI32,
    /// Cancelled when another data directory took this node id over: this process must
    /// stop (its replicas are another agent's now).
    replaced: CancellationToken,
    peers: crate::peer::PeerAccess,
}

impl Membership {
    /// Registers this agent; fails if another live process holds the node id.
    pub async fn join(
        metastore: Metastore,
        clock: Arc<dyn Clock>,
        joining: Joining,
    ) -> anyhow::Result<Membership> {
        let Joining {
            node_id,
            kafka: (host, port),
            listeners,
            http,
            rack,
            data_dir_id,
            lease,
            peers,
        } = joining;
        let me = AgentRecord {
            node_id,
            host,
            port,
            http,
            listeners,
            rack,
            incarnation: uuid::Uuid::new_v4().simple().to_string(),
            data_dir_id,
            lease_until_ms: 0,
        };
        let membership = Membership {
            metastore,
            roster: RwLock::new(Roster {
                agents: vec![me.clone()],
                drains: Default::default(),
            }),
            me,
            lease,
            held_until: watch::Sender::new(clock.monotonic()),
            clock,
            regained: watch::Sender::new(None),
            controller: AtomicI32::new(-1),
            replaced: CancellationToken::new(),
            peers,
        };
        membership
            .renew(true)
            .await
            .with_context(|| format!("cannot join the cluster as node {node_id}"))?;
        Ok(membership)
    }

    fn renew_every(&self) -> Duration {
        self.lease / 5
    }

    /// Registers or renews the lease. `joining`: the first registration, before this
    /// agent serves anything (so there is nothing to re-read).
    async fn renew(&self, joining: bool) -> strata_metastore::Result<()> {
        let sent = self.clock.monotonic();
        let lapsed = !joining && !self.holds_lease();
        let now = self.clock.wall_ms();
        let record = AgentRecord {
            lease_until_ms: now + self.lease.as_millis() as i64,
            ..self.me.clone()
        };
        match self.metastore.register_agent(record, now).await {
            Err(strata_metastore::Error::NodeIdInUse { holder, .. }) if !joining => {
                // Another data directory took this node id over while this process could
                // not renew (it was paused, or cut off): it is the agent now.
                tracing::error!(node_id = self.me.node_id, %holder, "this node id was taken over by an agent on another data directory; stopping");
                self.replaced.cancel();
                return Err(strata_metastore::Error::Invalid(format!(
                    "node id {} was taken over by the agent at {holder}",
                    self.me.node_id
                )));
            }
            r => r?,
        }
        let until = sent + self.lease - self.renew_every();
        if lapsed {
            tracing::warn!(
                "renewed the cluster lease after it lapsed; taking no writes until every partition is re-read"
            );
            self.regained.send_replace(Some(until));
        } else {
            self.held_until.send_replace(until);
        }
        self.refresh().await
    }

    /// Whether this agent's lease is safely held: a leader that cannot renew stops taking
    /// writes before anyone else may be elected in its place, and one that renewed after
    /// a lapse takes none until it has re-read what it leads.
    pub fn holds_lease(&self) -> bool {
        self.clock.monotonic() < *self.held_until.borrow()
    }

    /// Offers, after a renewal that came when the lease had lapsed, until when that
    /// renewal holds: the agent must re-read its partitions, then
    /// [`Membership::confirm_regained`] it.
    pub fn regained(&self) -> watch::Receiver<Option<Duration>> {
        self.regained.subscribe()
    }

    /// The agent has re-read every partition it serves since the renewal that bought
    /// `until`: the lease counts again (until then, or a later renewal's end).
    pub fn confirm_regained(&self, until: Duration) {
        self.held_until.send_modify(|held| {
            if until > *held {
                *held = until;
            }
            self.regained.send_if_modified(|pending| match pending {
                Some(p) if *p <= until => {
                    *pending = None;
                    true
                }
                _ => false,
            });
        });
    }

    pub fn node_id(&self) -> i32 {
        self.me.node_id
    }

    /// The clock leases are measured on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Until when, on [`Membership::clock`]'s monotonic reading, this agent may lead;
    /// changes at every renewal.
    pub fn held_until(&self) -> watch::Receiver<Duration> {
        self.held_until.subscribe()
    }

    /// This process, as its agent record names it.
    pub fn incarnation(&self) -> &str {
        &self.me.incarnation
    }

    /// Reads the agents and drains from the metastore (placement calls this before it
    /// picks).
    pub async fn refresh(&self) -> strata_metastore::Result<()> {
        let mut roster = self.metastore.roster().await?;
        match roster
            .agents
            .iter_mut()
            .find(|a| a.node_id == self.me.node_id)
        {
            // Until the registration is read back, this agent is as it registered.
            Some(a) if a.incarnation != self.me.incarnation => *a = self.me.clone(),
            Some(_) => {}
            None => {
                roster.agents.push(self.me.clone());
                roster.agents.sort_by_key(|a| a.node_id);
            }
        }
        *self.roster.write().unwrap_or_else(|p| p.into_inner()) = roster;
        Ok(())
    }

    /// Cancelled when another data directory took this node id over.
    pub fn replaced(&self) -> &CancellationToken {
        &self.replaced
    }

    /// Renews the lease, and follows agents joining and leaving, until `shutdown`; then
    /// deregisters.
    pub async fn run(&self, shutdown: CancellationToken) -> Stopped {
        let mut next_renewal = self.clock.monotonic() + self.renew_every();
        loop {
            let joined_or_left = async {
                let watched = match self.metastore.watch_agents().await {
                    Ok(watch) => watch.await,
                    Err(e) => Err(e),
                };
                if let Err(e) = watched {
                    // Do not spin on a failing watch: the renewal reads the agents anyway.
                    tracing::warn!(error = %e, "cannot watch agents in the metastore");
                    std::future::pending::<()>().await;
                }
            };
            let renew = tokio::select! {
                _ = self.clock.sleep_until(next_renewal) => true,
                () = joined_or_left => false,
                _ = shutdown.cancelled() => break,
            };
            let work = async {
                if renew {
                    next_renewal = self.clock.monotonic() + self.renew_every();
                    self.renew(false).await
                } else {
                    self.refresh().await
                }
            };
            // A metastore that hangs must not hold shutdown up.
            let outcome = tokio::select! {
                o = work => o,
                _ = shutdown.cancelled() => break,
            };
            if let Err(e) = outcome {
                tracing::error!(error = %e, "cannot renew this agent's lease in the metastore");
            }
        }
        let deregister = self.metastore.deregister_agent(
            self.me.node_id,
            &self.me.incarnation,
            self.clock.wall_ms(),
        );
        match tokio::time::timeout(self.renew_every(), deregister).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot deregister; others will see this agent leave when its lease runs out")
            }
            Err(_) => {
                tracing::warn!(
                    "the metastore did not answer the deregistration in time; others will see this agent leave when its lease runs out"
                )
            }
        }
        Stopped::Shutdown
    }

    /// The controller, as clients are told (Metadata, DescribeCluster): the holder of
    /// the controller lease as last seen (`controller.rs` renews or reads it every fifth
    /// of a lease) while it is live, or else the live agent with the lowest node id. It
    /// is always one of the brokers the same answer lists: a holder that has left (its
    /// lease in the metastore not run out yet) is not named, since a client told of a
    /// controller it has no address for waits for it (librdkafka's admin requests fail
    /// with "Failed while waiting for controller").
    pub fn controller_id(&self) -> i32 {
        let live = self.live_ids();
        match self.controller.load(Ordering::Relaxed) {
            id if live.contains(&id) => id,
            _ => live.first().copied().unwrap_or(self.me.node_id),
        }
    }

    /// Notes who holds the controller lease.
    pub fn set_controller(&self, node_id: i32) {
        self.controller.store(node_id, Ordering::Relaxed);
    }

    /// Whether agent `a` is live now: this agent always, others until their lease ends.
    fn is_live(&self, a: &AgentRecord, now_ms: i64) -> bool {
        a.node_id == self.me.node_id || a.lease_until_ms > now_ms
    }

    /// `f` of each live agent, by node id.
    fn map_live<T>(&self, f: impl Fn(&AgentRecord) -> T) -> Vec<T> {
        let now = self.clock.wall_ms();
        self.roster
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .agents
            .iter()
            .filter(|a| self.is_live(a, now))
            .map(f)
            .collect()
    }

    /// The live agents, by node id.
    pub fn live(&self) -> Vec<AgentRecord> {
        self.map_live(AgentRecord::clone)
    }

    /// The node ids of the live agents.
    pub fn live_ids(&self) -> Vec<i32> {
        self.map_live(|a| a.node_id)
    }

    /// The live agents with their data directories and drains: who holds which log, as
    /// elections and ISR changes see it (a view as of the last read; decisions re-read
    /// it in their metastore transaction).
    pub fn live_agents(&self) -> LiveAgents {
        let now = self.clock.wall_ms();
        let roster = self.roster.read().unwrap_or_else(|p| p.into_inner());
        let live: Vec<&AgentRecord> = roster
            .agents
            .iter()
            .filter(|a| self.is_live(a, now))
            .collect();
        LiveAgents::new(live.into_iter().map(|a| {
            (
                a.node_id,
                strata_metastore::LiveAgent {
                    directory: a.data_dir_id.clone(),
                    draining: roster.is_draining(a),
                },
            )
        }))
    }

    /// Every agent record (live or not) and drain, as last read.
    pub fn roster(&self) -> Roster {
        self.roster
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This agent's data directory id.
    pub fn data_dir_id(&self) -> &str {
        &self.me.data_dir_id
    }

    /// Where live agent `node_id` listens for the other agents (the inter-agent listener).
    pub fn address_of(&self, node_id: i32) -> Option<String> {
        let now = self.clock.wall_ms();
        self.roster
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .agents
            .iter()
            .find(|a| a.node_id == node_id && self.is_live(a, now))
            .and_then(|a| a.address(&self.peers.listener))
            .map(|(host, port)| format!("{host}:{port}"))
    }

    /// How to reach (and authenticate to) the other agents.
    pub fn peer_access(&self) -> &crate::peer::PeerAccess {
        &self.peers
    }

    /// The agent that coordinates `group`: one of the live agents, chosen by a hash of
    /// the group id, so every agent with the same view picks the same one.
    pub fn coordinator_of(&self, group: &str) -> AgentRecord {
        self.with_coordinator(group, AgentRecord::clone)
    }

    /// Whether `node_id` coordinates `group` (checked on every group request, so
    /// without copying the record).
    pub fn coordinates(&self, node_id: i32, group: &str) -> bool {
        self.with_coordinator(group, |a| a.node_id == node_id)
    }

    fn with_coordinator<T>(&self, group: &str, f: impl FnOnce(&AgentRecord) -> T) -> T {
        let now = self.clock.wall_ms();
        let all = self.roster.read().unwrap_or_else(|p| p.into_inner());
        // This agent is always among them, so the list is never empty.
        let live = all.agents.iter().filter(|a| self.is_live(a, now));
        // Rendezvous hashing: the live agent with the highest weight for the key. When
        // an agent leaves, only its keys move (to their next-highest agent), as Kafka
        // moves only a dead broker's coordinator partitions.
        let chosen = live
            .max_by_key(|a| (rendezvous_weight(group, a.node_id), a.node_id))
            .expect("this agent is always live to itself");
        f(chosen)
    }
}

/// The weight of `node_id` for `key`: FNV-1a over the key and the node id (stable
/// across processes and versions, unlike std's hasher), finished with a 64-bit mix so
/// that nearby node ids do not order the same way for every key.
fn rendezvous_weight(key: &str, node_id: i32) -> u64 {
    let fnv = key
        .bytes()
        .chain(node_id.to_be_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    // splitmix64's finalizer.
    let mut z = fnv.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use strata_core::clock::ManualClock;
    use strata_metastore::kv::{KvStore, KvTransaction, Watch};
    use strata_metastore::{Error, SqliteStore};

    use super::*;

    /// A metastore that can be cut off, as by a network partition.
    #[derive(Debug)]
    struct Unplugged {
        inner: SqliteStore,
        down: AtomicBool,
    }

    #[async_trait::async_trait]
    impl KvStore for Unplugged {
        async fn begin(&self) -> strata_metastore::Result<Box<dyn KvTransaction>> {
            if self.down.load(Ordering::SeqCst) {
                return Err(Error::Backend {
                    context: "test",
                    source: "metastore unreachable".into(),
                });
            }
            self.inner.begin().await
        }

        async fn watch(&self, key: &[u8]) -> strata_metastore::Result<Watch> {
            self.inner.watch(key).await
        }
    }

    /// Moves `clock` on by `d` once the membership task waits for its next renewal, so
    /// that the task keeps up with the clock.
    async fn step(clock: &ManualClock, d: Duration) {
        let waiting = async {
            while clock.sleepers() == 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("the membership task never waited for its next renewal");
        clock.advance(d);
    }

    /// Waits until `m` renewed at the clock's current time.
    async fn renewed_now(m: &Membership, lease: Duration) {
        let now = m.clock().monotonic();
        let wanted = now + lease - lease / 5;
        let mut held = m.held_until();
        tokio::time::timeout(Duration::from_secs(20), held.wait_for(|h| *h >= wanted))
            .await
            .unwrap_or_else(|_| panic!("no renewal at {now:?}"))
            .expect("membership alive");
    }

    /// A leader that cannot renew its lease stops leading before the lease the others
    /// go by runs out, so no two agents ever both take writes; once it renews it leads
    /// again only after confirming it re-read its partitions (a late renewal alone let a
    /// resumed zombie leader acknowledge writes in its stale epoch). Time is a manual
    /// clock: nothing sleeps.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_agent_that_cannot_renew_steps_down_before_its_lease_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(Unplugged {
            inner: SqliteStore::open(&dir.path().join("m.sqlite")).expect("open"),
            down: AtomicBool::new(false),
        });
        let metastore = Metastore::new(Arc::clone(&store) as Arc<dyn KvStore>, b"strata");
        let clock = ManualClock::new(1_700_000_000_000);
        let lease = Duration::from_millis(1000);
        let renew_every = lease / 5;
        let membership = Arc::new(
            Membership::join(
                metastore.clone(),
                Arc::new(clock.clone()),
                Joining {
                    node_id: 1,
                    kafka: ("127.0.0.1".to_string(), 9092),
                    listeners: Vec::new(),
                    http: "127.0.0.1:9644".to_string(),
                    rack: None,
                    data_dir_id: "dir-1".to_string(),
                    lease,
                    peers: Default::default(),
                },
            )
            .await
            .expect("join"),
        );
        assert!(membership.holds_lease());
        let shutdown = CancellationToken::new();
        let runner = tokio::spawn({
            let (m, s) = (Arc::clone(&membership), shutdown.clone());
            async move { m.run(s).await }
        });
        // Renewals go on: still the holder three leases on.
        for _ in 0..15 {
            step(&clock, renew_every).await;
            renewed_now(&membership, lease).await;
            assert!(membership.holds_lease(), "lost the lease while renewing");
        }

        let others_see = |m: Metastore, now: i64| async move {
            m.live_agents(now)
                .await
                .expect("read")
                .into_iter()
                .find(|a| a.node_id == 1)
                .map(|a| a.lease_until_ms)
                .expect("registered")
        };
        let lease_until = others_see(metastore.clone(), clock.wall_ms()).await;
        store.down.store(true, Ordering::SeqCst);
        let mut stepped_down = None;
        for _ in 0..40 {
            step(&clock, Duration::from_millis(50)).await;
            if !membership.holds_lease() {
                stepped_down = Some(clock.wall_ms());
                break;
            }
        }
        let stepped_down = stepped_down.expect("still leading long after renewals stopped");
        assert!(
            stepped_down < lease_until,
            "stepped down at {stepped_down}, after the lease others see ended at {lease_until}"
        );

        // Back in touch: the renewal after the lapse is offered, not taken. Others may
        // have elected new leaders meanwhile, so writes wait until the agent has re-read
        // its partitions and confirms (the broker does, `follow_lease_regained`).
        let mut regained = membership.regained();
        store.down.store(false, Ordering::SeqCst);
        step(&clock, renew_every).await;
        let until = tokio::time::timeout(
            Duration::from_secs(20),
            regained.wait_for(|pending| pending.is_some()),
        )
        .await
        .expect("never renewed again")
        .expect("membership alive")
        .expect("a pending lease");
        assert!(
            !membership.holds_lease(),
            "a renewal after a lapse gave the right to write back before partitions were re-read"
        );
        // Later renewals do not give it back either.
        for _ in 0..10 {
            step(&clock, renew_every).await;
            assert!(!membership.holds_lease(), "took writes again unconfirmed");
        }
        // Confirm what the renewal at the current time bought.
        let bought_now = clock.monotonic() + lease - renew_every;
        let mut regained = membership.regained();
        let until = tokio::time::timeout(
            Duration::from_secs(20),
            regained.wait_for(|pending| pending.is_some_and(|u| u >= bought_now)),
        )
        .await
        .expect("no renewal at the current time")
        .expect("membership alive")
        .map_or(until, |u| u.max(until));
        membership.confirm_regained(until);
        assert!(membership.holds_lease(), "confirmed, yet not holding");
        assert_eq!(*membership.regained().borrow(), None);
        shutdown.cancel();
        runner.await.expect("membership task");
    }

    /// Clients are told of a controller among the live agents only: a lease holder that
    /// has left is not named (librdkafka would wait for a broker it has no address for).
    #[tokio::test]
    async fn the_controller_named_is_a_live_agent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("m.sqlite")).expect("open");
        let metastore = Metastore::new(Arc::new(store) as Arc<dyn KvStore>, b"strata");
        let joining = |node_id: i32| Joining {
            node_id,
            kafka: ("127.0.0.1".to_string(), 9090 + node_id),
            listeners: Vec::new(),
            http: format!("127.0.0.1:{}", 9640 + node_id),
            rack: None,
            data_dir_id: format!("dir-{node_id}"),
            lease: Duration::from_secs(10),
            peers: Default::default(),
        };
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let two = Membership::join(metastore.clone(), clock.clone(), joining(2))
            .await
            .expect("join");
        let three = Membership::join(metastore.clone(), clock, joining(3))
            .await
            .expect("join");
        two.refresh().await.expect("refresh");
        assert_eq!(two.live_ids(), vec![2, 3]);
        assert_eq!(
            two.controller_id(),
            2,
            "before any holder is known: the lowest"
        );
        two.set_controller(3);
        assert_eq!(two.controller_id(), 3, "the live holder");
        two.set_controller(1);
        assert_eq!(
            two.controller_id(),
            2,
            "a holder that is not live is not named"
        );
        drop(three);
    }

    /// When an agent leaves, only the keys it coordinated move; the others stay; and
    /// the keys spread over all agents.
    #[test]
    fn only_a_departed_agents_keys_move() {
        let pick = |key: &str, nodes: &[i32]| {
            *nodes
                .iter()
                .max_by_key(|&&n| (super::rendezvous_weight(key, n), n))
                .expect("nodes")
        };
        let keys: Vec<String> = (0..300).map(|i| format!("group-{i}")).collect();
        let before: Vec<i32> = keys.iter().map(|k| pick(k, &[1, 2, 3])).collect();
        for n in [1, 2, 3] {
            let share = before.iter().filter(|&&c| c == n).count();
            assert!(share > 60, "agent {n} coordinates {share} of 300");
        }
        let after: Vec<i32> = keys.iter().map(|k| pick(k, &[1, 3])).collect();
        for (b, a) in before.iter().zip(&after) {
            if *b != 2 {
                assert_eq!(a, b, "a key of a surviving agent moved");
            }
        }
    }
}
