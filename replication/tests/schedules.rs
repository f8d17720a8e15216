//! Seeded simulation of strata's replication protocol over the pure state machines of
//! `strata-replication`: [`LeaderState`], [`elect`], [`prefer`], [`reassign`],
//! [`cancel_reassignment`], [`finish_reassignment`], [`EpochHistory`] and
//! [`divergence`].
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
//!   whether it has the replica open, its role, its [`LeaderState`], its high
//!   watermark, what it knows of the metastore.
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
//! - **Leader.** Takes a produce request only while its own lease lasts and its ISR has
//!   `min_insync` members; appends the value stamped with its epoch; calls
//!   [`LeaderState::on_durable`] after a (randomly late) fsync; answers fetches with the
//!   batches from the fetch offset on (a random number of them) and its watermark, after
//!   [`LeaderState::on_fetch`]; answers OffsetForLeaderEpoch from its epoch history; now
//!   and then proposes [`LeaderState::isr_change`] to the metastore, which applies it
//!   only if the record still names this leader and epoch. A produce is acknowledged once
//!   the watermark covers it, if [`LeaderState::enough_replicas`] holds then and the node
//!   still leads that epoch; otherwise it fails.
//! - **Follower.** In a new leader epoch it first asks the leader for the end of its own
//!   newest epoch and cuts its log to [`divergence`], then fetches from its log end, one
//!   fetch at a time (resent after a timeout), and takes `min(leader's watermark, own log
//!   end)` as its watermark. Requests carry the leader epoch; a leader of another epoch
//!   refuses them.
//! - **Roles.** A node follows the newest record it learned. A leader that learns of a
//!   newer epoch, or whose ISR change the metastore refused, drops its [`LeaderState`]
//!   (its pending acknowledgements fail) and follows. A restarted agent that finds itself
//!   recorded as leader first bumps the epoch with a compare-and-set.
//! - **Reassignment (KIP-455).** An admin request applies [`reassign`] to the record in
//!   one metastore write (no new epoch): a random target of 2 to 4 live agents, which may
//!   replace a reassignment in progress; sometimes [`cancel_reassignment`] instead. An
//!   agent newly listed opens its replica (the log it still has on disk, or an empty
//!   one) and follows like any other; one no longer listed deletes its replica (log and
//!   directory) and stops leading or following; one removed while down keeps its
//!   directory, unused, and opens it again if it is added back. A leader that learns
//!   other replicas in its own epoch calls [`LeaderState::set_replicas`].
//! - **Controller.** Acts on the metastore directly: [`elect`] (unclean election always
//!   off: acknowledged writes are only safe without it) whenever it runs and the leader's
//!   lease ran out, else [`finish_reassignment`] (which completes a reassignment once
//!   every added replica is in the ISR, in a new epoch); and now and then [`prefer`].
//! - **Clients.** A producer sends unique values to the node its (often stale) metadata
//!   names as leader, without retries; a consumer reads random offsets below the
//!   watermark of a random node that acts as leader (including stale ones).
//!
//! Faults: crashes and restarts, pauses and resumes (of any node, and more often of the
//! leader), leaders stalling right after they appended or served new batches (when only
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
//! 3. whatever a consumer read is never contradicted, by a later read or the final log;
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

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Instant;

use strata_replication::{
    Cut, EpochHistory, LeaderState, PartitionRecord, cancel_reassignment, divergence, elect,
    finish_reassignment, prefer, reassign,
};

const NODES: [i32; 4] = [1, 2, 3, 4];
/// Replicas a partition starts with.
const REPLICATION_FACTOR: usize = 3;
const LEASE: i64 = 10;
const RENEW_EVERY: i64 = 2;
const POLL_EVERY: i64 = 5;
/// Steps the healed run may take to become stable.
const HEAL_LIMIT: i64 = 3000;
const DEFAULT_SCHEDULES: u64 = 3000;
/// Extra seeds every run replays on top of the default range. A seed names a schedule
/// only for one exact model: a change to how the model draws from its generator makes
/// them different schedules. These five once (in the three-agent model without
/// reassignment) found a follower that cut its log too little when the leader answered
/// OffsetForLeaderEpoch with an epoch the follower does not have (KIP-279's second
/// question was missing; fixed by [`Cut::Again`]). Since the model grew a fourth agent
/// and reassignments they name other schedules, kept only as extra seeds (find
/// schedules that break an invariant with `STRATA_SIM_SCHEDULES=200000`).
const REGRESSION_SEEDS: [u64; 5] = [12510, 39299, 68521, 83071, 141394];

/// splitmix64: small, fast, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `lo..=hi`.
    fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// One record of a log (one record per batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    offset: i64,
    epoch: i32,
    value: u64,
}

/// What one schedule draws before it starts: how hostile and how busy it is.
#[derive(Debug)]
struct Params {
    steps: i64,
    max_delay: i64,
    drop: u64,
    min_insync: usize,
    lag: i64,
    produce: u64,
    read: u64,
    crash: u64,
    restart: u64,
    pause: u64,
    /// Pausing the node the metastore names leader, on top of `pause`.
    pause_leader: u64,
    /// A leader stalling right after it appended or served a fetch with batches: the
    /// worst moments, when only some replicas have the newest records.
    stall: u64,
    resume: u64,
    controller: u64,
    prefer: u64,
    isr_tick: u64,
    fsync: u64,
    max_batches: i64,
    /// An admin request to reassign the partition (or to cancel a reassignment).
    reassign: u64,
    /// Of those while one is in progress: cancelling it.
    cancel: u64,
}

impl Params {
    fn draw(rng: &mut Rng) -> Params {
        Params {
            steps: rng.between(150, 400),
            max_delay: rng.between(1, 4),
            drop: rng.pick(&[0, 0, 10, 50, 100]),
            min_insync: if rng.chance(800) { 2 } else { 1 },
            lag: rng.between(5, 14),
            produce: rng.between(200, 700) as u64,
            read: rng.between(100, 300) as u64,
            crash: rng.between(0, 15) as u64,
            restart: rng.between(80, 250) as u64,
            pause: rng.between(0, 20) as u64,
            pause_leader: rng.between(0, 40) as u64,
            stall: rng.pick(&[0, 0, 20, 50, 100]),
            resume: rng.between(30, 120) as u64,
            controller: rng.between(300, 1000) as u64,
            prefer: rng.between(0, 30) as u64,
            isr_tick: rng.between(200, 600) as u64,
            fsync: rng.between(300, 900) as u64,
            max_batches: rng.between(1, 20),
            reassign: rng.pick(&[0, 5, 10, 20, 40]),
            cancel: rng.between(0, 250) as u64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Addr {
    Node(i32),
    Meta,
    Client,
}

#[derive(Debug, Clone)]
enum Msg {
    /// acks=all produce of one value.
    Produce {
        value: u64,
    },
    ProduceAck {
        value: u64,
        offset: i64,
    },
    ProduceError {
        value: u64,
        reason: &'static str,
    },
    /// Replica fetch: the follower's log ends at `offset`.
    Fetch {
        id: u64,
        epoch: i32,
        offset: i64,
    },
    /// Batches from the fetch offset on, and the leader's watermark.
    FetchResponse {
        id: u64,
        result: Result<(Vec<Entry>, i64), &'static str>,
    },
    /// OffsetForLeaderEpoch for the follower's newest epoch `latest`, fenced by `epoch`.
    EpochQuery {
        id: u64,
        epoch: i32,
        latest: i32,
    },
    EpochAnswer {
        id: u64,
        result: Result<Option<(i32, i64)>, &'static str>,
    },
    /// The metastore's partition record (a watch notification or a poll).
    Record {
        version: u64,
        record: PartitionRecord,
    },
    /// The leader's ISR compare-and-set.
    IsrCas {
        id: u64,
        epoch: i32,
        isr: Vec<i32>,
    },
    IsrCasAnswer {
        id: u64,
        committed: Option<Vec<i32>>,
        version: u64,
        record: PartitionRecord,
    },
}

struct Envelope {
    at: i64,
    seq: u64,
    from: Addr,
    to: Addr,
    /// The incarnation of the destination node when sent: a restart breaks connections.
    incarnation: u32,
    msg: Msg,
}

struct PendingAck {
    value: u64,
    offset: i64,
}

/// A node's volatile state as leader of one epoch.
struct Leadership {
    state: LeaderState,
    acks: Vec<PendingAck>,
    /// The id of the ISR compare-and-set in flight.
    isr_request: Option<u64>,
    /// The watermark last seen, to check it never falls.
    last_hw: i64,
}

/// A node's volatile state as follower of one epoch.
struct Following {
    leader: i32,
    epoch: i32,
    /// Whether the divergent suffix has been cut off in this epoch.
    truncated: bool,
    /// The request in flight (epoch query or fetch) and when it was sent.
    request: Option<(u64, i64)>,
    /// No request before this time (backoff after a refusal).
    next_send: i64,
}

enum Role {
    Idle,
    Leader(Box<Leadership>),
    Follower(Following),
}

struct Node {
    id: i32,
    // Durable: survives a crash.
    log: Vec<Entry>,
    history: EpochHistory,
    /// Whether the log's directory exists (a replica removed while the node was down
    /// keeps it, and opens it again if it is added back).
    dir: bool,
    up: bool,
    paused: bool,
    incarnation: u32,
    // Volatile.
    /// Whether the agent has the replica open: it is listed in the record it learned
    /// last (a node never listed, or removed, has no replica and answers nothing).
    hosted: bool,
    role: Role,
    hw: i64,
    flushed: i64,
    known_version: u64,
    lease_until: i64,
    last_renewal: i64,
    next_poll: i64,
}

impl Node {
    fn end(&self) -> i64 {
        self.log.len() as i64
    }

    fn runs(&self) -> bool {
        self.up && !self.paused
    }

    fn describe(&self) -> String {
        let role = match &self.role {
            Role::Idle => "idle".to_string(),
            Role::Leader(l) => format!(
                "leader e{} isr {:?} pending {:?} hw {} acks {}",
                l.state.epoch,
                l.state.isr,
                l.state.pending.as_ref().map(|p| &p.isr),
                l.state.high_watermark,
                l.acks.len()
            ),
            Role::Follower(f) => format!(
                "follower of {} e{} truncated {} hw {}",
                f.leader, f.epoch, f.truncated, self.hw
            ),
        };
        format!(
            "node {}{}{}{}: {} | log end {} history {:?}",
            self.id,
            if self.up { "" } else { " (down)" },
            if self.paused { " (paused)" } else { "" },
            if self.hosted { "" } else { " (no replica)" },
            role,
            self.end(),
            self.history.entries()
        )
    }
}

struct Metastore {
    record: PartitionRecord,
    version: u64,
    leases: BTreeMap<i32, i64>,
}

/// An acknowledgement a leader sent.
#[derive(Debug)]
struct Ack {
    value: u64,
    offset: i64,
    epoch: i32,
    node: i32,
}

/// Counters, summed over schedules for the summary line.
#[derive(Debug, Default)]
struct Stats {
    schedules: u64,
    produced: u64,
    acks: u64,
    /// Acknowledgements by a leader whose epoch the metastore had already superseded
    /// (allowed: the watermark covered the write).
    stale_acks: u64,
    reads: u64,
    elections: u64,
    preferred: u64,
    restart_bumps: u64,
    leaderships: u64,
    truncations: u64,
    truncated_records: u64,
    isr_shrinks: u64,
    isr_expands: u64,
    crashes: u64,
    pauses: u64,
    /// Reassignments begun (some replacing one in progress), completed by the
    /// controller, cancelled; replicas deleted from a node no longer listed.
    reassignments: u64,
    replaced: u64,
    finished: u64,
    cancelled: u64,
    deleted: u64,
    max_steps: i64,
    max_heal_steps: i64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.schedules += o.schedules;
        self.produced += o.produced;
        self.acks += o.acks;
        self.stale_acks += o.stale_acks;
        self.reads += o.reads;
        self.elections += o.elections;
        self.preferred += o.preferred;
        self.restart_bumps += o.restart_bumps;
        self.leaderships += o.leaderships;
        self.truncations += o.truncations;
        self.truncated_records += o.truncated_records;
        self.isr_shrinks += o.isr_shrinks;
        self.isr_expands += o.isr_expands;
        self.crashes += o.crashes;
        self.pauses += o.pauses;
        self.reassignments += o.reassignments;
        self.replaced += o.replaced;
        self.finished += o.finished;
        self.cancelled += o.cancelled;
        self.deleted += o.deleted;
        self.max_steps = self.max_steps.max(o.max_steps);
        self.max_heal_steps = self.max_heal_steps.max(o.max_heal_steps);
    }

    fn summary(&self) -> String {
        format!(
            "schedules {}, produced {}, acks {} ({} by superseded leaders), reads {}, \
             elections {} (+{} preferred, +{} restart bumps), leaderships {}, \
             truncations {} ({} records), isr shrinks {} expands {}, crashes {}, pauses {}, \
             reassignments {} ({} replacing one) finished {} cancelled {}, replicas deleted {}, \
             max steps {} (heal {})",
            self.schedules,
            self.produced,
            self.acks,
            self.stale_acks,
            self.reads,
            self.elections,
            self.preferred,
            self.restart_bumps,
            self.leaderships,
            self.truncations,
            self.truncated_records,
            self.isr_shrinks,
            self.isr_expands,
            self.crashes,
            self.pauses,
            self.reassignments,
            self.replaced,
            self.finished,
            self.cancelled,
            self.deleted,
            self.max_steps,
            self.max_heal_steps
        )
    }
}

struct Sim {
    verbose: bool,
    rng: Rng,
    p: Params,
    now: i64,
    healing: bool,
    nodes: Vec<Node>,
    meta: Metastore,
    net: Vec<Envelope>,
    seq: u64,
    next_request: u64,
    /// The leader the producer's metadata names.
    client_leader: i32,
    next_value: u64,
    acked: Vec<Ack>,
    /// Offset -> value, for everything a consumer read.
    reads: BTreeMap<i64, u64>,
    /// Epoch -> the node that acknowledged writes in it.
    ackers: BTreeMap<i32, i32>,
    /// The target of the reassignment in progress, as the admin asked for it.
    target: Option<Vec<i32>>,
    violations: Vec<String>,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64, verbose: bool) -> Sim {
        let mut rng = Rng(seed);
        let p = Params::draw(&mut rng);
        let mut replicas = NODES.to_vec();
        for i in (1..replicas.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            replicas.swap(i, j);
        }
        replicas.truncate(REPLICATION_FACTOR);
        let record = PartitionRecord {
            index: 0,
            leader: replicas[0],
            leader_epoch: 0,
            isr: replicas.clone(),
            replicas,
            adding: Vec::new(),
            removing: Vec::new(),
        };
        let nodes = NODES
            .iter()
            .map(|&id| Node {
                id,
                log: Vec::new(),
                history: EpochHistory::default(),
                dir: false,
                up: true,
                paused: false,
                incarnation: 0,
                hosted: false,
                role: Role::Idle,
                hw: 0,
                flushed: 0,
                known_version: 0,
                lease_until: LEASE,
                last_renewal: 0,
                next_poll: POLL_EVERY,
            })
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
            },
            net: Vec::new(),
            seq: 0,
            next_request: 0,
            client_leader: record.leader,
            next_value: 1,
            acked: Vec::new(),
            reads: BTreeMap::new(),
            ackers: BTreeMap::new(),
            target: None,
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

    fn trace(&self, what: impl FnOnce() -> String) {
        if self.verbose {
            eprintln!("[t={:>4}] {}", self.now, what());
        }
    }

    fn violation(&mut self, what: String) {
        self.trace(|| format!("VIOLATION: {what}"));
        self.violations.push(format!("t={}: {what}", self.now));
    }

    fn node(&self, id: i32) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: i32) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    fn request_id(&mut self) -> u64 {
        self.next_request += 1;
        self.next_request
    }

    /// Runs the schedule: the faulty phase, then healing until stable, then the checks.
    fn run(mut self) -> (Stats, Vec<String>) {
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
    fn step(&mut self) {
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

    // ----- faults, clients, controller -----

    fn faults(&mut self) {
        for id in NODES {
            let (up, paused) = (self.node(id).up, self.node(id).paused);
            if !up {
                if self.rng.chance(self.p.restart) {
                    self.restart(id);
                }
            } else if paused {
                if self.rng.chance(self.p.resume) {
                    self.resume(id);
                }
            } else if self.rng.chance(self.p.crash) {
                self.crash(id);
            } else if self.rng.chance(self.p.pause)
                || (self.meta.record.leader == id && self.rng.chance(self.p.pause_leader))
            {
                self.stats.pauses += 1;
                self.trace(|| format!("node {id} paused"));
                self.node_mut(id).paused = true;
            }
        }
    }

    /// A node stalls (a long GC pause, a stopped VM) at a moment chosen by its caller.
    fn maybe_stall(&mut self, id: i32) {
        if !self.healing && self.rng.chance(self.p.stall) {
            self.stats.pauses += 1;
            self.trace(|| format!("node {id} stalls"));
            self.node_mut(id).paused = true;
        }
    }

    fn crash(&mut self, id: i32) {
        self.stats.crashes += 1;
        self.trace(|| format!("node {id} crashes"));
        let n = self.node_mut(id);
        n.up = false;
        n.paused = false;
        n.hosted = false;
        n.role = Role::Idle;
        n.hw = 0;
        n.known_version = 0;
    }

    fn resume(&mut self, id: i32) {
        self.trace(|| format!("node {id} resumes"));
        self.node_mut(id).paused = false;
    }

    /// A restarted agent registers (renews its lease), reads the record, and bumps the
    /// epoch first if the record still names it leader of a replica it finds on disk.
    fn restart(&mut self, id: i32) {
        let now = self.now;
        let n = self.node_mut(id);
        n.up = true;
        n.paused = false;
        n.incarnation += 1;
        n.hosted = false;
        n.role = Role::Idle;
        n.hw = 0;
        n.flushed = n.end();
        n.known_version = 0;
        n.last_renewal = i64::MIN / 2;
        n.next_poll = now + POLL_EVERY;
        self.trace(|| format!("node {id} restarts"));
        self.renew(id);
        let r = &self.meta.record;
        if r.leader == id && r.replicas.contains(&id) && self.node(id).dir {
            let bumped = PartitionRecord {
                leader_epoch: self.meta.record.leader_epoch + 1,
                ..self.meta.record.clone()
            };
            self.stats.restart_bumps += 1;
            self.trace(|| format!("node {id} bumps its epoch on restart: {bumped:?}"));
            self.meta_write(bumped);
        }
        let (version, record) = (self.meta.version, self.meta.record.clone());
        self.learn(id, version, record);
    }

    fn producer(&mut self) {
        if !self.rng.chance(self.p.produce) {
            return;
        }
        if self.client_leader < 0 || self.rng.chance(50) {
            self.client_leader = self.meta.record.leader;
        }
        let target = if self.rng.chance(30) {
            self.rng.pick(&NODES)
        } else {
            self.client_leader
        };
        if target < 0 {
            return;
        }
        let value = self.next_value;
        self.next_value += 1;
        self.stats.produced += 1;
        self.trace(|| format!("client produces {value} to node {target}"));
        self.send(
            Addr::Client,
            Addr::Node(target),
            Msg::Produce { value },
            false,
        );
    }

    /// A consumer reads one offset below the watermark of a node acting as leader.
    fn consumer(&mut self) {
        if !self.rng.chance(self.p.read) {
            return;
        }
        let leaders: Vec<i32> = NODES
            .into_iter()
            .filter(|&id| {
                let n = self.node(id);
                n.runs() && matches!(&n.role, Role::Leader(l) if l.state.high_watermark > 0)
            })
            .collect();
        if leaders.is_empty() {
            return;
        }
        let id = self.rng.pick(&leaders);
        let Role::Leader(l) = &self.node(id).role else {
            return;
        };
        let offset = self.rng.below(l.state.high_watermark as u64) as i64;
        let value = self.node(id).log[offset as usize].value;
        self.stats.reads += 1;
        match self.reads.get(&offset) {
            Some(&earlier) if earlier != value => self.violation(format!(
                "[3] consumer read {value} at offset {offset} from node {id}, \
                 earlier read {earlier} there"
            )),
            _ => {
                self.reads.insert(offset, value);
            }
        }
    }

    fn live(&self) -> Vec<i32> {
        self.meta
            .leases
            .iter()
            .filter(|&(_, &until)| until > self.now)
            .map(|(&id, _)| id)
            .collect()
    }

    /// An admin's AlterPartitionReassignments, applied to the record in one metastore
    /// transaction: a new target (of live agents; it may replace a reassignment in
    /// progress), or a cancellation.
    fn admin(&mut self) {
        if !self.rng.chance(self.p.reassign) {
            return;
        }
        let cur = self.meta.record.clone();
        let moving = !cur.adding.is_empty() || !cur.removing.is_empty();
        if moving && self.rng.chance(self.p.cancel) {
            let Ok(r) = cancel_reassignment(&cur) else {
                self.trace(|| "admin's cancel refused: no in-sync replica would remain".into());
                return;
            };
            self.stats.cancelled += 1;
            self.target = None;
            self.trace(|| format!("admin cancels the reassignment: {r:?}"));
            self.meta_write(r);
            return;
        }
        let mut target = NODES.to_vec();
        for i in (1..target.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            target.swap(i, j);
        }
        target.truncate(self.rng.between(2, NODES.len() as i64) as usize);
        let live = self.live();
        if let Some(down) = target.iter().find(|r| !live.contains(r)) {
            self.trace(|| format!("admin's reassignment to {target:?} refused: {down} is down"));
            return;
        }
        if cur.replicas == target && cur.adding.is_empty() {
            return;
        }
        let Ok(r) = reassign(&cur, &target) else {
            self.trace(|| {
                format!(
                    "admin's reassignment to {target:?} refused: no in-sync replica would remain"
                )
            });
            return;
        };
        if r.adding.is_empty() && r.removing.is_empty() {
            // Only the order changed (or a reassignment was replaced by its own
            // original replicas): nothing to move.
            self.target = None;
        } else {
            self.stats.reassignments += 1;
            if moving {
                self.stats.replaced += 1;
            }
            self.target = Some(target);
        }
        self.trace(|| format!("admin reassigns: {r:?}"));
        self.meta_write(r);
    }

    fn controller(&mut self) {
        if self.rng.chance(self.p.controller) {
            let live = self.live();
            if let Some(r) = elect(&self.meta.record, &live, false) {
                self.stats.elections += 1;
                self.trace(|| format!("controller elects (live {live:?}): {r:?}"));
                self.meta_write(r);
            } else if let Some(r) = finish_reassignment(&self.meta.record, &live) {
                self.stats.finished += 1;
                self.trace(|| format!("controller completes the reassignment: {r:?}"));
                self.check_finish(&r);
                self.target = None;
                self.meta_write(r);
            }
        }
        if !self.healing && self.rng.chance(self.p.prefer) {
            let live = self.live();
            if let Some(r) = prefer(&self.meta.record, &live) {
                self.stats.preferred += 1;
                self.trace(|| format!("controller prefers: {r:?}"));
                self.meta_write(r);
            }
        }
    }

    // ----- metastore -----

    /// Commits a new record and notifies every agent through the network.
    fn meta_write(&mut self, record: PartitionRecord) {
        self.check_record(&record);
        self.meta.version += 1;
        self.meta.record = record;
        for id in NODES {
            let msg = Msg::Record {
                version: self.meta.version,
                record: self.meta.record.clone(),
            };
            self.send(Addr::Meta, Addr::Node(id), msg, false);
        }
    }

    fn renew(&mut self, id: i32) {
        let now = self.now;
        let n = self.node_mut(id);
        if now - n.last_renewal < RENEW_EVERY {
            return;
        }
        n.last_renewal = now;
        n.lease_until = now + LEASE;
        self.meta.leases.insert(id, now + LEASE);
    }

    fn meta_receive(&mut self, from: Addr, msg: Msg) {
        let (Addr::Node(node), Msg::IsrCas { id, epoch, isr }) = (from, msg) else {
            unreachable!("the metastore only takes ISR changes");
        };
        let r = &self.meta.record;
        let committed = if r.leader == node && r.leader_epoch == epoch {
            if isr.len() < r.isr.len() {
                self.stats.isr_shrinks += 1;
            } else if isr.len() > r.isr.len() {
                self.stats.isr_expands += 1;
            }
            let new = PartitionRecord {
                isr: isr.clone(),
                ..r.clone()
            };
            self.trace(|| format!("metastore commits ISR {isr:?} from node {node} e{epoch}"));
            self.meta_write(new);
            Some(isr)
        } else {
            self.trace(|| format!("metastore refuses ISR {isr:?} from node {node} e{epoch}"));
            None
        };
        let answer = Msg::IsrCasAnswer {
            id,
            committed,
            version: self.meta.version,
            record: self.meta.record.clone(),
        };
        self.send(Addr::Meta, Addr::Node(node), answer, true);
    }

    // ----- network -----

    fn send(&mut self, from: Addr, to: Addr, msg: Msg, reliable: bool) {
        if !reliable && !self.healing && self.rng.chance(self.p.drop) {
            self.trace(|| format!("dropped {from:?} -> {to:?}: {msg:?}"));
            return;
        }
        let at = self.now + self.rng.between(1, self.p.max_delay);
        let incarnation = match to {
            Addr::Node(id) => self.node(id).incarnation,
            _ => 0,
        };
        self.seq += 1;
        self.net.push(Envelope {
            at,
            seq: self.seq,
            from,
            to,
            incarnation,
            msg,
        });
    }

    /// Delivers every message that is due, in arrival order; messages for a paused node
    /// wait, messages for a crashed one (or an earlier incarnation) are lost.
    fn deliver(&mut self) {
        let mut due = Vec::new();
        let mut i = 0;
        while i < self.net.len() {
            let e = &self.net[i];
            let (ready, lost) = match e.to {
                Addr::Node(id) => {
                    let n = self.node(id);
                    let lost = !n.up || n.incarnation != e.incarnation;
                    (e.at <= self.now && (lost || !n.paused), lost)
                }
                _ => (e.at <= self.now, false),
            };
            if ready {
                let e = self.net.swap_remove(i);
                if !lost {
                    due.push(e);
                }
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|e| (e.at, e.seq));
        for e in due {
            if let Addr::Node(id) = e.to
                && self.node(id).paused
            {
                // Stalled while working through this step's messages: the rest waits.
                self.net.push(e);
                continue;
            }
            self.trace(|| format!("{:?} -> {:?}: {:?}", e.from, e.to, e.msg));
            match e.to {
                Addr::Meta => self.meta_receive(e.from, e.msg),
                Addr::Client => self.client_receive(e.msg),
                Addr::Node(id) => self.node_receive(id, e.from, e.msg),
            }
        }
    }

    /// The producer refreshes its metadata after an error.
    fn client_receive(&mut self, msg: Msg) {
        match msg {
            Msg::ProduceAck { value, offset } => {
                self.trace(|| format!("client: {value} acknowledged at {offset}"));
            }
            Msg::ProduceError { value, reason } => {
                self.trace(|| format!("client: {value} failed: {reason}"));
                self.client_leader = self.meta.record.leader;
            }
            _ => unreachable!("not for the client"),
        }
    }

    // ----- nodes -----

    /// A node's own timers: lease, metastore poll, fsync, ISR check, follower requests.
    fn tick(&mut self, id: i32) {
        self.renew(id);
        if self.now >= self.node(id).next_poll {
            self.node_mut(id).next_poll = self.now + POLL_EVERY;
            let msg = Msg::Record {
                version: self.meta.version,
                record: self.meta.record.clone(),
            };
            self.send(Addr::Meta, Addr::Node(id), msg, false);
        }
        if self.rng.chance(self.p.fsync) {
            let n = self.node_mut(id);
            n.flushed = n.end();
            let flushed = n.flushed;
            if let Role::Leader(l) = &mut n.role {
                l.state.on_durable(flushed);
                self.settle(id);
            }
        }
        if self.rng.chance(self.p.isr_tick) {
            self.isr_tick(id);
        }
        if let Role::Follower(_) = self.node(id).role {
            self.follower_send(id);
        }
    }

    fn isr_tick(&mut self, id: i32) {
        let (now, lag) = (self.now, self.p.lag);
        let request = self.request_id();
        let Role::Leader(l) = &mut self.node_mut(id).role else {
            return;
        };
        let Some(change) = l.state.isr_change(now, lag) else {
            return;
        };
        let (epoch, isr) = (l.state.epoch, change.isr.clone());
        l.state.propose(change);
        l.isr_request = Some(request);
        self.trace(|| format!("node {id} e{epoch} proposes ISR {isr:?}"));
        let msg = Msg::IsrCas {
            id: request,
            epoch,
            isr,
        };
        self.send(Addr::Node(id), Addr::Meta, msg, true);
        self.settle(id);
    }

    /// Sends the follower's next request unless one is in flight: the epoch query until
    /// the log is cut to the leader's, fetches after.
    fn follower_send(&mut self, id: i32) {
        let now = self.now;
        let timeout = 2 * self.p.max_delay + 2;
        let request = self.request_id();
        let n = self.node_mut(id);
        let end = n.end();
        let latest = n.history.latest();
        let Role::Follower(f) = &mut n.role else {
            return;
        };
        if f.request.is_some_and(|(_, sent)| now - sent <= timeout) || now < f.next_send {
            return;
        }
        if !f.truncated && latest.is_none() {
            // An empty log has nothing to cut.
            f.truncated = true;
        }
        f.request = Some((request, now));
        let msg = match latest {
            Some(latest) if !f.truncated => Msg::EpochQuery {
                id: request,
                epoch: f.epoch,
                latest,
            },
            _ => Msg::Fetch {
                id: request,
                epoch: f.epoch,
                offset: end,
            },
        };
        let leader = f.leader;
        self.send(Addr::Node(id), Addr::Node(leader), msg, false);
    }

    fn node_receive(&mut self, id: i32, from: Addr, msg: Msg) {
        match msg {
            Msg::Produce { value } => self.on_produce(id, value),
            Msg::Fetch {
                id: rid,
                epoch,
                offset,
            } => {
                let Addr::Node(follower) = from else {
                    unreachable!("fetches come from nodes")
                };
                self.on_fetch(id, follower, rid, epoch, offset);
            }
            Msg::FetchResponse { id: rid, result } => self.on_fetch_response(id, rid, result),
            Msg::EpochQuery {
                id: rid,
                epoch,
                latest,
            } => {
                let result = match &self.node(id).role {
                    Role::Leader(l) if l.state.epoch == epoch => {
                        let n = self.node(id);
                        Ok(n.history.end_offset_for(latest, n.end()))
                    }
                    _ => Err("not leader of this epoch"),
                };
                let answer = Msg::EpochAnswer { id: rid, result };
                self.send(Addr::Node(id), from, answer, false);
            }
            Msg::EpochAnswer { id: rid, result } => self.on_epoch_answer(id, rid, result),
            Msg::Record { version, record } => self.learn(id, version, record),
            Msg::IsrCasAnswer {
                id: rid,
                committed,
                version,
                record,
            } => self.on_isr_answer(id, rid, committed, version, record),
            Msg::ProduceAck { .. } | Msg::ProduceError { .. } | Msg::IsrCas { .. } => {
                unreachable!("not for a node")
            }
        }
    }

    /// The node learns a version of the partition record and takes the role it names: a
    /// node no longer listed deletes its replica, one newly listed opens it (the log it
    /// still has on disk, or an empty one), and a leader whose replicas changed within
    /// its epoch tracks the new ones.
    fn learn(&mut self, id: i32, version: u64, record: PartitionRecord) {
        let now = self.now;
        let n = self.node_mut(id);
        if version <= n.known_version {
            return;
        }
        n.known_version = version;
        if !record.replicas.contains(&id) {
            if n.hosted {
                self.delete_replica(id);
            }
            return;
        }
        if !n.hosted {
            n.hosted = true;
            n.dir = true;
            n.hw = 0;
            n.flushed = n.end();
            let (end, h) = (n.end(), n.history.entries().to_vec());
            self.trace(|| format!("node {id} opens its replica: log end {end}, history {h:?}"));
        }
        let n = self.node_mut(id);
        if record.leader == id {
            if let Role::Leader(l) = &mut n.role
                && l.state.epoch == record.leader_epoch
            {
                if l.state.replicas != record.replicas {
                    l.state.set_replicas(&record.replicas, now);
                    self.trace(|| format!("node {id} leads replicas {:?} now", record.replicas));
                }
                return;
            }
            self.drop_leadership(id, "leader again in a newer epoch");
            let n = self.node_mut(id);
            let mut state = LeaderState::new(id, &record, n.end(), n.hw, now);
            state.on_durable(n.flushed);
            let last_hw = state.high_watermark;
            n.role = Role::Leader(Box::new(Leadership {
                state,
                acks: Vec::new(),
                isr_request: None,
                last_hw,
            }));
            self.stats.leaderships += 1;
            self.trace(|| format!("node {id} leads: {record:?}"));
            self.settle(id);
        } else if record.leader >= 0 {
            if matches!(&n.role, Role::Follower(f)
                if f.leader == record.leader && f.epoch == record.leader_epoch)
            {
                return;
            }
            self.drop_leadership(id, "deposed");
            self.node_mut(id).role = Role::Follower(Following {
                leader: record.leader,
                epoch: record.leader_epoch,
                truncated: false,
                request: None,
                next_send: now,
            });
            self.trace(|| format!("node {id} follows: {record:?}"));
        } else {
            self.drop_leadership(id, "partition has no leader");
            self.node_mut(id).role = Role::Idle;
            self.trace(|| format!("node {id} idles: {record:?}"));
        }
    }

    /// The node is no longer listed: it stops leading or following and deletes the log.
    fn delete_replica(&mut self, id: i32) {
        self.drop_leadership(id, "replica moved elsewhere");
        let n = self.node_mut(id);
        n.role = Role::Idle;
        n.hosted = false;
        n.dir = false;
        n.log.clear();
        n.history = EpochHistory::default();
        n.hw = 0;
        n.flushed = 0;
        self.stats.deleted += 1;
        self.trace(|| format!("node {id} deletes its replica"));
    }

    /// Drops the node's leadership if it has one: pending acknowledgements fail.
    fn drop_leadership(&mut self, id: i32, why: &'static str) {
        let n = self.node_mut(id);
        if !matches!(n.role, Role::Leader(_)) {
            return;
        }
        let Role::Leader(l) = std::mem::replace(&mut n.role, Role::Idle) else {
            unreachable!()
        };
        n.hw = l.state.high_watermark.min(n.end());
        self.trace(|| format!("node {id} stops leading e{}: {why}", l.state.epoch));
        for a in l.acks {
            let msg = Msg::ProduceError {
                value: a.value,
                reason: why,
            };
            self.send(Addr::Node(id), Addr::Client, msg, false);
        }
    }

    fn on_produce(&mut self, id: i32, value: u64) {
        let now = self.now;
        let min_insync = self.p.min_insync;
        let n = self.node_mut(id);
        let lease = n.lease_until > now;
        let offset = n.end();
        let epoch = match &mut n.role {
            Role::Leader(_) if !lease => Err("leader's lease ran out"),
            Role::Leader(l) if !l.state.enough_replicas(min_insync) => Err("not enough replicas"),
            Role::Leader(l) => {
                l.acks.push(PendingAck { value, offset });
                Ok(l.state.epoch)
            }
            _ => Err("not leader"),
        };
        let epoch = match epoch {
            Ok(epoch) => epoch,
            Err(reason) => {
                self.trace(|| format!("node {id} refuses produce {value}: {reason}"));
                let msg = Msg::ProduceError { value, reason };
                self.send(Addr::Node(id), Addr::Client, msg, false);
                return;
            }
        };
        let latest = n.history.latest();
        n.log.push(Entry {
            offset,
            epoch,
            value,
        });
        n.history.note(epoch, offset);
        let noted = n.history.latest();
        self.trace(|| format!("node {id} e{epoch} appends {value} at {offset}"));
        self.maybe_stall(id);
        if latest.is_some_and(|e| e > epoch) || noted != Some(epoch) {
            let h = self.node(id).history.entries().to_vec();
            self.violation(format!(
                "[5] node {id} leads e{epoch} but its history is {h:?}"
            ));
        }
    }

    fn on_fetch(&mut self, id: i32, follower: i32, rid: u64, epoch: i32, offset: i64) {
        let now = self.now;
        let cap = self.rng.between(1, self.p.max_batches);
        let n = self.node_mut(id);
        let end = n.end();
        let result = match &mut n.role {
            Role::Leader(l) if l.state.epoch == epoch && offset <= end => {
                l.state.on_fetch(follower, offset, end, now);
                let upto = end.min(offset + cap);
                let batches = n.log[offset as usize..upto as usize].to_vec();
                Ok((batches, l.state.high_watermark))
            }
            Role::Leader(l) if l.state.epoch == epoch => Err("offset out of range"),
            _ => Err("not leader of this epoch"),
        };
        match &result {
            Ok((batches, _)) => {
                self.settle(id);
                if !batches.is_empty() {
                    self.maybe_stall(id);
                }
            }
            Err("offset out of range") => self.violation(format!(
                "[2] node {follower} fetches from {offset} in e{epoch}, beyond the log end \
                 {end} of leader {id}: its log diverged"
            )),
            Err(_) => {}
        }
        let msg = Msg::FetchResponse { id: rid, result };
        self.send(Addr::Node(id), Addr::Node(follower), msg, false);
    }

    /// The follower's request `rid`, if it is the one in flight: clears it.
    fn take_request(&mut self, id: i32, rid: u64) -> bool {
        match &mut self.node_mut(id).role {
            Role::Follower(f) if f.request.is_some_and(|(r, _)| r == rid) => {
                f.request = None;
                true
            }
            _ => false,
        }
    }

    fn backoff(&mut self, id: i32) {
        let at = self.now + 2;
        if let Role::Follower(f) = &mut self.node_mut(id).role {
            f.next_send = at;
        }
    }

    fn on_fetch_response(
        &mut self,
        id: i32,
        rid: u64,
        result: Result<(Vec<Entry>, i64), &'static str>,
    ) {
        if !self.take_request(id, rid) {
            return;
        }
        let Ok((batches, leader_hw)) = result else {
            self.backoff(id);
            return;
        };
        for e in batches {
            let n = self.node_mut(id);
            let (end, latest) = (n.end(), n.history.latest());
            if e.offset != end || latest.is_some_and(|l| l > e.epoch) {
                let h = n.history.entries().to_vec();
                self.violation(format!(
                    "[2/5] node {id} with log end {end} and history {h:?} gets {e:?}"
                ));
                return;
            }
            n.log.push(e);
            n.history.note(e.epoch, e.offset);
        }
        let n = self.node_mut(id);
        n.hw = leader_hw.min(n.end());
    }

    fn on_epoch_answer(
        &mut self,
        id: i32,
        rid: u64,
        result: Result<Option<(i32, i64)>, &'static str>,
    ) {
        if !self.take_request(id, rid) {
            return;
        }
        let Ok(answer) = result else {
            self.backoff(id);
            return;
        };
        let n = self.node_mut(id);
        let end = n.end();
        // KIP-279: an answer with an epoch this log lacks cuts only what is known to
        // differ, and the follower asks again (it stays untruncated).
        let (cut, done) = match divergence(&n.history, 0, end, answer) {
            Cut::Done(at) => (at, true),
            Cut::Again(at) => (at, false),
        };
        if !done && cut >= end {
            self.violation(format!(
                "[2] node {id}: divergence asks again without cutting anything ({answer:?})"
            ));
            return;
        }
        let hw = n.hw;
        let before = n.history.entries().to_vec();
        if cut > end {
            self.violation(format!(
                "[2] node {id}: divergence({before:?}, 0, {end}, {answer:?}) = {cut}, \
                 beyond its log end"
            ));
            return;
        }
        if cut < hw {
            self.violation(format!(
                "[2] node {id} cuts its log to {cut}, below its watermark {hw} \
                 (history {before:?}, leader's answer {answer:?})"
            ));
        }
        let n = self.node_mut(id);
        if cut < end {
            n.log.truncate(cut as usize);
            n.history.truncate_to(cut);
            n.flushed = n.flushed.min(cut);
            self.stats.truncations += 1;
            self.stats.truncated_records += (end - cut) as u64;
        }
        let n = self.node_mut(id);
        n.hw = n.hw.min(cut);
        let Role::Follower(f) = &mut n.role else {
            unreachable!("took a follower's request")
        };
        f.truncated = done;
        let (leader, epoch) = (f.leader, f.epoch);
        self.trace(|| {
            format!("node {id} cuts {end} -> {cut} (history {before:?}, answer {answer:?})")
        });
        self.check_history(id);
        if done {
            self.check_cut(id, leader, epoch, &before, answer);
        }
    }

    /// What the truncation is for (KIP-101/279): the follower's log is now a prefix of
    /// the log of the leader it asked, if that one still leads the epoch (its log only
    /// grew since it answered).
    fn check_cut(
        &mut self,
        id: i32,
        leader: i32,
        epoch: i32,
        before: &[(i32, i64)],
        answer: Option<(i32, i64)>,
    ) {
        let l = self.node(leader);
        if !matches!(&l.role, Role::Leader(s) if s.state.epoch == epoch) {
            return;
        }
        let n = self.node(id);
        let differs = n.log.iter().zip(&l.log).find(|(a, b)| a != b);
        if let Some((mine, theirs)) = differs {
            let (lh, cut) = (l.history.entries().to_vec(), n.end());
            let (mine, theirs) = (*mine, *theirs);
            self.violation(format!(
                "[2] node {id} (history {before:?}) cut its log to {cut} after leader \
                 {leader} (e{epoch}, history {lh:?}) answered {answer:?}, and still holds \
                 {mine:?} where the leader has {theirs:?}"
            ));
        }
    }

    fn on_isr_answer(
        &mut self,
        id: i32,
        rid: u64,
        committed: Option<Vec<i32>>,
        version: u64,
        record: PartitionRecord,
    ) {
        let Role::Leader(l) = &mut self.node_mut(id).role else {
            return;
        };
        if l.isr_request != Some(rid) {
            return;
        }
        l.isr_request = None;
        let refused = committed.is_none();
        l.state.on_isr_result(committed);
        self.settle(id);
        if refused {
            // The record moved on: this node was deposed.
            self.learn(id, version, record);
        }
    }

    /// Acknowledges (or fails) the pending produce requests the watermark now covers,
    /// and checks the watermark did not fall.
    fn settle(&mut self, id: i32) {
        let min_insync = self.p.min_insync;
        let n = self.node_mut(id);
        let Role::Leader(l) = &mut n.role else {
            return;
        };
        let hw = l.state.high_watermark;
        let epoch = l.state.epoch;
        let fell = (hw < l.last_hw).then_some(l.last_hw);
        l.last_hw = l.last_hw.max(hw);
        n.hw = hw;
        let enough = l.state.enough_replicas(min_insync);
        let (done, pending): (Vec<PendingAck>, Vec<PendingAck>) = std::mem::take(&mut l.acks)
            .into_iter()
            .partition(|a| a.offset < hw);
        l.acks = pending;
        if let Some(last) = fell {
            self.violation(format!(
                "[4] node {id} e{epoch}: watermark fell {last} -> {hw}"
            ));
        }
        for a in done {
            if !enough {
                let msg = Msg::ProduceError {
                    value: a.value,
                    reason: "not enough replicas after append",
                };
                self.send(Addr::Node(id), Addr::Client, msg, false);
                continue;
            }
            self.trace(|| format!("node {id} e{epoch} acks {} at {}", a.value, a.offset));
            self.stats.acks += 1;
            if self.meta.record.leader_epoch > epoch {
                self.stats.stale_acks += 1;
            }
            match self.ackers.get(&epoch) {
                Some(&other) if other != id => self.violation(format!(
                    "[4] nodes {other} and {id} both acknowledged writes in e{epoch}"
                )),
                _ => {
                    self.ackers.insert(epoch, id);
                }
            }
            self.acked.push(Ack {
                value: a.value,
                offset: a.offset,
                epoch,
                node: id,
            });
            let msg = Msg::ProduceAck {
                value: a.value,
                offset: a.offset,
            };
            self.send(Addr::Node(id), Addr::Client, msg, false);
        }
    }

    // ----- checks -----

    /// Checker 5 (and the log half of 2): dense offsets, non-decreasing epochs, and an
    /// epoch history that rises and says where each epoch of the log begins.
    fn check_history(&mut self, id: i32) {
        let n = self.node(id);
        let mut derived = EpochHistory::default();
        let mut problem = None;
        for (i, e) in n.log.iter().enumerate() {
            if e.offset != i as i64 {
                problem = Some(format!(
                    "[2] node {id}: offset {} at position {i}",
                    e.offset
                ));
                break;
            }
            if i > 0 && e.epoch < n.log[i - 1].epoch {
                problem = Some(format!("[5] node {id}: epoch falls at offset {i}"));
                break;
            }
            derived.note(e.epoch, e.offset);
        }
        let h = n.history.entries();
        if problem.is_none() && h.windows(2).any(|w| w[0].0 >= w[1].0 || w[0].1 >= w[1].1) {
            problem = Some(format!("[5] node {id}: history does not rise: {h:?}"));
        }
        if problem.is_none() && derived != n.history {
            problem = Some(format!(
                "[5] node {id}: history {h:?}, but the log's epochs say {:?}",
                derived.entries()
            ));
        }
        if let Some(p) = problem {
            self.violation(p);
        }
    }

    /// Checker 6, when the controller completes a reassignment: the replicas become the
    /// target the admin asked for, the new ISR is not empty and holds the leader, and
    /// every member of it already has every record acknowledged so far (so the removed
    /// replicas went only once the added ones were in sync).
    fn check_finish(&mut self, r: &PartitionRecord) {
        let mut problems = Vec::new();
        if self.target.as_ref() != Some(&r.replicas) {
            problems.push(format!(
                "[6] reassignment to {:?} completes with replicas {:?}",
                self.target, r.replicas
            ));
        }
        if r.isr.is_empty() || (r.leader >= 0 && !r.isr.contains(&r.leader)) {
            problems.push(format!(
                "[6] reassignment completes with leader {} and ISR {:?}",
                r.leader, r.isr
            ));
        }
        for &id in &r.isr {
            let log = &self.node(id).log;
            if let Some(a) = self
                .acked
                .iter()
                .find(|a| log.get(a.offset as usize).map(|e| e.value) != Some(a.value))
            {
                problems.push(format!(
                    "[6] reassignment completes with node {id} in the ISR {:?}, but its log \
                     (end {}) lacks {} acknowledged at {} by node {} in e{}",
                    r.isr,
                    log.len(),
                    a.value,
                    a.offset,
                    a.node,
                    a.epoch
                ));
            }
        }
        for p in problems {
            self.violation(p);
        }
    }

    /// Checker 7, on every metastore write: the record is well formed. The ISR is not
    /// empty (the ISR of a partition without a leader is who may lead it again), the
    /// leader and the ISR are replicas, the replicas are distinct, and the replicas being
    /// added or removed are among them.
    fn check_record(&mut self, r: &PartitionRecord) {
        let mut distinct = r.replicas.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let listed = |set: &[i32]| set.iter().all(|x| r.replicas.contains(x));
        if distinct.len() != r.replicas.len()
            || r.isr.is_empty()
            || (r.leader >= 0 && !r.replicas.contains(&r.leader))
            || !listed(&r.isr)
            || !listed(&r.adding)
            || !listed(&r.removing)
        {
            self.violation(format!("[7] malformed partition record {r:?}"));
        }
    }

    /// No reassignment in progress, one leader of the record's epoch, every replica in
    /// its ISR with its log, its watermark at its log end, nothing pending; the nodes no
    /// longer listed have deleted their replicas.
    fn stable(&self) -> bool {
        let r = &self.meta.record;
        if r.leader < 0
            || !r.adding.is_empty()
            || !r.removing.is_empty()
            || r.isr.len() != r.replicas.len()
        {
            return false;
        }
        let leader = self.node(r.leader);
        let Role::Leader(l) = &leader.role else {
            return false;
        };
        let s = &l.state;
        if !leader.runs()
            || s.epoch != r.leader_epoch
            || s.pending.is_some()
            || s.replicas != r.replicas
            || s.isr.len() != r.replicas.len()
            || s.high_watermark != leader.end()
        {
            return false;
        }
        NODES.iter().filter(|&&id| id != r.leader).all(|&id| {
            let n = self.node(id);
            if !r.replicas.contains(&id) {
                return !n.hosted;
            }
            n.runs()
                && matches!(&n.role, Role::Follower(f)
                    if f.leader == r.leader && f.epoch == r.leader_epoch)
                && n.log == leader.log
        })
    }

    fn final_checks(&mut self, stable: bool) {
        for id in NODES {
            self.check_history(id);
        }
        let mut problems = Vec::new();
        let r = &self.meta.record;
        if !r.adding.is_empty() || !r.removing.is_empty() {
            problems.push(format!(
                "[6] the reassignment to {:?} is still in progress {HEAL_LIMIT} steps after \
                 healing: {r:?}",
                self.target
            ));
        }
        if !stable {
            let states: Vec<String> = self.nodes.iter().map(Node::describe).collect();
            problems.push(format!(
                "not stable {HEAL_LIMIT} steps after healing; metastore {:?}; {}",
                self.meta.record,
                states.join("; ")
            ));
        }
        // Without a leader there is no final log to check against (only possible when
        // not stable, reported above).
        let leader = self.meta.record.leader;
        if leader < 0 {
            for p in problems {
                self.violation(p);
            }
            return;
        }
        let llog = self.node(leader).log.clone();
        let final_hw = self.node(leader).hw;
        // 1. Acknowledged writes survive at their offsets, once each.
        for a in &self.acked {
            let found = llog.get(a.offset as usize).map(|e| e.value);
            if found != Some(a.value) {
                problems.push(format!(
                    "[1] value {} acknowledged at offset {} by node {} in e{} is lost: \
                     the final leader {leader} has {found:?} there",
                    a.value, a.offset, a.node, a.epoch
                ));
            }
        }
        let mut seen = BTreeMap::new();
        for e in &llog {
            if let Some(first) = seen.insert(e.value, e.offset) {
                problems.push(format!(
                    "[1] value {} twice in the final log, at {first} and {}",
                    e.value, e.offset
                ));
            }
        }
        // 2. Prefix agreement below the final watermark, in-sync replicas identical (a
        //    node no longer listed may keep a stale log, unused, if it was down when it
        //    was removed).
        for n in &self.nodes {
            if !self.meta.record.replicas.contains(&n.id) {
                continue;
            }
            let below = (final_hw as usize).min(n.log.len());
            if let Some(o) = (0..below).find(|&o| n.log[o] != llog[o]) {
                problems.push(format!(
                    "[2] node {} has {:?} at offset {o}, the final leader {leader} {:?}",
                    n.id, n.log[o], llog[o]
                ));
            }
            if self.meta.record.isr.contains(&n.id) && n.log != llog {
                problems.push(format!("[2] in-sync node {} differs from the leader", n.id));
            }
        }
        // 3. Reads are never contradicted.
        for (&offset, &value) in &self.reads {
            let found = llog.get(offset as usize).map(|e| e.value);
            if found != Some(value) {
                problems.push(format!(
                    "[3] a consumer read {value} at offset {offset}; the final log has \
                     {found:?}"
                ));
            }
        }
        for p in problems {
            self.violation(p);
        }
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
        assert!(
            total.finished > 0,
            "no reassignment completed: {}",
            total.summary()
        );
    }
}
