//! The invariants, checked as the schedule runs and at its end, and the counters the
//! summary line reports.

use crate::*;

/// An acknowledgement a leader sent.
#[derive(Debug)]
pub(crate) struct Acked {
    pub(crate) value: u64,
    pub(crate) offset: i64,
    pub(crate) epoch: i32,
    pub(crate) node: i32,
}

/// Counters, summed over schedules for the summary line.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) schedules: u64,
    pub(crate) produced: u64,
    pub(crate) acks: u64,
    /// Acknowledgements by a leader whose epoch the metastore had already superseded
    /// (allowed: the watermark covered the write).
    pub(crate) stale_acks: u64,
    pub(crate) reads: u64,
    pub(crate) elections: u64,
    pub(crate) wipes: u64,
    pub(crate) rejoins: u64,
    pub(crate) preferred: u64,
    pub(crate) restart_bumps: u64,
    pub(crate) leaderships: u64,
    pub(crate) truncations: u64,
    pub(crate) truncated_records: u64,
    pub(crate) isr_shrinks: u64,
    pub(crate) isr_expands: u64,
    pub(crate) crashes: u64,
    pub(crate) pauses: u64,
    /// Reassignments begun (some replacing one in progress), completed by the
    /// controller, cancelled; replicas deleted from a node no longer listed.
    pub(crate) reassignments: u64,
    pub(crate) replaced: u64,
    pub(crate) finished: u64,
    pub(crate) cancelled: u64,
    pub(crate) deleted: u64,
    /// Fsyncs the log was cut back under, which then counted for nothing.
    pub(crate) voided_fsyncs: u64,
    pub(crate) max_steps: i64,
    pub(crate) max_heal_steps: i64,
}

impl Stats {
    pub(crate) fn add(&mut self, o: &Stats) {
        self.schedules += o.schedules;
        self.produced += o.produced;
        self.acks += o.acks;
        self.stale_acks += o.stale_acks;
        self.reads += o.reads;
        self.elections += o.elections;
        self.wipes += o.wipes;
        self.rejoins += o.rejoins;
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
        self.voided_fsyncs += o.voided_fsyncs;
        self.max_steps = self.max_steps.max(o.max_steps);
        self.max_heal_steps = self.max_heal_steps.max(o.max_heal_steps);
    }

    pub(crate) fn summary(&self) -> String {
        format!(
            "schedules {}, produced {}, acks {} ({} by superseded leaders), reads {}, \
             elections {} (+{} preferred, +{} restart bumps), leaderships {}, \
             truncations {} ({} records), isr shrinks {} expands {}, crashes {}, pauses {}, \
             disks lost {} (replicas rejoined {}), \
             reassignments {} ({} replacing one) finished {} cancelled {}, replicas deleted {}, \
             fsyncs voided by a cut {}, max steps {} (heal {})",
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
            self.wipes,
            self.rejoins,
            self.reassignments,
            self.replaced,
            self.finished,
            self.cancelled,
            self.deleted,
            self.voided_fsyncs,
            self.max_steps,
            self.max_heal_steps
        )
    }
}

impl Sim {
    /// What the truncation is for (KIP-101/279): the follower's log is now a prefix of
    /// the log of the leader it asked, if that one still leads the epoch (its log only
    /// grew since it answered).
    pub(crate) fn check_cut(
        &mut self,
        id: i32,
        leader: i32,
        epoch: i32,
        before: &[(i32, i64)],
        answer: Option<(i32, i64)>,
    ) {
        let l = self.node(leader);
        if l.replica.leader().is_none_or(|s| s.epoch != epoch) {
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

    /// Checker 5 (and the log half of 2): dense offsets, non-decreasing epochs, and an
    /// epoch history that rises and says where each epoch of the log begins.
    pub(crate) fn check_history(&mut self, id: i32) {
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
    pub(crate) fn check_finish(&mut self, r: &PartitionRecord) {
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
            // A member whose disk was lost since (its agent has not come back to say so):
            // nobody can know yet; the records are on the other members.
            let recorded = r.directories.get(&id);
            if recorded.is_some_and(|d| !d.is_empty() && *d != self.node(id).directory()) {
                continue;
            }
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
    pub(crate) fn check_record(&mut self, r: &PartitionRecord) {
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
    pub(crate) fn stable(&self) -> bool {
        let r = &self.meta.record;
        if r.leader < 0
            || !r.adding.is_empty()
            || !r.removing.is_empty()
            || r.isr.len() != r.replicas.len()
        {
            return false;
        }
        let leader = self.node(r.leader);
        let Some(s) = leader.replica.leader() else {
            return false;
        };
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
                && matches!(&n.duty, Duty::Follower(f)
                    if f.cycle.leader == r.leader && f.cycle.epoch == r.leader_epoch)
                && n.log == leader.log
        })
    }

    pub(crate) fn final_checks(&mut self, stable: bool) {
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
        let final_hw = self.node(leader).replica.high_watermark();
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
