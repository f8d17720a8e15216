//! Where replicas go as agents come and go, without an operator: the controller's
//! self-healing and balancing, planned here over the partition records and the agents,
//! carried out by the controller as reassignments (KIP-455: a new replica copies first;
//! the one it replaces leaves only once the new one is in sync, [`crate::reassign`] and
//! [`crate::finish_reassignment`]).
//!
//! - **Replacement.** A replica whose agent has been gone (its lease ended, or it left)
//!   for longer than the replacement delay, or whose agent is being drained, is replaced
//!   by one on a live agent: another rack than the partition's other replicas where
//!   there is one, then the agent with the fewest replicas. One replica per partition at
//!   a time; a partition whose only in-sync copies are on the gone agent waits for it.
//! - **Balance.** Once every partition is fully in sync and nothing moves, replicas go
//!   from the agent with the most to the one with the fewest while they differ by more
//!   than one (never lowering how many racks a partition spans), and preferred
//!   leaderships (the first replica) the same way, by reordering a partition's replicas
//!   (no data moves; preferred-leader election then hands leadership over).
//! - **Bound.** At most `max_moves` partitions are being moved at once, cluster-wide.

use std::collections::{BTreeMap, BTreeSet};

use strata_core::PartitionRecord;

/// One agent as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedAgent {
    pub rack: Option<String>,
    pub live: bool,
    pub draining: bool,
    /// Since when it has been gone (wall-clock ms), if it is not live.
    pub gone_since_ms: Option<i64>,
}

impl PlacedAgent {
    /// It may take new replicas and preferred leaderships.
    fn takes_replicas(&self) -> bool {
        self.live && !self.draining
    }
}

/// One partition, by topic.
#[derive(Debug, Clone, Copy)]
pub struct Placed<'a> {
    pub topic: &'a str,
    pub record: &'a PartitionRecord,
}

/// How the planner may move replicas.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// How long an agent is gone before its replicas are replaced.
    pub replacement_delay_ms: i64,
    /// Partitions being moved at once, at most.
    pub max_moves: usize,
    /// Whether to balance replicas and preferred leaderships over the agents.
    pub balance: bool,
}

/// Why a partition moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The replica on agent `gone`, gone for longer than the delay, is replaced.
    Replace { gone: i32 },
    /// The replica on agent `from`, being drained, is replaced.
    Drain { from: i32 },
    /// A replica moves from the agent with the most (`from`) to the one with the fewest.
    Balance { from: i32 },
    /// Agent `to` becomes the preferred leader (the replicas are only reordered).
    Lead { to: i32 },
}

/// A reassignment to carry out: `target` replaces `replicas` (as they were planned on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub topic: String,
    pub index: u32,
    pub replicas: Vec<i32>,
    pub target: Vec<i32>,
    pub why: Why,
}

/// A replica of a gone agent that will be replaced once the delay has passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub topic: String,
    pub index: u32,
    pub replica: i32,
    pub due_ms: i64,
}

/// What the planner decided in one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub moves: Vec<Move>,
    pub pending: Vec<Pending>,
    /// Partitions being moved before this pass.
    pub in_flight: usize,
}

fn moving(r: &PartitionRecord) -> bool {
    !r.adding.is_empty() || !r.removing.is_empty()
}

/// Plans one pass (see the module docs) at `now_ms`. `agents`: every agent the metastore
/// knows of, by node id (a replica's node id missing there counts as gone since ever).
pub fn plan(
    partitions: &[Placed<'_>],
    agents: &BTreeMap<i32, PlacedAgent>,
    policy: &Policy,
    now_ms: i64,
) -> Plan {
    let mut plan = Plan {
        in_flight: partitions.iter().filter(|p| moving(p.record)).count(),
        ..Plan::default()
    };
    let mut budget = policy.max_moves.saturating_sub(plan.in_flight);
    let takers: Vec<i32> = agents
        .iter()
        .filter(|(_, a)| a.takes_replicas())
        .map(|(&id, _)| id)
        .collect();
    let mut load = Load::new(partitions, &takers);
    let mut moved: BTreeSet<(String, u32)> = BTreeSet::new();

    for p in partitions {
        let r = p.record;
        if moving(r) {
            continue;
        }
        let out = r
            .replicas
            .iter()
            .copied()
            .find_map(|n| match agents.get(&n) {
                Some(a) if a.live && a.draining => Some((n, Why::Drain { from: n }, 0)),
                Some(a) if a.live => None,
                Some(a) => {
                    let due = a.gone_since_ms.unwrap_or(i64::MIN / 2) + policy.replacement_delay_ms;
                    Some((n, Why::Replace { gone: n }, due))
                }
                None => Some((n, Why::Replace { gone: n }, i64::MIN)),
            });
        let Some((gone, why, due)) = out else {
            continue;
        };
        if due > now_ms {
            plan.pending.push(Pending {
                topic: p.topic.to_string(),
                index: r.index,
                replica: gone,
                due_ms: due,
            });
            continue;
        }
        // A gone agent holding the only in-sync copies: wait for it (or an operator). A
        // drained one is live: its replica is copied before it goes.
        if matches!(why, Why::Replace { .. }) && !r.isr.iter().any(|&i| i != gone) {
            continue;
        }
        if budget == 0 {
            continue;
        }
        let Some(to) = replacement(r, gone, agents, &load) else {
            continue;
        };
        plan.moves
            .push(swap(p, gone, to, why, &mut load, &mut moved));
        budget -= 1;
    }

    let settled = plan.in_flight == 0
        && plan.moves.is_empty()
        && partitions
            .iter()
            .all(|p| p.record.isr.len() == p.record.replicas.len() && p.record.leader >= 0);
    if !policy.balance || !settled || takers.len() < 2 {
        return plan;
    }
    // Replicas: from the most loaded agent to the least, while they differ by more than one.
    while budget > 0 {
        let Some((from, to)) = load.extremes(|l| l.replicas) else {
            break;
        };
        let movable = |p: &&Placed<'_>| {
            let r = p.record;
            r.replicas.contains(&from)
                && !r.replicas.contains(&to)
                && !moved.contains(&(p.topic.to_string(), r.index))
                && racks_after(r, from, to, agents) >= racks(&r.replicas, agents)
        };
        // A partition it is not the preferred leader of first: no leadership moves.
        let candidate = partitions
            .iter()
            .filter(movable)
            .find(|p| p.record.replicas.first() != Some(&from))
            .or_else(|| partitions.iter().find(movable));
        let Some(p) = candidate else {
            break;
        };
        let why = Why::Balance { from };
        plan.moves
            .push(swap(p, from, to, why, &mut load, &mut moved));
        budget -= 1;
    }
    // Preferred leaderships: reorder a partition's replicas, which moves no data.
    while let Some((from, to)) = load.extremes(|l| l.preferred) {
        let candidate = partitions.iter().find(|p| {
            let r = p.record;
            r.replicas.first() == Some(&from)
                && r.replicas.contains(&to)
                && r.isr.contains(&to)
                && !moved.contains(&(p.topic.to_string(), r.index))
        });
        let Some(p) = candidate else {
            break;
        };
        let r = p.record;
        let mut target = vec![to];
        target.extend(r.replicas.iter().copied().filter(|&n| n != to));
        load.led(from, to);
        moved.insert((p.topic.to_string(), r.index));
        plan.moves.push(Move {
            topic: p.topic.to_string(),
            index: r.index,
            replicas: r.replicas.clone(),
            target,
            why: Why::Lead { to },
        });
    }
    plan
}

/// The move of `p`'s replica on `from` to `to` (at the same place in the list), counted.
fn swap(
    p: &Placed<'_>,
    from: i32,
    to: i32,
    why: Why,
    load: &mut Load,
    moved: &mut BTreeSet<(String, u32)>,
) -> Move {
    let r = p.record;
    load.moved(from, to, r.replicas.first() == Some(&from));
    moved.insert((p.topic.to_string(), r.index));
    Move {
        topic: p.topic.to_string(),
        index: r.index,
        replicas: r.replicas.clone(),
        target: r
            .replicas
            .iter()
            .map(|&n| if n == from { to } else { n })
            .collect(),
        why,
    }
}

/// Replicas and preferred leaderships per agent that takes replicas.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    replicas: usize,
    preferred: usize,
}

struct Load {
    counts: BTreeMap<i32, Counts>,
}

impl Load {
    fn new(partitions: &[Placed<'_>], takers: &[i32]) -> Load {
        let mut counts: BTreeMap<i32, Counts> =
            takers.iter().map(|&t| (t, Counts::default())).collect();
        for p in partitions {
            for (i, n) in p.record.replicas.iter().enumerate() {
                if let Some(c) = counts.get_mut(n) {
                    c.replicas += 1;
                    if i == 0 {
                        c.preferred += 1;
                    }
                }
            }
        }
        Load { counts }
    }

    fn replicas(&self, n: i32) -> usize {
        self.counts.get(&n).map_or(usize::MAX, |c| c.replicas)
    }

    fn moved(&mut self, from: i32, to: i32, preferred: bool) {
        if let Some(c) = self.counts.get_mut(&from) {
            c.replicas = c.replicas.saturating_sub(1);
            if preferred {
                c.preferred = c.preferred.saturating_sub(1);
            }
        }
        if let Some(c) = self.counts.get_mut(&to) {
            c.replicas += 1;
            if preferred {
                c.preferred += 1;
            }
        }
    }

    fn led(&mut self, from: i32, to: i32) {
        if let Some(c) = self.counts.get_mut(&from) {
            c.preferred = c.preferred.saturating_sub(1);
        }
        if let Some(c) = self.counts.get_mut(&to) {
            c.preferred += 1;
        }
    }

    /// The agents with the most and the fewest of `of`, if they differ by more than one
    /// (the lowest node id first among equals).
    fn extremes(&self, of: impl Fn(&Counts) -> usize) -> Option<(i32, i32)> {
        let most = self
            .counts
            .iter()
            .max_by_key(|(id, c)| (of(c), std::cmp::Reverse(**id)))?;
        let fewest = self.counts.iter().min_by_key(|(id, c)| (of(c), **id))?;
        (of(most.1) > of(fewest.1) + 1).then_some((*most.0, *fewest.0))
    }
}

/// How many racks `replicas` span (agents without a rack form one).
fn racks(replicas: &[i32], agents: &BTreeMap<i32, PlacedAgent>) -> usize {
    replicas
        .iter()
        .map(|n| agents.get(n).and_then(|a| a.rack.clone()))
        .collect::<BTreeSet<_>>()
        .len()
}

fn racks_after(
    r: &PartitionRecord,
    from: i32,
    to: i32,
    agents: &BTreeMap<i32, PlacedAgent>,
) -> usize {
    let after: Vec<i32> = r
        .replicas
        .iter()
        .map(|&n| if n == from { to } else { n })
        .collect();
    racks(&after, agents)
}

/// The agent to take the replica of `r` on agent `gone`: one that takes replicas and
/// has none of `r`, on a rack none of `r`'s other replicas is on where possible, then
/// the one with the fewest replicas, then the lowest node id.
fn replacement(
    r: &PartitionRecord,
    gone: i32,
    agents: &BTreeMap<i32, PlacedAgent>,
    load: &Load,
) -> Option<i32> {
    let used: BTreeSet<Option<String>> = r
        .replicas
        .iter()
        .filter(|&&n| n != gone)
        .map(|n| agents.get(n).and_then(|a| a.rack.clone()))
        .collect();
    agents
        .iter()
        .filter(|(id, a)| a.takes_replicas() && !r.replicas.contains(id))
        .min_by_key(|(id, a)| (used.contains(&a.rack), load.replicas(**id), **id))
        .map(|(&id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::record;

    fn agent(rack: Option<&str>) -> PlacedAgent {
        PlacedAgent {
            rack: rack.map(str::to_string),
            live: true,
            draining: false,
            gone_since_ms: None,
        }
    }

    fn gone(since: i64) -> PlacedAgent {
        PlacedAgent {
            live: false,
            gone_since_ms: Some(since),
            ..agent(None)
        }
    }

    const POLICY: Policy = Policy {
        replacement_delay_ms: 1000,
        max_moves: 10,
        balance: true,
    };

    #[test]
    fn a_gone_agents_replicas_are_replaced_after_the_delay_on_other_racks() {
        let records = [
            record(1, 0, &[1, 2, 3], &[1, 2]),
            record(2, 0, &[2, 3, 4], &[2, 4]),
            record(2, 0, &[2, 4, 5], &[2, 4, 5]),
        ];
        let parts: Vec<Placed> = records
            .iter()
            .map(|r| Placed {
                topic: "t",
                record: r,
            })
            .collect();
        let mut agents = BTreeMap::from([
            (1, agent(Some("a"))),
            (2, agent(Some("b"))),
            (3, gone(5_000)),
            (4, agent(Some("a"))),
            (5, agent(Some("c"))),
        ]);
        let early = plan(&parts, &agents, &POLICY, 5_500);
        assert!(early.moves.is_empty());
        assert_eq!(early.pending.len(), 2);
        assert_eq!(early.pending[0].due_ms, 6_000);
        let due = plan(&parts, &agents, &POLICY, 6_000);
        assert_eq!(due.moves.len(), 2, "{due:?}");
        // [1, 2, 3] spans racks a and b: the replacement goes to c (agent 5).
        assert_eq!(due.moves[0].target, vec![1, 2, 5]);
        assert_eq!(due.moves[0].why, Why::Replace { gone: 3 });
        // [2, 3, 4] spans b and a: c again (5 is not in it yet).
        assert_eq!(due.moves[1].target, vec![2, 5, 4]);
        // Draining agent 4: replaced at once, by an agent that takes replicas.
        agents.insert(
            4,
            PlacedAgent {
                draining: true,
                ..agent(Some("a"))
            },
        );
        let drained = plan(&parts[2..], &agents, &POLICY, 0);
        assert_eq!(drained.moves.len(), 1);
        assert_eq!(drained.moves[0].why, Why::Drain { from: 4 });
        assert!(!drained.moves[0].target.contains(&4));
        assert!(
            !drained.moves[0].target.contains(&3),
            "never to a gone agent"
        );
        // A partition with one replica, on the drained agent, moves too (it is live).
        let single = record(4, 0, &[4], &[4]);
        let one = [Placed {
            topic: "s",
            record: &single,
        }];
        let drained = plan(&one, &agents, &POLICY, 0);
        assert_eq!(drained.moves.len(), 1, "{drained:?}");
        assert_eq!(drained.moves[0].target.len(), 1);
        assert_ne!(drained.moves[0].target[0], 4);
    }

    #[test]
    fn moves_are_bounded_and_only_copies_in_sync_elsewhere_are_replaced() {
        let records: Vec<PartitionRecord> = (0..20)
            .map(|i| PartitionRecord {
                index: i,
                ..record(1, 0, &[1, 2, 3], &[1, 2, 3])
            })
            .collect();
        let mut parts: Vec<Placed> = records
            .iter()
            .map(|r| Placed {
                topic: "t",
                record: r,
            })
            .collect();
        let only = record(3, 0, &[3, 1, 2], &[3]);
        parts.push(Placed {
            topic: "u",
            record: &only,
        });
        let agents = BTreeMap::from([
            (1, agent(None)),
            (2, agent(None)),
            (3, gone(0)),
            (4, agent(None)),
        ]);
        let p = plan(
            &parts,
            &agents,
            &Policy {
                max_moves: 5,
                ..POLICY
            },
            10_000,
        );
        assert_eq!(p.moves.len(), 5);
        assert!(
            p.moves
                .iter()
                .all(|m| m.topic == "t" && m.target.contains(&4))
        );
        // With moves in flight, only what is left of the budget.
        let moving: Vec<PartitionRecord> = records
            .iter()
            .take(3)
            .map(|r| PartitionRecord {
                adding: vec![4],
                removing: vec![3],
                ..r.clone()
            })
            .collect();
        let mut parts2: Vec<Placed> = moving
            .iter()
            .map(|r| Placed {
                topic: "t",
                record: r,
            })
            .collect();
        parts2.extend(parts[3..].iter().copied());
        let p2 = plan(
            &parts2,
            &agents,
            &Policy {
                max_moves: 5,
                ..POLICY
            },
            10_000,
        );
        assert_eq!((p2.in_flight, p2.moves.len()), (3, 2));
    }

    #[test]
    fn a_new_agent_gets_replicas_and_preferred_leaderships_until_even() {
        // 12 partitions on 3 agents (36 replicas, 12 leaderships); agents 4 and 5 join.
        let records: Vec<PartitionRecord> = (0..12)
            .map(|i| {
                let order = [[1, 2, 3], [2, 3, 1], [3, 1, 2]][i % 3];
                PartitionRecord {
                    index: i as u32,
                    ..record(order[0], 0, &order, &order)
                }
            })
            .collect();
        let mut current = records.clone();
        let agents: BTreeMap<i32, PlacedAgent> = (1..=5).map(|n| (n, agent(None))).collect();
        // Apply plans (each move completing at once) until nothing is left to do.
        for _ in 0..50 {
            let parts: Vec<Placed> = current
                .iter()
                .map(|r| Placed {
                    topic: "t",
                    record: r,
                })
                .collect();
            let p = plan(
                &parts,
                &agents,
                &Policy {
                    max_moves: 3,
                    ..POLICY
                },
                0,
            );
            if p.moves.is_empty() {
                break;
            }
            for m in p.moves {
                let r = &mut current[m.index as usize];
                r.replicas = m.target.clone();
                r.isr = m.target.clone();
                r.leader = m.target[0];
            }
        }
        let count = |n: i32| current.iter().filter(|r| r.replicas.contains(&n)).count();
        let lead = |n: i32| current.iter().filter(|r| r.replicas[0] == n).count();
        for n in 1..=5 {
            assert!(
                (7..=8).contains(&count(n)),
                "agent {n}: {} replicas",
                count(n)
            );
            assert!(
                (2..=3).contains(&lead(n)),
                "agent {n}: {} preferred",
                lead(n)
            );
        }
        for r in &current {
            let mut d = r.replicas.clone();
            d.sort_unstable();
            d.dedup();
            assert_eq!(d.len(), 3, "distinct replicas {r:?}");
        }
    }
}
