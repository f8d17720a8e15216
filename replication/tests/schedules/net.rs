//! The network: addresses, messages, and their delivery (late, reordered, dropped,
//! lost to a crash).

use crate::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Addr {
    Node(i32),
    Meta,
    Client,
}

#[derive(Debug, Clone)]
pub(crate) enum Msg {
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

pub(crate) struct Envelope {
    pub(crate) at: i64,
    pub(crate) seq: u64,
    pub(crate) from: Addr,
    pub(crate) to: Addr,
    /// The incarnation of the destination node when sent: a restart breaks connections.
    pub(crate) incarnation: u32,
    pub(crate) msg: Msg,
}

impl Sim {
    // ----- network -----

    pub(crate) fn send(&mut self, from: Addr, to: Addr, msg: Msg, reliable: bool) {
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
    pub(crate) fn deliver(&mut self) {
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
    pub(crate) fn client_receive(&mut self, msg: Msg) {
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
}
