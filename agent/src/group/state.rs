//! One consumer group under the classic rebalance protocol, as a plain state machine.
//!
//! It owns membership, generations, the chosen protocol, the leader and assignments, and
//! protects DESIGN.md invariant 3 for groups: only a current member of the current
//! generation may sync or commit. It does no I/O and reads no clock: every call takes
//! `now_ms`, JoinGroup and SyncGroup calls that must wait are parked under a [`Waiter`]
//! id, and every call returns the [`Action`]s (delayed responses) it released. The
//! coordinator turns those into replies on the right connections.
//!
//! States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and back to
//! PreparingRebalance whenever membership or subscriptions change. Dead is never entered
//! here: a deleted group is dropped by the coordinator.

use super::GroupError;
use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

/// Identifies a parked JoinGroup or SyncGroup request.
pub type Waiter = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// Broker-wide limits and delays (Kafka's `group.*` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupConfig {
    pub initial_rebalance_delay_ms: i64,
    pub min_session_timeout_ms: i64,
    pub max_session_timeout_ms: i64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 3000,
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i64,
    pub rebalance_timeout_ms: i64,
    pub protocol_type: String,
    /// `(name, metadata)` in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub last_heartbeat_ms: i64,
    join_waiter: Option<Waiter>,
    sync_waiter: Option<Waiter>,
}

impl Member {
    /// The metadata this member sent for `protocol`.
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn is_parked(&self) -> bool {
        self.join_waiter.is_some() || self.sync_waiter.is_some()
    }
}

/// A JoinGroup request, as the state machine needs it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i64,
    pub rebalance_timeout_ms: i64,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// KIP-394 (JoinGroup v4+): a new member first gets its id with MEMBER_ID_REQUIRED.
    pub require_known_member_id: bool,
    /// A fresh member id, used if this join needs one.
    pub fresh_member_id: String,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinResponse {
    pub error: Option<GroupError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only for the leader: `(member id, group instance id, metadata)`.
    pub members: Vec<(String, Option<String>, Bytes)>,
    /// The leader must not compute a new assignment (a static leader rejoined).
    pub skip_assignment: bool,
}

impl JoinResponse {
    pub(crate) fn error(error: GroupError, member_id: &str) -> JoinResponse {
        JoinResponse {
            error: Some(error),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncResponse {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResponse {
    pub(crate) fn error(error: GroupError) -> SyncResponse {
        SyncResponse {
            error: Some(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// A response released by a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Join(Waiter, JoinResponse),
    Sync(Waiter, SyncResponse),
}

/// A member to remove with LeaveGroup.
#[derive(Debug, Clone)]
pub struct Leaving {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Group {
    pub group_id: String,
    pub state: GroupState,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    config: GroupConfig,
    /// Members by id, in join order (the order picks a new leader).
    members: BTreeMap<u64, Member>,
    order_of: HashMap<String, u64>,
    next_order: u64,
    /// group.instance.id -> member id.
    static_members: HashMap<String, String>,
    /// KIP-394 ids handed out and not yet used, with when they lapse.
    pending_members: HashMap<String, i64>,
    /// When the running rebalance completes regardless of stragglers.
    rebalance_deadline_ms: i64,
    /// Before this the first rebalance of an empty group does not complete.
    initial_delay_until_ms: i64,
    /// When the running (or last) rebalance began, for its duration in `/metrics`.
    rebalance_started_ms: i64,
}

type Outcome = Vec<Action>;

impl Group {
    pub fn new(group_id: &str, config: GroupConfig) -> Group {
        Group {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            config,
            members: BTreeMap::new(),
            order_of: HashMap::new(),
            next_order: 0,
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            rebalance_deadline_ms: 0,
            initial_delay_until_ms: 0,
            rebalance_started_ms: 0,
        }
    }

    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    pub fn member(&self, member_id: &str) -> Option<&Member> {
        self.order_of
            .get(member_id)
            .and_then(|o| self.members.get(o))
    }

    fn member_mut(&mut self, member_id: &str) -> Option<&mut Member> {
        let order = *self.order_of.get(member_id)?;
        self.members.get_mut(&order)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending_members.is_empty()
    }

    fn add_member(&mut self, member: Member) {
        let order = self.next_order;
        self.next_order += 1;
        if let Some(iid) = &member.group_instance_id {
            self.static_members
                .insert(iid.clone(), member.member_id.clone());
        }
        self.order_of.insert(member.member_id.clone(), order);
        self.members.insert(order, member);
    }

    fn take_member(&mut self, member_id: &str) -> Option<Member> {
        let order = self.order_of.remove(member_id)?;
        let m = self.members.remove(&order)?;
        if let Some(iid) = &m.group_instance_id
            && self.static_members.get(iid) == Some(&m.member_id)
        {
            self.static_members.remove(iid);
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = None;
        }
        Some(m)
    }

    /// FENCED_INSTANCE_ID when `instance` now belongs to another member id.
    fn check_fenced(&self, member_id: &str, instance: Option<&str>) -> Result<(), GroupError> {
        if let Some(iid) = instance
            && let Some(current) = self.static_members.get(iid)
            && current != member_id
        {
            return Err(GroupError::FencedInstanceId);
        }
        Ok(())
    }

    /// The protocols every member supports, the first choice by votes.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == *n))
            })
            .collect();
        let mut votes: Vec<(usize, &String)> = candidates.iter().map(|c| (0, *c)).collect();
        for m in self.members.values() {
            if let Some((p, _)) = m.protocols.iter().find(|(p, _)| candidates.contains(&p))
                && let Some(v) = votes.iter_mut().find(|(_, c)| *c == p)
            {
                v.0 += 1;
            }
        }
        // Most votes; ties go to the earlier candidate.
        let best = votes.iter().map(|v| v.0).max()?;
        votes
            .into_iter()
            .find(|v| v.0 == best)
            .map(|(_, c)| c.clone())
    }

    fn supports(&self, req: &JoinRequest) -> bool {
        if self.members.is_empty() {
            return true;
        }
        if self
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != req.protocol_type)
            || self
                .members
                .values()
                .any(|m| m.protocol_type != req.protocol_type)
        {
            return false;
        }
        // Some protocol must be supported by every member and the newcomer.
        req.protocols.iter().any(|(p, _)| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(q, _)| q == p))
        })
    }

    fn current_join_response(&self, member_id: &str, skip_assignment: bool) -> JoinResponse {
        let is_leader = self.leader_id.as_deref() == Some(member_id);
        JoinResponse {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if is_leader {
                self.member_list()
            } else {
                Vec::new()
            },
            skip_assignment: is_leader && skip_assignment,
        }
    }

    fn member_list(&self) -> Vec<(String, Option<String>, Bytes)> {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        self.members
            .values()
            .map(|m| {
                (
                    m.member_id.clone(),
                    m.group_instance_id.clone(),
                    m.metadata(&protocol),
                )
            })
            .collect()
    }

    /// Handles a JoinGroup. The response comes back in the returned actions, now or
    /// from a later call, under `waiter`.
    pub fn join(&mut self, now_ms: i64, waiter: Waiter, req: JoinRequest) -> Outcome {
        tracing::debug!(group = %self.group_id, member = %req.member_id, state = self.state.name(), "join");
        let reply = |r: JoinResponse| vec![Action::Join(waiter, r)];
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return reply(JoinResponse::error(
                GroupError::InvalidSessionTimeout,
                &req.member_id,
            ));
        }
        if req.protocol_type.is_empty() || req.protocols.is_empty() || !self.supports(&req) {
            return reply(JoinResponse::error(
                GroupError::InconsistentGroupProtocol,
                &req.member_id,
            ));
        }
        if req.member_id.is_empty() {
            return self.join_unknown(now_ms, waiter, req);
        }
        if self.pending_members.remove(&req.member_id).is_some() {
            return self.add_and_rebalance(now_ms, waiter, req.member_id.clone(), req);
        }
        if let Err(e) = self.check_fenced(&req.member_id, req.group_instance_id.as_deref()) {
            return reply(JoinResponse::error(e, &req.member_id));
        }
        let Some(member) = self.member(&req.member_id) else {
            return reply(JoinResponse::error(
                GroupError::UnknownMemberId,
                &req.member_id,
            ));
        };
        let unchanged =
            member.protocols == req.protocols && member.protocol_type == req.protocol_type;
        let is_leader = self.leader_id.as_deref() == Some(req.member_id.as_str());
        match self.state {
            GroupState::CompletingRebalance if unchanged => {
                // It joined this generation already and lost the response.
                reply(self.current_join_response(&req.member_id, false))
            }
            GroupState::Stable if unchanged && !is_leader => {
                reply(self.current_join_response(&req.member_id, false))
            }
            _ => {
                let member_id = req.member_id.clone();
                let mut out = Vec::new();
                if let Some(m) = self.member_mut(&member_id) {
                    if let Some(old) = m.join_waiter.take() {
                        // A newer join from the same member replaces the parked one.
                        out.push(Action::Join(
                            old,
                            JoinResponse::error(GroupError::UnknownMemberId, &member_id),
                        ));
                    }
                    m.protocols = req.protocols;
                    m.protocol_type = req.protocol_type;
                    m.session_timeout_ms = req.session_timeout_ms;
                    m.rebalance_timeout_ms = req.rebalance_timeout_ms;
                    m.client_id = req.client_id;
                    m.client_host = req.client_host;
                    m.join_waiter = Some(waiter);
                    m.last_heartbeat_ms = now_ms;
                }
                out.extend(self.prepare_rebalance(now_ms));
                out.extend(self.try_complete_join(now_ms));
                out
            }
        }
    }

    fn join_unknown(&mut self, now_ms: i64, waiter: Waiter, req: JoinRequest) -> Outcome {
        if let Some(iid) = req.group_instance_id.clone() {
            if let Some(old_id) = self.static_members.get(&iid).cloned() {
                return self.static_rejoin(now_ms, waiter, old_id, req);
            }
            let id = req.fresh_member_id.clone();
            return self.add_and_rebalance(now_ms, waiter, id, req);
        }
        if req.require_known_member_id {
            let id = req.fresh_member_id.clone();
            self.pending_members
                .insert(id.clone(), now_ms + req.session_timeout_ms);
            return vec![Action::Join(
                waiter,
                JoinResponse::error(GroupError::MemberIdRequired, &id),
            )];
        }
        let id = req.fresh_member_id.clone();
        self.add_and_rebalance(now_ms, waiter, id, req)
    }

    /// A static member came back with a new member id: the old id is fenced, and if
    /// nothing else changed the group keeps its generation and assignment (KIP-345).
    fn static_rejoin(
        &mut self,
        now_ms: i64,
        waiter: Waiter,
        old_id: String,
        req: JoinRequest,
    ) -> Outcome {
        let mut out = Vec::new();
        let Some(order) = self.order_of.remove(&old_id) else {
            return self.add_and_rebalance(now_ms, waiter, req.fresh_member_id.clone(), req);
        };
        let new_id = req.fresh_member_id.clone();
        let member = self.members.get_mut(&order).expect("indexed member exists");
        if let Some(w) = member.join_waiter.take() {
            out.push(Action::Join(
                w,
                JoinResponse::error(GroupError::FencedInstanceId, &old_id),
            ));
        }
        if let Some(w) = member.sync_waiter.take() {
            out.push(Action::Sync(
                w,
                SyncResponse::error(GroupError::FencedInstanceId),
            ));
        }
        let unchanged =
            member.protocols == req.protocols && member.protocol_type == req.protocol_type;
        member.member_id = new_id.clone();
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.session_timeout_ms = req.session_timeout_ms;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.last_heartbeat_ms = now_ms;
        self.order_of.insert(new_id.clone(), order);
        if let Some(iid) = &req.group_instance_id {
            self.static_members.insert(iid.clone(), new_id.clone());
        }
        if self.leader_id.as_deref() == Some(old_id.as_str()) {
            self.leader_id = Some(new_id.clone());
        }
        match self.state {
            GroupState::Stable if unchanged => {
                out.push(Action::Join(
                    waiter,
                    self.current_join_response(&new_id, true),
                ));
            }
            _ => {
                if let Some(m) = self.member_mut(&new_id) {
                    m.protocols = req.protocols;
                    m.protocol_type = req.protocol_type;
                    m.join_waiter = Some(waiter);
                }
                out.extend(self.prepare_rebalance(now_ms));
                out.extend(self.try_complete_join(now_ms));
            }
        }
        out
    }

    fn add_and_rebalance(
        &mut self,
        now_ms: i64,
        waiter: Waiter,
        member_id: String,
        req: JoinRequest,
    ) -> Outcome {
        self.add_member(Member {
            member_id,
            group_instance_id: req.group_instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocol_type: req.protocol_type,
            protocols: req.protocols,
            assignment: Bytes::new(),
            last_heartbeat_ms: now_ms,
            join_waiter: Some(waiter),
            sync_waiter: None,
        });
        let mut out = self.prepare_rebalance(now_ms);
        out.extend(self.try_complete_join(now_ms));
        out
    }

    /// Moves to PreparingRebalance (if not there already).
    fn prepare_rebalance(&mut self, now_ms: i64) -> Outcome {
        let mut out = Vec::new();
        if self.state == GroupState::PreparingRebalance {
            return out;
        }
        if self.state == GroupState::CompletingRebalance {
            for m in self.members.values_mut() {
                m.assignment = Bytes::new();
                if let Some(w) = m.sync_waiter.take() {
                    out.push(Action::Sync(
                        w,
                        SyncResponse::error(GroupError::RebalanceInProgress),
                    ));
                }
            }
        }
        let rebalance_timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.initial_delay_until_ms = if self.state == GroupState::Empty {
            now_ms
                + self
                    .config
                    .initial_rebalance_delay_ms
                    .min(rebalance_timeout)
        } else {
            now_ms
        };
        self.rebalance_deadline_ms = now_ms + rebalance_timeout;
        if self.state != GroupState::CompletingRebalance {
            self.rebalance_started_ms = now_ms;
        }
        tracing::info!(
            group = %self.group_id,
            from = self.state.name(),
            generation = self.generation_id,
            members = self.members.len(),
            "preparing to rebalance"
        );
        self.state = GroupState::PreparingRebalance;
        out
    }

    /// Completes the join phase once every member has rejoined (and the initial delay
    /// of a formerly empty group has passed).
    fn try_complete_join(&mut self, now_ms: i64) -> Outcome {
        if self.state != GroupState::PreparingRebalance
            || now_ms < self.initial_delay_until_ms
            || self.members.values().any(|m| m.join_waiter.is_none())
        {
            return Vec::new();
        }
        self.complete_join(now_ms)
    }

    fn complete_join(&mut self, now_ms: i64) -> Outcome {
        // Whoever has not rejoined by now is out.
        let stragglers: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        let mut out = Vec::new();
        for id in stragglers {
            if let Some(m) = self.take_member(&id)
                && let Some(w) = m.sync_waiter
            {
                out.push(Action::Sync(
                    w,
                    SyncResponse::error(GroupError::RebalanceInProgress),
                ));
            }
        }
        self.generation_id += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            return out;
        }
        self.protocol_name = self.select_protocol();
        self.protocol_type = self
            .members
            .values()
            .next()
            .map(|m| m.protocol_type.clone());
        if self
            .leader_id
            .as_ref()
            .is_none_or(|l| !self.order_of.contains_key(l))
        {
            self.leader_id = self.members.values().next().map(|m| m.member_id.clone());
        }
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = self.members.values().map(|m| m.member_id.clone()).collect();
        for id in ids {
            let response = self.current_join_response(&id, false);
            if let Some(m) = self.member_mut(&id) {
                m.last_heartbeat_ms = now_ms;
                if let Some(w) = m.join_waiter.take() {
                    out.push(Action::Join(w, response));
                }
            }
        }
        out
    }

    /// Handles a SyncGroup; the leader's carries the assignment for every member.
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        now_ms: i64,
        waiter: Waiter,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> Outcome {
        let reply = |e: GroupError| vec![Action::Sync(waiter, SyncResponse::error(e))];
        if let Err(e) = self.check_fenced(member_id, group_instance_id) {
            return reply(e);
        }
        if self.member(member_id).is_none() {
            return reply(GroupError::UnknownMemberId);
        }
        if generation_id != self.generation_id {
            return reply(GroupError::IllegalGeneration);
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|n| Some(n) != self.protocol_name.as_deref())
        {
            return reply(GroupError::InconsistentGroupProtocol);
        }
        match self.state {
            GroupState::Empty => reply(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => reply(GroupError::RebalanceInProgress),
            GroupState::Stable => {
                let m = self.member(member_id).expect("checked above");
                vec![Action::Sync(
                    waiter,
                    SyncResponse {
                        error: None,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        assignment: m.assignment.clone(),
                    },
                )]
            }
            GroupState::CompletingRebalance => {
                let mut out = Vec::new();
                if let Some(m) = self.member_mut(member_id) {
                    if let Some(old) = m.sync_waiter.replace(waiter) {
                        out.push(Action::Sync(
                            old,
                            SyncResponse::error(GroupError::UnknownMemberId),
                        ));
                    }
                    m.last_heartbeat_ms = now_ms;
                }
                if self.leader_id.as_deref() == Some(member_id) {
                    let given: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = given.get(&m.member_id).cloned().unwrap_or_default();
                    }
                    self.state = GroupState::Stable;
                    let took_ms = now_ms - self.rebalance_started_ms;
                    crate::metrics::rebalance_completed(took_ms);
                    tracing::info!(
                        group = %self.group_id,
                        generation = self.generation_id,
                        members = self.members.len(),
                        protocol = self.protocol_name.as_deref().unwrap_or(""),
                        took_ms,
                        "rebalance completed"
                    );
                    let (pt, pn) = (self.protocol_type.clone(), self.protocol_name.clone());
                    for m in self.members.values_mut() {
                        if let Some(w) = m.sync_waiter.take() {
                            out.push(Action::Sync(
                                w,
                                SyncResponse {
                                    error: None,
                                    protocol_type: pt.clone(),
                                    protocol_name: pn.clone(),
                                    assignment: m.assignment.clone(),
                                },
                            ));
                        }
                    }
                }
                out
            }
        }
    }

    /// Handles a Heartbeat.
    pub fn heartbeat(
        &mut self,
        now_ms: i64,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        self.check_fenced(member_id, group_instance_id)?;
        let state = self.state;
        let generation = self.generation_id;
        let m = self
            .member_mut(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if generation_id != generation {
            return Err(GroupError::IllegalGeneration);
        }
        m.last_heartbeat_ms = now_ms;
        match state {
            GroupState::Empty => Err(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::CompletingRebalance | GroupState::Stable => Ok(()),
        }
    }

    /// Removes members (LeaveGroup); one result per member, in order.
    pub fn leave(
        &mut self,
        now_ms: i64,
        leaving: &[Leaving],
    ) -> (Vec<Result<(), GroupError>>, Outcome) {
        let mut results = Vec::with_capacity(leaving.len());
        let mut out = Vec::new();
        for l in leaving {
            let id = match &l.group_instance_id {
                Some(iid) => match self.static_members.get(iid) {
                    Some(current) if !l.member_id.is_empty() && *current != l.member_id => {
                        results.push(Err(GroupError::FencedInstanceId));
                        continue;
                    }
                    Some(current) => current.clone(),
                    None => {
                        results.push(Err(GroupError::UnknownMemberId));
                        continue;
                    }
                },
                None => l.member_id.clone(),
            };
            if self.pending_members.remove(&id).is_some() {
                results.push(Ok(()));
                continue;
            }
            match self.remove_member(now_ms, &id) {
                Some(actions) => {
                    out.extend(actions);
                    results.push(Ok(()));
                }
                None => results.push(Err(GroupError::UnknownMemberId)),
            }
        }
        (results, out)
    }

    /// Removes one member and rebalances the rest.
    fn remove_member(&mut self, now_ms: i64, member_id: &str) -> Option<Outcome> {
        let m = self.take_member(member_id)?;
        let mut out = Vec::new();
        if let Some(w) = m.join_waiter {
            out.push(Action::Join(
                w,
                JoinResponse::error(GroupError::UnknownMemberId, member_id),
            ));
        }
        if let Some(w) = m.sync_waiter {
            out.push(Action::Sync(
                w,
                SyncResponse::error(GroupError::UnknownMemberId),
            ));
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                out.extend(self.prepare_rebalance(now_ms));
                out.extend(self.try_complete_join(now_ms));
            }
            GroupState::PreparingRebalance => out.extend(self.try_complete_join(now_ms)),
            GroupState::Empty => {}
        }
        if self.members.is_empty() && self.state == GroupState::PreparingRebalance {
            out.extend(self.complete_join(now_ms));
        }
        Some(out)
    }

    /// Expires members whose session lapsed, unused KIP-394 ids, and rebalances that ran
    /// past their deadline.
    pub fn tick(&mut self, now_ms: i64) -> Outcome {
        self.pending_members
            .retain(|_, deadline| *deadline > now_ms);
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.is_parked() && now_ms > m.last_heartbeat_ms + m.session_timeout_ms)
            .map(|m| m.member_id.clone())
            .collect();
        let mut out = Vec::new();
        for id in expired {
            tracing::info!(group = %self.group_id, member = %id, "member session expired");
            out.extend(self.remove_member(now_ms, &id).unwrap_or_default());
        }
        if self.state == GroupState::PreparingRebalance {
            if now_ms >= self.rebalance_deadline_ms && now_ms >= self.initial_delay_until_ms {
                out.extend(self.complete_join(now_ms));
            } else {
                out.extend(self.try_complete_join(now_ms));
            }
        }
        out
    }

    /// Whether a commit from this member and generation may be stored.
    pub fn validate_commit(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        if generation_id < 0 && member_id.is_empty() && self.members.is_empty() {
            return Ok(());
        }
        self.check_fenced(member_id, group_instance_id)?;
        if self.member(member_id).is_none() {
            return Err(if self.members.is_empty() && generation_id >= 0 {
                GroupError::IllegalGeneration
            } else {
                GroupError::UnknownMemberId
            });
        }
        if generation_id != self.generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        match self.state {
            GroupState::CompletingRebalance => Err(GroupError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// Fails every parked request (the coordinator is shutting down).
    pub fn abandon(&mut self) -> Outcome {
        let mut out = Vec::new();
        for m in self.members.values_mut() {
            if let Some(w) = m.join_waiter.take() {
                out.push(Action::Join(
                    w,
                    JoinResponse::error(GroupError::CoordinatorNotAvailable, &m.member_id),
                ));
            }
            if let Some(w) = m.sync_waiter.take() {
                out.push(Action::Sync(
                    w,
                    SyncResponse::error(GroupError::CoordinatorNotAvailable),
                ));
            }
        }
        out
    }

    /// Whether some member subscribes to `topic` (decoding the consumer protocol's
    /// subscription; members of other protocol types count as subscribed to nothing).
    pub fn subscribes_to(&self, topic: &str) -> bool {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::Decodable;
        let protocol = self.protocol_name.clone().unwrap_or_default();
        self.members
            .values()
            .filter(|m| m.protocol_type == "consumer")
            .any(|m| {
                let mut meta = m.metadata(&protocol);
                if meta.len() < 2 {
                    return false;
                }
                let version = i16::from_be_bytes([meta[0], meta[1]]);
                let _ = bytes::Buf::get_i16(&mut meta);
                ConsumerProtocolSubscription::decode(&mut meta, version.clamp(0, 3))
                    .is_ok_and(|s| s.topics.iter().any(|t| t.as_str() == topic))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: i64 = 10_000;

    /// The initial delay lets every member of a test join one first rebalance.
    const DELAY: i64 = 100;

    fn config() -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: DELAY,
            min_session_timeout_ms: 1000,
            max_session_timeout_ms: 60_000,
        }
    }

    fn join_req(
        member_id: &str,
        fresh: &str,
        instance: Option<&str>,
        protocols: &[&str],
    ) -> JoinRequest {
        JoinRequest {
            member_id: member_id.to_string(),
            group_instance_id: instance.map(str::to_string),
            client_id: "c".to_string(),
            client_host: "/127.0.0.1".to_string(),
            session_timeout_ms: SESSION,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".to_string(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from_static(b"meta")))
                .collect(),
            require_known_member_id: true,
            fresh_member_id: fresh.to_string(),
        }
    }

    fn joined(actions: &[Action], waiter: Waiter) -> Option<&JoinResponse> {
        actions.iter().find_map(|a| match a {
            Action::Join(w, r) if *w == waiter => Some(r),
            _ => None,
        })
    }

    fn synced(actions: &[Action], waiter: Waiter) -> Option<&SyncResponse> {
        actions.iter().find_map(|a| match a {
            Action::Sync(w, r) if *w == waiter => Some(r),
            _ => None,
        })
    }

    /// Joins `ids` (KIP-394 style) and completes the rebalance; returns the generation.
    fn form(g: &mut Group, now: i64, ids: &[&str]) -> i32 {
        let mut w = 100;
        for id in ids {
            let a = g.join(now, w, join_req("", id, None, &["range"]));
            assert_eq!(
                joined(&a, w).and_then(|r| r.error),
                Some(GroupError::MemberIdRequired)
            );
            w += 1;
        }
        for id in ids {
            assert!(
                g.join(now, w, join_req(id, "unused", None, &["range"]))
                    .is_empty(),
                "waits for the delay"
            );
            w += 1;
        }
        let done = g.tick(now + DELAY);
        assert_eq!(done.len(), ids.len());
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let leader = g.leader_id.clone().expect("leader");
        let assignments = ids
            .iter()
            .map(|id| (id.to_string(), Bytes::from(format!("for-{id}"))))
            .collect();
        let a = g.sync(
            now,
            900,
            &leader,
            None,
            g.generation_id,
            None,
            None,
            assignments,
        );
        assert_eq!(
            synced(&a, 900).map(|r| r.assignment.clone()),
            Some(Bytes::from(format!("for-{leader}")))
        );
        assert_eq!(g.state, GroupState::Stable);
        g.generation_id
    }

    #[test]
    fn members_join_sync_and_get_their_assignments() {
        let mut g = Group::new(
            "g",
            GroupConfig {
                initial_rebalance_delay_ms: 0,
                ..config()
            },
        );
        let a = g.join(0, 1, join_req("", "m1", None, &["range", "roundrobin"]));
        assert_eq!(
            joined(&a, 1).map(|r| (r.error, r.member_id.as_str())),
            Some((Some(GroupError::MemberIdRequired), "m1"))
        );
        let a = g.join(0, 2, join_req("m1", "x", None, &["range", "roundrobin"]));
        let r = joined(&a, 2).expect("single member completes at once");
        assert_eq!(
            (r.generation_id, r.leader.as_str(), r.members.len()),
            (1, "m1", 1)
        );
        assert_eq!(r.protocol_name.as_deref(), Some("range"));
        // A second member that only speaks roundrobin: the common protocol wins.
        g.join(1, 3, join_req("", "m2", None, &["roundrobin"]));
        let a = g.join(1, 4, join_req("m2", "x", None, &["roundrobin"]));
        assert!(a.is_empty(), "waits for m1 to rejoin");
        assert_eq!(
            g.heartbeat(2, "m1", None, 1),
            Err(GroupError::RebalanceInProgress)
        );
        let a = g.join(2, 5, join_req("m1", "x", None, &["range", "roundrobin"]));
        let (r1, r2) = (joined(&a, 5).expect("m1"), joined(&a, 4).expect("m2"));
        assert_eq!(
            (r1.generation_id, r1.members.len(), r2.members.len()),
            (2, 2, 0)
        );
        assert_eq!(r1.protocol_name.as_deref(), Some("roundrobin"));
        // The follower's sync waits for the leader's.
        assert!(g.sync(3, 6, "m2", None, 2, None, None, vec![]).is_empty());
        let a = g.sync(
            3,
            7,
            "m1",
            None,
            2,
            None,
            None,
            vec![("m2".into(), Bytes::from_static(b"p0,p1"))],
        );
        assert_eq!(
            synced(&a, 6).map(|r| r.assignment.clone()),
            Some(Bytes::from_static(b"p0,p1"))
        );
        assert_eq!(
            synced(&a, 7).map(|r| r.assignment.clone()),
            Some(Bytes::new())
        );
        assert_eq!(g.heartbeat(4, "m2", None, 2), Ok(()));
    }

    #[test]
    fn commits_are_fenced_by_generation_and_membership() {
        let mut g = Group::new("g", config());
        assert_eq!(
            g.validate_commit("", None, -1),
            Ok(()),
            "a simple consumer may commit to an empty group"
        );
        let generation = form(&mut g, 0, &["a", "b"]);
        assert_eq!(g.validate_commit("a", None, generation), Ok(()));
        assert_eq!(
            g.validate_commit("a", None, generation - 1),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            g.validate_commit("zz", None, generation),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(
            g.validate_commit("", None, -1),
            Err(GroupError::UnknownMemberId)
        );
        // A new member joins: while the others rejoin, the old generation may still commit
        // (Kafka allows it in PreparingRebalance); once the join completes it may not.
        g.join(1, 50, join_req("", "c", None, &["range"]));
        g.join(1, 51, join_req("c", "x", None, &["range"]));
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert_eq!(g.validate_commit("a", None, generation), Ok(()));
        g.join(1, 52, join_req("a", "x", None, &["range"]));
        g.join(1, 53, join_req("b", "x", None, &["range"]));
        assert_eq!(g.state, GroupState::CompletingRebalance);
        assert_eq!(
            g.validate_commit("a", None, generation),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            g.validate_commit("a", None, generation + 1),
            Err(GroupError::RebalanceInProgress)
        );
    }

    #[test]
    fn a_silent_member_is_expired_and_the_rest_rebalance() {
        let mut g = Group::new("g", config());
        let generation = form(&mut g, 0, &["a", "b"]);
        // b keeps heartbeating; a goes silent.
        for t in (1000..=SESSION + 2000).step_by(1000) {
            let _ = g.heartbeat(t, "b", None, generation);
            g.tick(t);
            assert_eq!(g.member("a").is_some(), t <= SESSION + DELAY, "at {t}");
        }
        assert_eq!(
            g.heartbeat(SESSION + 2100, "b", None, generation),
            Err(GroupError::RebalanceInProgress)
        );
        let a = g.join(SESSION + 2500, 70, join_req("b", "x", None, &["range"]));
        let r = joined(&a, 70).expect("b alone completes the rebalance");
        assert_eq!((r.generation_id, r.leader.as_str()), (generation + 1, "b"));
    }

    #[test]
    fn a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_deadline() {
        let mut g = Group::new("g", config());
        let generation = form(&mut g, 0, &["a", "b"]);
        let a = g
            .leave(
                10,
                &[Leaving {
                    member_id: "zz".into(),
                    group_instance_id: None,
                }],
            )
            .0;
        assert_eq!(a, vec![Err(GroupError::UnknownMemberId)]);
        let mut changed = join_req("a", "x", None, &["range"]);
        changed.protocols[0].1 = Bytes::from_static(b"new subscription");
        g.join(10, 60, changed);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        // b is a heartbeating but never rejoins: the deadline (30 s) ends the wait.
        for t in (1000..29_000).step_by(1000) {
            let _ = g.heartbeat(t, "b", None, generation);
            assert!(g.tick(t).is_empty());
        }
        let a = g.tick(30_010);
        assert_eq!(
            joined(&a, 60).map(|r| r.generation_id),
            Some(generation + 1)
        );
        assert!(g.member("b").is_none());
        assert_eq!(g.members().count(), 1);
        // The last member leaves: the group is empty.
        let (r, _) = g.leave(
            31_000,
            &[Leaving {
                member_id: "a".into(),
                group_instance_id: None,
            }],
        );
        assert_eq!(r, vec![Ok(())]);
        assert_eq!(g.state, GroupState::Empty);
        assert!(g.is_empty());
    }

    #[test]
    fn a_static_member_rejoins_without_a_rebalance_and_fences_its_old_id() {
        let mut g = Group::new("g", config());
        g.join(0, 1, join_req("", "s1-a", Some("one"), &["range"]));
        g.join(0, 2, join_req("", "s2-a", Some("two"), &["range"]));
        assert_eq!(g.tick(DELAY).len(), 2);
        let leader = g.leader_id.clone().expect("leader");
        let generation = g.generation_id;
        g.sync(
            DELAY,
            3,
            &leader,
            None,
            generation,
            None,
            None,
            vec![
                ("s1-a".into(), Bytes::from_static(b"A")),
                ("s2-a".into(), Bytes::from_static(b"B")),
            ],
        );
        assert_eq!(g.state, GroupState::Stable);
        let follower = if leader == "s1-a" {
            ("two", "s2-a", b"B")
        } else {
            ("one", "s1-a", b"A")
        };
        // The follower restarts: new member id, same instance id, same subscription.
        let a = g.join(
            5000,
            10,
            join_req("", "fresh", Some(follower.0), &["range"]),
        );
        let r = joined(&a, 10).expect("answered at once");
        assert_eq!(
            (r.error, r.generation_id, r.member_id.as_str()),
            (None, generation, "fresh")
        );
        assert_eq!(g.state, GroupState::Stable, "no rebalance");
        let a = g.sync(
            5001,
            11,
            "fresh",
            Some(follower.0),
            generation,
            None,
            None,
            vec![],
        );
        assert_eq!(
            synced(&a, 11).map(|r| r.assignment.to_vec()),
            Some(follower.2.to_vec())
        );
        // The old incarnation is fenced.
        assert_eq!(
            g.heartbeat(5002, follower.1, Some(follower.0), generation),
            Err(GroupError::FencedInstanceId)
        );
        assert_eq!(
            g.validate_commit(follower.1, Some(follower.0), generation),
            Err(GroupError::FencedInstanceId)
        );
        assert_eq!(
            g.heartbeat(5002, "fresh", Some(follower.0), generation),
            Ok(())
        );
    }
}
