//! An agent: its durable log, and the production state machines of
//! `strata-replication` it drives ([`Replica`], [`Follower`]) with the little state
//! around them the agent keeps (pending acknowledgements, requests in flight).

use crate::*;

/// One record of a log (one record per batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) offset: i64,
    pub(crate) epoch: i32,
    pub(crate) value: u64,
}

pub(crate) struct PendingAck {
    pub(crate) value: u64,
    pub(crate) offset: i64,
    /// The epoch it was appended in.
    pub(crate) epoch: i32,
}

/// What a leader keeps beside its [`Replica`] in one epoch.
pub(crate) struct Leadership {
    pub(crate) acks: Vec<PendingAck>,
    /// The id of the ISR compare-and-set in flight.
    pub(crate) isr_request: Option<u64>,
    /// The watermark last seen, to check it never falls.
    pub(crate) last_hw: i64,
}

/// What a follower keeps beside its [`Follower`] cycle in one epoch.
pub(crate) struct Following {
    pub(crate) cycle: Follower,
    /// The request in flight (epoch query or fetch) and when it was sent.
    pub(crate) request: Option<(u64, i64)>,
    /// No request before this time (backoff after a refusal).
    pub(crate) next_send: i64,
}

/// The node's part, as its [`Replica`]'s last [`Transition`] made it.
pub(crate) enum Duty {
    Idle,
    Leader(Box<Leadership>),
    Follower(Following),
}

pub(crate) struct Node {
    pub(crate) id: i32,
    // Durable: survives a crash.
    pub(crate) log: Vec<Entry>,
    pub(crate) history: EpochHistory,
    /// Whether the log's directory exists (a replica removed while the node was down
    /// keeps it, and opens it again if it is added back).
    pub(crate) dir: bool,
    pub(crate) up: bool,
    pub(crate) paused: bool,
    pub(crate) incarnation: u32,
    /// Its data directory's generation: a wiped disk comes back as a new directory.
    pub(crate) disk: u32,
    /// The topic's `min.insync.replicas`.
    pub(crate) min_insync: usize,
    // Volatile.
    /// Whether the agent has the replica open: it is listed in the record it learned
    /// last (a node never listed, or removed, has no replica and answers nothing).
    pub(crate) hosted: bool,
    /// The production replication rules: role, watermark, what is durable.
    pub(crate) replica: Replica,
    pub(crate) duty: Duty,
    /// An fsync in flight, and when it finishes.
    pub(crate) fsync: Option<(FlushTicket, i64)>,
    pub(crate) known_version: u64,
    /// The newest record it learned.
    pub(crate) known_record: PartitionRecord,
    pub(crate) lease_until: i64,
    pub(crate) last_renewal: i64,
    pub(crate) next_poll: i64,
}

impl Node {
    pub(crate) fn new(id: i32, min_insync: usize) -> Node {
        let mut replica = Replica::new(id, 0, 0);
        replica.set_min_insync(min_insync);
        Node {
            id,
            log: Vec::new(),
            history: EpochHistory::default(),
            dir: false,
            up: true,
            paused: false,
            incarnation: 0,
            disk: 0,
            min_insync,
            hosted: false,
            replica,
            duty: Duty::Idle,
            fsync: None,
            known_version: 0,
            known_record: PartitionRecord::new(0, Vec::new()),
            lease_until: LEASE,
            last_renewal: 0,
            next_poll: POLL_EVERY,
        }
    }

    pub(crate) fn end(&self) -> i64 {
        self.log.len() as i64
    }

    pub(crate) fn runs(&self) -> bool {
        self.up && !self.paused
    }

    /// The id of its data directory.
    pub(crate) fn directory(&self) -> String {
        format!("n{}d{}", self.id, self.disk)
    }

    /// Forgets everything volatile (a crash or a restart): the replica is opened anew,
    /// its log as it is on disk, all of it durable (a process crash keeps the page
    /// cache), nothing known to be committed.
    pub(crate) fn forget(&mut self) {
        self.hosted = false;
        self.replica = Replica::new(self.id, self.end(), 0);
        self.replica.set_min_insync(self.min_insync);
        self.duty = Duty::Idle;
        self.fsync = None;
        self.known_version = 0;
        self.known_record = PartitionRecord::new(0, Vec::new());
    }

    pub(crate) fn describe(&self) -> String {
        let hw = self.replica.high_watermark();
        let role = match (&self.duty, self.replica.leader()) {
            (Duty::Leader(l), Some(s)) => format!(
                "leader e{} isr {:?} pending {:?} hw {hw} acks {}",
                s.epoch,
                s.isr,
                s.pending.as_ref().map(|p| &p.isr),
                l.acks.len()
            ),
            (Duty::Follower(f), _) => format!(
                "follower of {} e{} truncated {} hw {hw}",
                f.cycle.leader,
                f.cycle.epoch,
                f.cycle.truncated()
            ),
            _ => format!("idle e{} hw {hw}", self.replica.epoch()),
        };
        format!(
            "node {}{}{}{}: {} | log end {} flushed {} history {:?}",
            self.id,
            if self.up { "" } else { " (down)" },
            if self.paused { " (paused)" } else { "" },
            if self.hosted { "" } else { " (no replica)" },
            role,
            self.end(),
            self.replica.flushed(),
            self.history.entries()
        )
    }
}

impl Sim {
    /// A node's own timers: lease, metastore poll, fsync, ISR check, follower requests.
    pub(crate) fn tick(&mut self, id: i32) {
        self.renew(id);
        if self.now >= self.node(id).next_poll {
            self.node_mut(id).next_poll = self.now + POLL_EVERY;
            let msg = Msg::Record {
                version: self.meta.version,
                record: self.meta.record.clone(),
            };
            self.send(Addr::Meta, Addr::Node(id), msg, false);
        }
        self.flush(id);
        if self.rng.chance(self.p.isr_tick) {
            self.isr_tick(id);
        }
        if let Duty::Follower(_) = self.node(id).duty {
            self.follower_send(id);
        }
    }

    /// The flusher: an fsync of the whole log begins now and then and finishes a little
    /// later, perhaps after the log was cut back and grew again (then it counts for
    /// nothing).
    pub(crate) fn flush(&mut self, id: i32) {
        let now = self.now;
        if let Some((ticket, due)) = self.node(id).fsync {
            if now < due {
                return;
            }
            let n = self.node_mut(id);
            n.fsync = None;
            match n.replica.complete_flush(ticket) {
                Flushed::Durable { .. } => self.settle(id),
                Flushed::Again => {
                    self.stats.voided_fsyncs += 1;
                    self.trace(|| {
                        format!(
                            "node {id}: an fsync to {} was overtaken by a cut",
                            ticket.target
                        )
                    });
                }
            }
        } else if self.rng.chance(self.p.fsync) {
            let takes = self.rng.between(0, 3);
            let n = self.node_mut(id);
            if let Some(ticket) = n.replica.begin_flush(n.end()) {
                n.fsync = Some((ticket, now + takes));
                if takes == 0 {
                    self.flush(id);
                }
            }
        }
    }

    pub(crate) fn isr_tick(&mut self, id: i32) {
        let (now, lag) = (self.now, self.p.lag);
        let agents = self.live_agents();
        let request = self.request_id();
        let n = self.node_mut(id);
        let holding = agents.holding(&n.known_record);
        let may_join = agents.may_join(&n.known_record);
        let Duty::Leader(l) = &mut n.duty else {
            return;
        };
        if l.isr_request.is_some() {
            return;
        }
        let members = Members {
            holding: &holding,
            may_join: &may_join,
        };
        let Some((epoch, change)) = n.replica.isr_tick(now, lag, Some(members)) else {
            return;
        };
        l.isr_request = Some(request);
        let isr = change.isr;
        self.trace(|| {
            format!(
                "node {id} e{epoch} proposes ISR {isr:?} ({})",
                change.reason
            )
        });
        let msg = Msg::IsrCas {
            id: request,
            epoch,
            isr,
        };
        self.send(Addr::Node(id), Addr::Meta, msg, true);
        self.settle(id);
    }

    /// Sends the follower's next request unless one is in flight: what the
    /// [`Follower`] cycle asks for (a request that timed out starts it over).
    pub(crate) fn follower_send(&mut self, id: i32) {
        let now = self.now;
        let timeout = 2 * self.p.max_delay + 2;
        let request = self.request_id();
        let n = self.node_mut(id);
        let end = n.end();
        let latest = n.history.latest();
        let Duty::Follower(f) = &mut n.duty else {
            return;
        };
        if f.request.is_some_and(|(_, sent)| now - sent <= timeout) || now < f.next_send {
            return;
        }
        if f.request.is_some() {
            f.cycle.restart();
        }
        f.request = Some((request, now));
        let epoch = f.cycle.epoch;
        let msg = match f.cycle.next_request(latest, end) {
            Request::EpochQuery { latest } => Msg::EpochQuery {
                id: request,
                epoch,
                latest,
            },
            Request::Fetch { offset } => Msg::Fetch {
                id: request,
                epoch,
                offset,
            },
        };
        let leader = f.cycle.leader;
        self.send(Addr::Node(id), Addr::Node(leader), msg, false);
    }

    pub(crate) fn node_receive(&mut self, id: i32, from: Addr, msg: Msg) {
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
                let n = self.node(id);
                let result = match n.replica.leader() {
                    Some(l) if l.epoch == epoch => Ok(n.history.end_offset_for(latest, n.end())),
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

    /// The node learns a version of the partition record and takes the role it names
    /// ([`Replica::apply`]): a node no longer listed deletes its replica, one newly
    /// listed opens it (the log it still has on disk, or an empty one).
    pub(crate) fn learn(&mut self, id: i32, version: u64, record: PartitionRecord) {
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
        let directory = n.directory();
        let (version, record) = if !n.hosted {
            n.forget();
            n.known_version = version;
            n.hosted = true;
            let had_log = n.dir;
            n.dir = true;
            let (end, h) = (n.end(), n.history.entries().to_vec());
            self.trace(|| format!("node {id} opens its replica: log end {end}, history {h:?}"));
            self.open_replica(id, had_log)
        } else if record.directories.get(&id) != Some(&directory) {
            // The record names no directory for its replica (re-added before it learned
            // it was removed), or still the disk it lost: it records its own (the agent
            // does at every record it applies).
            self.open_replica(id, true)
        } else {
            (version, record)
        };
        if !record.replicas.contains(&id) {
            // Moved elsewhere before it opened.
            self.node_mut(id).known_version = version;
            self.delete_replica(id);
            return;
        }
        let n = self.node_mut(id);
        n.known_version = n.known_version.max(version);
        n.known_record = record.clone();
        let n = self.node_mut(id);
        let replicas_before = n.replica.leader().map(|l| l.replicas.clone());
        let transition = n.replica.apply(&record, n.end(), now);
        match transition {
            Transition::None => {
                let after = n.replica.leader().map(|l| l.replicas.clone());
                if after != replicas_before {
                    self.trace(|| format!("node {id} leads replicas {:?} now", record.replicas));
                }
            }
            Transition::Leads { deposed, .. } => {
                // Elected again while leading, the agent keeps waiting on what it
                // appended in the earlier epochs (`Replica::ack` decides on them).
                let n = self.node_mut(id);
                let acks = match std::mem::replace(&mut n.duty, Duty::Idle) {
                    Duty::Leader(l) if deposed.is_some() => l.acks,
                    _ => Vec::new(),
                };
                let last_hw = n.replica.high_watermark();
                n.duty = Duty::Leader(Box::new(Leadership {
                    acks,
                    isr_request: None,
                    last_hw,
                }));
                self.stats.leaderships += 1;
                self.trace(|| format!("node {id} leads: {record:?}"));
                self.settle(id);
            }
            Transition::Follows { leader, epoch, .. } => {
                if leader >= 0 {
                    self.fail_acks(id, "deposed");
                    self.node_mut(id).duty = Duty::Follower(Following {
                        cycle: Follower::new(leader, epoch),
                        request: None,
                        next_send: now,
                    });
                    self.trace(|| format!("node {id} follows: {record:?}"));
                } else {
                    self.fail_acks(id, "partition has no leader");
                    self.node_mut(id).duty = Duty::Idle;
                    self.trace(|| format!("node {id} idles: {record:?}"));
                }
            }
        }
    }

    /// The node is no longer listed: it stops leading or following and deletes the log.
    pub(crate) fn delete_replica(&mut self, id: i32) {
        self.fail_acks(id, "replica moved elsewhere");
        let n = self.node_mut(id);
        let known = n.known_version;
        n.log.clear();
        n.history = EpochHistory::default();
        n.forget();
        n.known_version = known;
        n.dir = false;
        self.stats.deleted += 1;
        self.trace(|| format!("node {id} deletes its replica"));
    }

    /// Ends the node's leadership, if its duty was one: pending acknowledgements fail.
    pub(crate) fn fail_acks(&mut self, id: i32, why: &'static str) {
        let n = self.node_mut(id);
        if !matches!(n.duty, Duty::Leader(_)) {
            return;
        }
        let Duty::Leader(l) = std::mem::replace(&mut n.duty, Duty::Idle) else {
            unreachable!()
        };
        self.trace(|| format!("node {id} stops leading: {why}"));
        for a in l.acks {
            let msg = Msg::ProduceError {
                value: a.value,
                reason: why,
            };
            self.send(Addr::Node(id), Addr::Client, msg, false);
        }
    }

    pub(crate) fn on_produce(&mut self, id: i32, value: u64) {
        let now = self.now;
        let min_insync = self.p.min_insync;
        let n = self.node_mut(id);
        let lease = n.lease_until > now;
        let offset = n.end();
        let admitted = match (&mut n.duty, n.replica.admit(Some(min_insync))) {
            (Duty::Leader(_), _) if !lease => Err("leader's lease ran out"),
            (Duty::Leader(_), Err(Refusal::NotEnoughReplicas { .. })) => Err("not enough replicas"),
            (Duty::Leader(l), Ok(epoch)) => {
                l.acks.push(PendingAck {
                    value,
                    offset,
                    epoch,
                });
                Ok(epoch)
            }
            _ => Err("not leader"),
        };
        let epoch = match admitted {
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

    pub(crate) fn on_fetch(&mut self, id: i32, follower: i32, rid: u64, epoch: i32, offset: i64) {
        let now = self.now;
        let cap = self.rng.between(1, self.p.max_batches);
        let n = self.node_mut(id);
        let end = n.end();
        let result = match n
            .replica
            .on_replica_fetch(follower, epoch, offset, end, now)
        {
            Ok(_) => {
                let upto = end.min(offset + cap);
                let batches = n.log[offset as usize..upto as usize].to_vec();
                Ok((batches, n.replica.high_watermark()))
            }
            Err(Refusal::BeyondLogEnd { .. }) => Err("offset out of range"),
            Err(_) => Err("not leader of this epoch"),
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
    pub(crate) fn take_request(&mut self, id: i32, rid: u64) -> bool {
        match &mut self.node_mut(id).duty {
            Duty::Follower(f) if f.request.is_some_and(|(r, _)| r == rid) => {
                f.request = None;
                true
            }
            _ => false,
        }
    }

    /// After a refusal: the cycle starts over, a little later.
    pub(crate) fn backoff(&mut self, id: i32) {
        let at = self.now + 2;
        if let Duty::Follower(f) = &mut self.node_mut(id).duty {
            f.cycle.restart();
            f.next_send = at;
        }
    }

    pub(crate) fn on_fetch_response(
        &mut self,
        id: i32,
        rid: u64,
        result: Result<(Vec<Entry>, i64), &'static str>,
    ) {
        if !self.take_request(id, rid) {
            return;
        }
        let n = self.node_mut(id);
        let before = n.end();
        let Duty::Follower(f) = &mut n.duty else {
            unreachable!("took a follower's request")
        };
        let epoch = f.cycle.epoch;
        let (answer, batches) = match result {
            Ok((batches, high_watermark)) => (FetchAnswer::Batches { high_watermark }, batches),
            Err(_) => (FetchAnswer::Refused, Vec::new()),
        };
        let leader_hw = match f.cycle.on_fetch_answer(answer, before) {
            Step::Append { high_watermark } => high_watermark,
            Step::Retry => {
                self.backoff(id);
                return;
            }
            Step::ResetTo(at) => {
                self.violation(format!(
                    "[2] node {id} told to start over at {at}: no retention here"
                ));
                return;
            }
        };
        if n.replica.may_copy(epoch).is_err() {
            self.violation(format!(
                "[2] node {id} copies in e{epoch}, which it no longer follows"
            ));
            return;
        }
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
        let end = n.end();
        n.replica.copied(before, 0, end, Some(leader_hw));
    }

    pub(crate) fn on_epoch_answer(
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
        let hw = n.replica.high_watermark();
        let before = n.history.entries().to_vec();
        let Duty::Follower(f) = &mut n.duty else {
            unreachable!("took a follower's request")
        };
        let (leader, epoch) = (f.cycle.leader, f.cycle.epoch);
        let Truncation { to: cut, done } = f.cycle.on_epoch_answer(&n.history, 0, end, answer);
        if !done && cut >= end {
            self.violation(format!(
                "[2] node {id}: divergence asks again without cutting anything ({answer:?})"
            ));
            return;
        }
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
        if cut < end {
            let n = self.node_mut(id);
            n.log.truncate(cut as usize);
            n.history.truncate_to(cut);
            n.replica.copied(end, 0, cut, None);
            self.stats.truncations += 1;
            self.stats.truncated_records += (end - cut) as u64;
        }
        self.trace(|| {
            format!("node {id} cuts {end} -> {cut} (history {before:?}, answer {answer:?})")
        });
        self.check_history(id);
        if done {
            self.check_cut(id, leader, epoch, &before, answer);
        }
    }

    pub(crate) fn on_isr_answer(
        &mut self,
        id: i32,
        rid: u64,
        committed: Option<Vec<i32>>,
        version: u64,
        record: PartitionRecord,
    ) {
        let n = self.node_mut(id);
        let Duty::Leader(l) = &mut n.duty else {
            return;
        };
        if l.isr_request != Some(rid) {
            return;
        }
        l.isr_request = None;
        let refused = committed.is_none();
        let epoch = n.replica.epoch();
        n.replica.on_isr_result(epoch, committed);
        self.settle(id);
        if refused {
            // The record moved on: this node was deposed.
            self.learn(id, version, record);
        }
    }

    /// Acknowledges (or fails) the pending produce requests the watermark now covers
    /// ([`Replica::ack`]), and checks the watermark did not fall.
    pub(crate) fn settle(&mut self, id: i32) {
        let min_insync = self.p.min_insync;
        let n = self.node_mut(id);
        let Duty::Leader(l) = &mut n.duty else {
            return;
        };
        let hw = n.replica.high_watermark();
        let epoch = n.replica.epoch();
        let end = n.log.len() as i64;
        let fell = (hw < l.last_hw).then_some(l.last_hw);
        l.last_hw = l.last_hw.max(hw);
        let mut done = Vec::new();
        let mut pending = Vec::new();
        for a in std::mem::take(&mut l.acks) {
            match n.replica.ack(a.epoch, a.offset + 1, min_insync) {
                Ack::Pending => pending.push(a),
                decision => done.push((a, decision)),
            }
        }
        l.acks = pending;
        if let Some(last) = fell {
            self.violation(format!(
                "[4] node {id} e{epoch}: watermark fell {last} -> {hw}"
            ));
        }
        if hw > end {
            self.violation(format!(
                "[4] node {id} e{epoch}: watermark {hw} beyond its log end {end}"
            ));
            return;
        }
        for (a, decision) in done {
            if decision != Ack::Committed {
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
            self.acked.push(Acked {
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
}
