//! Seeded simulation of strata's replication protocol over the production state
//! machines of `strata-replication`: each simulated agent holds a [`Replica`] (role,
//! admission, acknowledgement, high watermark, the flush rule) and, while it follows, a
//! [`Follower`] cycle (truncate, fetch, start over), exactly the types the agent's
//! `Partition` and fetcher task drive; the controller applies [`elect`], [`prefer`],
//! [`reassign`], [`cancel_reassignment`] and [`finish_reassignment`]. What the model
//! adds is only what the agent does with sockets and disks: the log itself (a vector),
//! the network, the metastore, and the pending acknowledgements.
//!
//! Every schedule is one deterministic run, driven by its own splitmix64 generator
//! seeded with the schedule number, of four agents and one partition that starts on
//! three of them (replication factor 3, `min.insync.replicas` 2, sometimes 1) and is
//! reassigned now and then, through a few hundred steps of discrete time. The model,
//! Kafka's design as the agent implements it:
//!
//! - **Logs.** Each node has a log of `(offset, epoch, value)` entries, one record per
//!   batch, and the epoch history of that log. Both survive a crash (a process crash
//!   keeps the page cache). Everything else on a node is volatile and lost on a crash:
//!   whether it has the replica open, its [`Replica`], what it knows of the metastore.
//! - **Metastore.** The partition record with a version counter (the `topics-version`
//!   agents watch), compare-and-set writes, and one lease per agent: agents renew every
//!   2 time units for 10 units; a paused or crashed agent does not renew. Every write is
//!   pushed to the agents through the network (so it may be late, reordered or lost), and
//!   each agent also polls it every 5 units. The metastore itself never fails, and its
//!   compare-and-set requests and answers are never lost (they are late, though).
//! - **Network.** Every message gets its own random delay, so messages overtake each
//!   other; all but metastore transactions may be dropped. Messages to a crashed node are
//!   lost, and a restarted node gets none of those sent to its previous incarnation (the
//!   connection broke). A paused node receives nothing until it is resumed, then works
//!   through its backlog in arrival order.
//! - **Leader.** Takes a produce request only while its own lease lasts and
//!   [`Replica::admit`] lets it; appends the value stamped with its epoch; its flusher
//!   begins an fsync now and then that ends a few steps later
//!   ([`Replica::begin_flush`], [`Replica::complete_flush`]); answers fetches with the
//!   batches from the fetch offset on (a random number of them) and its watermark, after
//!   [`Replica::on_replica_fetch`]; answers OffsetForLeaderEpoch from its epoch history;
//!   now and then proposes [`Replica::isr_tick`]'s change (the live agents are the
//!   metastore's leases) to the metastore, which applies it only if the record still
//!   names this leader and epoch. A produce is answered as [`Replica::ack`] decides.
//! - **Follower.** Sends what its [`Follower`] cycle asks for, one request at a time
//!   (a request that times out, or any refusal, starts the cycle over); cuts its log as
//!   [`Follower::on_epoch_answer`] says and appends what a fetch brought, telling the
//!   replica through [`Replica::copied`] (which may void an fsync in flight). Requests
//!   carry the leader epoch; a leader of another epoch refuses them.
//! - **Roles.** A node takes the role [`Replica::apply`] gives it for the newest record
//!   it learned. A leader deposed (a newer epoch, or an ISR change the metastore refused)
//!   fails its pending acknowledgements. A restarted agent that finds itself recorded as
//!   leader first bumps the epoch with a compare-and-set.
//! - **Reassignment (KIP-455).** An admin request applies [`reassign`] to the record in
//!   one metastore write (no new epoch): a random target of 2 to 4 live agents, which may
//!   replace a reassignment in progress; sometimes [`cancel_reassignment`] instead. An
//!   agent newly listed opens its replica (the log it still has on disk, or an empty
//!   one) and follows like any other; one no longer listed deletes its replica (log and
//!   directory) and stops leading or following; one removed while down keeps its
//!   directory, unused, and opens it again if it is added back. A leader that learns
//!   other replicas in its own epoch tracks them (inside [`Replica::apply`]).
//! - **Controller.** Acts on the metastore directly: [`elect`] (unclean election always
//!   off: acknowledged writes are only safe without it) whenever it runs and the leader's
//!   lease ran out, else [`finish_reassignment`] (which completes a reassignment once
//!   every added replica is in the ISR, in a new epoch); and now and then [`prefer`].
//! - **Clients.** A producer sends unique values to the node its (often stale) metadata
//!   names as leader, without retries; a consumer reads random offsets below the
//!   watermark of a random node that acts as leader (including stale ones), and asks
//!   the leader of the current epoch for the latest offset.
//!
//! - **Disks.** Each node's data directory has an id, which the record names per
//!   replica once the node opened it ([`open_replica`], in one metastore transaction:
//!   a claim, or for a log that is not on its disk, leaving the ISR and any leadership
//!   in a new epoch). A node's disk may be lost (wiped): it crashes and comes back on an
//!   empty directory with a new id, so long as another in-sync replica still holds its
//!   log (with fewer, acknowledged records are lost whatever the protocol does: that is
//!   what `min.insync.replicas` is for), and until its new replica is back in the ISR
//!   no other disk is lost and no reassignment is asked for (an admin removing the other
//!   copies while one is silently lost loses records in any protocol). Elections and ISR additions take only replicas
//!   whose agent is live on the directory recorded for them.
//!
//! Faults: crashes and restarts, lost disks, pauses and resumes (of any node, and more
//! often of the leader), leaders stalling right after they appended or served new batches (when only
//! some replicas have them), message delays, drops and reordering, reassignments. After
//! the faulty phase the run heals (everyone resumed or restarted, no drops, no new
//! faults, reassignments or produce) and continues until the partition is stable: no
//! reassignment in progress, one leader of the current epoch, every replica in the ISR
//! with identical logs, the watermark at the log end, the agents no longer listed rid
//! of their replicas. Then the checkers run (over the final record's replicas):
//!
//! 1. every acknowledged value is in the final leader's log at its acknowledged offset,
//!    and no value appears twice there;
//! 2. every log is dense, with non-decreasing epochs; all logs agree below the final
//!    watermark; the in-sync replicas equal the leader; no follower ever cuts its log
//!    below its own watermark, and right after its cut a follower's log is a prefix of
//!    the log of the leader it asked (what KIP-101/279 truncation is for);
//! 3. whatever a consumer read is never contradicted, by a later read or the final log,
//!    and the latest offset a leader answers in the current epoch never goes back
//!    (KIP-207);
//! 4. at most one node acknowledges writes in any epoch, and a leader's watermark never
//!    falls;
//! 5. epoch histories rise in epoch and offset and match the epochs in the log;
//! 6. a reassignment removes replicas only once every added one is in sync: whenever
//!    the controller completes one, the replicas become the admin's target, the new ISR
//!    is not empty and holds the leader (if there is one), and every member of it has
//!    every record acknowledged so far; and no reassignment is still in progress at the
//!    end of the heal phase;
//! 7. every record written to the metastore is well formed: a non-empty ISR, the
//!    leader and the ISR among the replicas, distinct replicas.
//!
//! Continuous checks stop a schedule at its first violation. The test runs every
//! schedule, prints a summary line (on stderr, past the harness's capture), then fails
//! listing the schedules that broke an invariant, each with the command that replays it.
//!
//! `STRATA_SIM_SCHEDULES=<n>` runs schedules `0..n` (default 3000) and the
//! [`REGRESSION_SEEDS`]; `STRATA_SIM_SEED=<n>` runs schedule n alone and traces it to
//! stderr (`-- --nocapture` to see the trace of a passing run).

mod checks;
mod cluster;
mod net;
mod node;
mod rng;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Instant;

use strata_replication::{
    Ack, EpochHistory, FetchAnswer, FlushTicket, Flushed, Follower, LiveAgent, LiveAgents, Members,
    Opening, PartitionRecord, Refusal, Replica, Request, Step, Transition, Truncation,
    cancel_reassignment, elect, finish_reassignment, open_replica, opening, prefer, reassign,
    settle_elr,
};

use checks::*;
use cluster::*;
use net::*;
use node::*;
use rng::*;

pub(crate) const NODES: [i32; 4] = [1, 2, 3, 4];
/// Replicas a partition starts with.
pub(crate) const REPLICATION_FACTOR: usize = 3;
pub(crate) const LEASE: i64 = 10;
pub(crate) const RENEW_EVERY: i64 = 2;
pub(crate) const POLL_EVERY: i64 = 5;
/// Steps the healed run may take to become stable.
pub(crate) const HEAL_LIMIT: i64 = 3000;
pub(crate) const DEFAULT_SCHEDULES: u64 = 3000;
/// Extra seeds every run replays on top of the default range. A seed names a schedule
/// only for one exact model: a change to how the model draws from its generator makes
/// them different schedules. These five once (in the three-agent model without
/// reassignment) found a follower that cut its log too little when the leader answered
/// OffsetForLeaderEpoch with an epoch the follower does not have (KIP-279's second
/// question was missing; fixed by `Cut::Again`). Since the model grew a fourth agent
/// and reassignments they name other schedules, kept only as extra seeds (find
/// schedules that break an invariant with `STRATA_SIM_SCHEDULES=200000`).
pub(crate) const REGRESSION_SEEDS: [u64; 5] = [12510, 39299, 68521, 83071, 141394];

pub(crate) struct Sim {
    pub(crate) verbose: bool,
    pub(crate) rng: Rng,
    pub(crate) p: Params,
    pub(crate) now: i64,
    pub(crate) healing: bool,
    pub(crate) nodes: Vec<Node>,
    pub(crate) meta: Metastore,
    pub(crate) net: Vec<Envelope>,
    pub(crate) seq: u64,
    pub(crate) next_request: u64,
    /// The leader the producer's metadata names.
    pub(crate) client_leader: i32,
    pub(crate) next_value: u64,
    pub(crate) acked: Vec<Acked>,
    /// Offset -> value, for everything a consumer read.
    pub(crate) reads: BTreeMap<i64, u64>,
    /// The highest latest offset a leader answered a consumer.
    pub(crate) latest: i64,
    /// Epoch -> the node that acknowledged writes in it.
    pub(crate) ackers: BTreeMap<i32, i32>,
    /// The target of the reassignment in progress, as the admin asked for it.
    pub(crate) target: Option<Vec<i32>>,
    /// A node whose disk was lost, until its new replica is in the ISR again (or it is
    /// no longer a replica): no other disk is lost and no reassignment asked for
    /// meanwhile, which is the one failure `min.insync.replicas` = 2 is for.
    pub(crate) recovering: Option<i32>,
    pub(crate) violations: Vec<String>,
    pub(crate) stats: Stats,
}

impl Sim {
    pub(crate) fn new(seed: u64, verbose: bool) -> Sim {
        let mut rng = Rng(seed);
        let p = Params::draw(&mut rng);
        let mut replicas = NODES.to_vec();
        for i in (1..replicas.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            replicas.swap(i, j);
        }
        replicas.truncate(REPLICATION_FACTOR);
        let record = PartitionRecord::new(0, replicas);
        let nodes = NODES
            .iter()
            .map(|&id| Node::new(id, p.min_insync))
            .collect();
        let mut sim = Sim {
            verbose,
            rng,
            p,
            now: 0,
            healing: false,
            nodes,
            meta: Metastore {
                record: record.clone(),
                version: 1,
                leases: NODES.iter().map(|&id| (id, LEASE)).collect(),
                directories: NODES.iter().map(|&id| (id, format!("n{id}d0"))).collect(),
            },
            net: Vec::new(),
            seq: 0,
            next_request: 0,
            client_leader: record.leader,
            next_value: 1,
            acked: Vec::new(),
            reads: BTreeMap::new(),
            latest: 0,
            ackers: BTreeMap::new(),
            target: None,
            recovering: None,
            violations: Vec::new(),
            stats: Stats {
                schedules: 1,
                ..Stats::default()
            },
        };
        sim.trace(|| format!("seed {seed}: {:?}, record {record:?}", sim.p));
        for id in NODES {
            sim.learn(id, 1, record.clone());
        }
        sim
    }

    pub(crate) fn trace(&self, what: impl FnOnce() -> String) {
        if self.verbose {
            eprintln!("[t={:>4}] {}", self.now, what());
        }
    }

    pub(crate) fn violation(&mut self, what: String) {
        self.trace(|| format!("VIOLATION: {what}"));
        self.violations.push(format!("t={}: {what}", self.now));
    }

    pub(crate) fn node(&self, id: i32) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    pub(crate) fn node_mut(&mut self, id: i32) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    pub(crate) fn request_id(&mut self) -> u64 {
        self.next_request += 1;
        self.next_request
    }

    /// Runs the schedule: the faulty phase, then healing until stable, then the checks.
    pub(crate) fn run(mut self) -> (Stats, Vec<String>) {
        while self.now < self.p.steps && self.violations.is_empty() {
            self.step();
        }
        self.healing = true;
        self.trace(|| "healing: no more faults, drops or produce".to_string());
        for id in NODES {
            if !self.node(id).up {
                self.restart(id);
            } else if self.node(id).paused {
                self.resume(id);
            }
        }
        let heal_start = self.now;
        let mut stable = false;
        while self.violations.is_empty() && self.now - heal_start < HEAL_LIMIT {
            self.step();
            if self.stable() {
                stable = true;
                break;
            }
        }
        self.stats.max_heal_steps = self.now - heal_start;
        self.stats.max_steps = self.now;
        if self.violations.is_empty() {
            self.final_checks(stable);
        }
        if self.verbose {
            for n in &self.nodes {
                eprintln!("end: {}", n.describe());
            }
            eprintln!(
                "end: metastore v{} {:?}",
                self.meta.version, self.meta.record
            );
        }
        (self.stats, self.violations)
    }

    /// One unit of time.
    pub(crate) fn step(&mut self) {
        self.now += 1;
        if !self.healing {
            self.faults();
            self.admin();
            self.producer();
        }
        self.controller();
        // A node's lease renewal races with the backlog it works through after a pause.
        for id in NODES {
            if self.node(id).runs() && self.rng.chance(500) {
                self.renew(id);
            }
        }
        self.deliver();
        let mut order = NODES;
        for i in (1..order.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        for id in order {
            if self.node(id).runs() {
                self.tick(id);
            }
        }
        self.consumer();
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number")),
    )
}

#[test]
// The summary line reports how long the run took, in real time.
#[allow(clippy::disallowed_methods)]
fn seeded_schedules() {
    let started = Instant::now();
    let single = env_u64("STRATA_SIM_SEED");
    let seeds: Vec<u64> = match single {
        Some(seed) => vec![seed],
        None => (0..env_u64("STRATA_SIM_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES))
            .chain(REGRESSION_SEEDS)
            .collect(),
    };
    let mut total = Stats::default();
    let mut failures = Vec::new();
    for &seed in &seeds {
        let (stats, violations) = Sim::new(seed, single.is_some()).run();
        total.add(&stats);
        if !violations.is_empty() {
            failures.push((seed, violations));
        }
    }
    // Straight to stderr, past the test harness's capture: the summary is the evidence
    // that the schedules exercise what they are meant to.
    let _ = writeln!(
        std::io::stderr(),
        "seeded_schedules: {} in {:.1?}; {} failed",
        total.summary(),
        started.elapsed(),
        failures.len()
    );
    if !failures.is_empty() {
        let report: Vec<String> = failures
            .iter()
            .take(5)
            .map(|(seed, v)| {
                format!(
                    "seed {seed}: {}\n  replay: STRATA_SIM_SEED={seed} cargo test -p \
                     strata-replication --test schedules -- --nocapture",
                    v.join("\n  ")
                )
            })
            .collect();
        panic!(
            "{} of {} schedules broke an invariant (first {}):\n{}",
            failures.len(),
            seeds.len(),
            report.len(),
            report.join("\n")
        );
    }
    if single.is_none() && seeds.len() >= 100 {
        assert!(total.elections > 0, "no elections: {}", total.summary());
        assert!(
            total.truncated_records > 0,
            "no truncation removed records: {}",
            total.summary()
        );
        assert!(total.isr_shrinks > 0, "no ISR shrinks: {}", total.summary());
        assert!(total.isr_expands > 0, "no ISR expands: {}", total.summary());
        assert!(total.acks > 0, "nothing acknowledged: {}", total.summary());
        assert!(total.wipes > 0, "no disk lost: {}", total.summary());
        assert!(
            total.rejoins > 0,
            "no replica rejoined on a new disk: {}",
            total.summary()
        );
        assert!(
            total.finished > 0,
            "no reassignment completed: {}",
            total.summary()
        );
    }
}
