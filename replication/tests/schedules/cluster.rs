//! Everything outside the agents: faults, clients, the admin, the controller and the
//! metastore.

use crate::*;

pub(crate) struct Metastore {
    pub(crate) record: PartitionRecord,
    pub(crate) version: u64,
    pub(crate) leases: BTreeMap<i32, i64>,
    /// The data directory each node registered with.
    pub(crate) directories: BTreeMap<i32, String>,
}

impl Sim {
    // ----- faults, clients, controller -----

    pub(crate) fn faults(&mut self) {
        if let Some(id) = self.recovering {
            let r = &self.meta.record;
            let back =
                r.isr.contains(&id) && r.directories.get(&id) == Some(&self.node(id).directory());
            if back || !r.replicas.contains(&id) {
                self.trace(|| format!("node {id} recovered from its lost disk"));
                self.recovering = None;
            }
        }
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
            } else if self.rng.chance(self.p.wipe) && self.may_wipe(id) {
                self.wipe(id);
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
    pub(crate) fn maybe_stall(&mut self, id: i32) {
        if !self.healing && self.rng.chance(self.p.stall) {
            self.stats.pauses += 1;
            self.trace(|| format!("node {id} stalls"));
            self.node_mut(id).paused = true;
        }
    }

    pub(crate) fn crash(&mut self, id: i32) {
        self.stats.crashes += 1;
        self.trace(|| format!("node {id} crashes"));
        let n = self.node_mut(id);
        n.up = false;
        n.paused = false;
        n.forget();
    }

    /// Whether node `id` may lose its disk without taking acknowledged records with it:
    /// it is not in the ISR, or another in-sync replica still has its recorded log
    /// (every member of the committed ISR has every record below the watermark).
    pub(crate) fn may_wipe(&self, id: i32) -> bool {
        let r = &self.meta.record;
        // A reassignment completing removes copies as if asked for after the loss.
        if self.recovering.is_some() || !r.adding.is_empty() || !r.removing.is_empty() {
            return false;
        }
        if !r.isr.contains(&id) {
            return true;
        }
        // With min.insync.replicas 1 the ISR may shrink to one replica (a shrink may be
        // on its way): no lost disk is survivable there.
        if self.p.min_insync < 2 {
            return false;
        }
        r.isr.iter().chain(&r.elr).any(|&o| {
            o != id
                && match r.directories.get(&o) {
                    Some(d) => d.is_empty() || *d == self.node(o).directory(),
                    None => true,
                }
                && self.node(o).dir
        })
    }

    /// Node `id` loses its disk: it crashes, and its data directory is gone (a new,
    /// empty one with a new id replaces it).
    pub(crate) fn wipe(&mut self, id: i32) {
        self.stats.wipes += 1;
        self.recovering = Some(id);
        self.trace(|| format!("node {id} loses its disk"));
        self.crash(id);
        let n = self.node_mut(id);
        n.log.clear();
        n.history = EpochHistory::default();
        n.dir = false;
        n.disk += 1;
        n.forget();
    }

    /// Node `id` opened its replica (`had_log`: its log was on its disk): the metastore
    /// transaction of [`open_replica`], on the record as it stands. Returns the record
    /// it leaves, with its version.
    pub(crate) fn open_replica(&mut self, id: i32, had_log: bool) -> (u64, PartitionRecord) {
        let directory = self.node(id).directory();
        let agents = self.live_agents();
        let cur = self.meta.record.clone();
        let min_insync = self.p.min_insync;
        if let Some(next) = open_replica(&cur, id, &directory, had_log, &agents, min_insync) {
            if opening(&cur, id, &directory, had_log) == Opening::Rejoin {
                self.stats.rejoins += 1;
            }
            self.trace(|| format!("node {id} opens on {directory} (had log: {had_log}): {next:?}"));
            self.meta_write(next);
        }
        (self.meta.version, self.meta.record.clone())
    }

    pub(crate) fn resume(&mut self, id: i32) {
        self.trace(|| format!("node {id} resumes"));
        self.node_mut(id).paused = false;
    }

    /// A restarted agent registers (renews its lease), reads the record, and bumps the
    /// epoch first if the record still names it leader of a replica it finds on disk.
    pub(crate) fn restart(&mut self, id: i32) {
        let now = self.now;
        let n = self.node_mut(id);
        n.up = true;
        n.paused = false;
        n.incarnation += 1;
        n.forget();
        n.last_renewal = i64::MIN / 2;
        n.next_poll = now + POLL_EVERY;
        self.trace(|| format!("node {id} restarts"));
        self.renew(id);
        let r = &self.meta.record;
        if !r.replicas.contains(&id) {
            let (version, record) = (self.meta.version, self.meta.record.clone());
            self.learn(id, version, record);
            return;
        }
        // It opens its replica at once (before it serves), as the agent does.
        let had_log = self.node(id).dir;
        let directory = self.node(id).directory();
        let opened = opening(r, id, &directory, had_log);
        let (mut version, mut record) = self.open_replica(id, had_log);
        if had_log && opened != Opening::Rejoin && record.leader == id {
            let bumped = PartitionRecord {
                leader_epoch: record.leader_epoch + 1,
                ..record.clone()
            };
            self.stats.restart_bumps += 1;
            self.trace(|| format!("node {id} bumps its epoch on restart: {bumped:?}"));
            self.meta_write(bumped);
            (version, record) = (self.meta.version, self.meta.record.clone());
        }
        let n = self.node_mut(id);
        n.hosted = true;
        n.dir = true;
        self.learn(id, version, record);
    }

    pub(crate) fn producer(&mut self) {
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

    /// A consumer reads one offset below the watermark of a node acting as leader, and
    /// asks the leader the metastore names for the latest offset, with its epoch (as a
    /// KIP-320 client does).
    pub(crate) fn consumer(&mut self) {
        if !self.rng.chance(self.p.read) {
            return;
        }
        self.list_latest();
        let leaders: Vec<i32> = NODES
            .into_iter()
            .filter(|&id| {
                let n = self.node(id);
                n.runs() && n.replica.leader().is_some_and(|l| l.high_watermark > 0)
            })
            .collect();
        if leaders.is_empty() {
            return;
        }
        let id = self.rng.pick(&leaders);
        let hw = self.node(id).replica.high_watermark();
        let offset = self.rng.below(hw as u64) as i64;
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

    /// ListOffsets(latest) at the named leader in the named epoch: once answered, an
    /// offset never goes back (KIP-207), or a reader that stops at it misses records
    /// that were acknowledged.
    fn list_latest(&mut self) {
        let (id, epoch) = (self.meta.record.leader, self.meta.record.leader_epoch);
        if id < 0 || !self.node(id).runs() {
            return;
        }
        let replica = &self.node(id).replica;
        if replica.check_epoch(epoch).is_err() || replica.offsets_settled().is_err() {
            return;
        }
        let latest = replica.high_watermark();
        if latest < self.latest {
            self.violation(format!(
                "[3] node {id} answered latest offset {latest} in epoch {epoch}, \
                 {} was answered before",
                self.latest
            ));
        }
        self.latest = self.latest.max(latest);
    }

    pub(crate) fn live(&self) -> Vec<i32> {
        self.meta
            .leases
            .iter()
            .filter(|&(_, &until)| until > self.now)
            .map(|(&id, _)| id)
            .collect()
    }

    /// The live nodes with the directories they registered.
    pub(crate) fn live_agents(&self) -> LiveAgents {
        LiveAgents::new(self.live().into_iter().map(|id| {
            (
                id,
                LiveAgent {
                    directory: self.meta.directories[&id].clone(),
                    draining: false,
                },
            )
        }))
    }

    /// An admin's AlterPartitionReassignments, applied to the record in one metastore
    /// transaction: a new target (of live agents; it may replace a reassignment in
    /// progress), or a cancellation.
    pub(crate) fn admin(&mut self) {
        if !self.rng.chance(self.p.reassign) || self.recovering.is_some() {
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

    pub(crate) fn controller(&mut self) {
        if self.rng.chance(self.p.controller) {
            let live = self.live_agents();
            if let Some(r) = elect(&self.meta.record, &live, false, self.p.min_insync) {
                self.stats.elections += 1;
                self.trace(|| format!("controller elects (live {live:?}): {r:?}"));
                self.meta_write(r);
            } else if let Some(r) = finish_reassignment(&self.meta.record, &live)
                .map(|r| settle_elr(&self.meta.record, r, self.p.min_insync, &live))
            {
                self.stats.finished += 1;
                self.trace(|| format!("controller completes the reassignment: {r:?}"));
                self.check_finish(&r);
                self.target = None;
                self.meta_write(r);
            }
        }
        if !self.healing && self.rng.chance(self.p.prefer) {
            let live = self.live_agents();
            if let Some(r) = prefer(&self.meta.record, &live) {
                self.stats.preferred += 1;
                self.trace(|| format!("controller prefers: {r:?}"));
                self.meta_write(r);
            }
        }
    }

    // ----- metastore -----

    /// Commits a new record and notifies every agent through the network.
    pub(crate) fn meta_write(&mut self, record: PartitionRecord) {
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

    pub(crate) fn renew(&mut self, id: i32) {
        let now = self.now;
        let n = self.node_mut(id);
        if now - n.last_renewal < RENEW_EVERY {
            return;
        }
        n.last_renewal = now;
        n.lease_until = now + LEASE;
        let directory = n.directory();
        self.meta.leases.insert(id, now + LEASE);
        self.meta.directories.insert(id, directory);
    }

    pub(crate) fn meta_receive(&mut self, from: Addr, msg: Msg) {
        let (Addr::Node(node), Msg::IsrCas { id, epoch, isr }) = (from, msg) else {
            unreachable!("the metastore only takes ISR changes");
        };
        let agents = self.live_agents();
        let r = &self.meta.record;
        let committed = if r.leader == node && r.leader_epoch == epoch {
            // As the agent's transaction: only replicas that may join are added.
            let isr: Vec<i32> = isr
                .into_iter()
                .filter(|x| r.replicas.contains(x))
                .filter(|x| r.isr.contains(x) || agents.may_join_isr(r, *x))
                .collect();
            if isr.len() < r.isr.len() {
                self.stats.isr_shrinks += 1;
            } else if isr.len() > r.isr.len() {
                self.stats.isr_expands += 1;
            }
            let new = settle_elr(
                r,
                PartitionRecord {
                    isr: isr.clone(),
                    ..r.clone()
                },
                self.p.min_insync,
                &agents,
            );
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
}
