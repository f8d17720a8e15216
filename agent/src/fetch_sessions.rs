//! Incremental fetch sessions (KIP-227). A consumer fetching many partitions sends them
//! all once; the agent remembers them under a session id, and from then on the consumer
//! sends only what changed (a new fetch offset, a partition added or forgotten) and the
//! answer holds only the partitions with something to say: records, an error, or a high
//! watermark, last stable offset or log start offset that moved.
//!
//! As in Kafka's broker (`FetchSession.scala`):
//! - A full fetch (epoch 0) closes the session it names and opens a new one when a slot
//!   is free; epoch -1 asks for no session. Session ids are random and at most
//!   `max_incremental_fetch_session_cache_slots` sessions are kept, each until it has
//!   been idle for two minutes.
//! - An incremental fetch must name its session with the epoch that session expects,
//!   else it gets FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH and the
//!   client starts again with a full fetch. A session opened with topic ids (v13+) is
//!   used with topic ids only (FETCH_SESSION_TOPIC_ID_ERROR otherwise).
//! - Partitions that returned records move to the end of the session's order (from the
//!   full fetch that opens it on), so a response filled to `max_bytes` by the first
//!   partitions cannot starve the others.
//!
//! strata adds two rules: a session belongs to the principal that opened it (another
//! principal naming its id gets FETCH_SESSION_ID_NOT_FOUND), and a session holds at most
//! [`MAX_PARTITIONS`] partitions (a larger full fetch is answered without a session;
//! an incremental fetch that would grow one past it closes it), so the sessions' memory
//! is bounded.
//!
//! The fetch service decides, at every fetch, whether the caller may read each topic of
//! the session (`api/fetch.rs` asks it for each), so a session cannot answer a
//! partition whose ACL was removed since.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use moka::sync::Cache;
use uuid::Uuid;

/// The most partitions one session holds.
pub const MAX_PARTITIONS: usize = 10_000;

/// How long an idle session is kept (Kafka's eviction time for sessions).
const IDLE: Duration = Duration::from_secs(120);

/// The sessions of one agent.
pub struct FetchSessions {
    /// None when sessions are turned off.
    cache: Option<Cache<i32, Arc<Mutex<Session>>>>,
}

pub struct Session {
    /// The principal that opened it, as `type:name`.
    owner: String,
    /// Opened with topic ids (Fetch v13+).
    uses_ids: bool,
    /// The epoch the next incremental fetch must carry.
    next_epoch: i32,
    /// In the order they are read.
    partitions: Vec<Cached>,
}

/// A partition of a session: what the consumer last asked of it, and what it was last
/// told.
struct Cached {
    topic: TopicName,
    topic_id: Uuid,
    want: FetchPartition,
    /// High watermark, last stable offset and log start offset last answered; None
    /// before the first answer.
    told: Option<(i64, i64, i64)>,
}

impl Cached {
    fn new(t: &FetchTopic, p: &FetchPartition) -> Cached {
        Cached {
            // Copies: the request's strings are slices of its whole frame.
            topic: TopicName(StrBytes::from_string(t.topic.0.to_string())),
            topic_id: t.topic_id,
            want: owned(p),
            told: None,
        }
    }

    fn key(&self, uses_ids: bool) -> Key {
        Key::of(uses_ids, &self.topic, self.topic_id, self.want.partition)
    }
}

/// A partition as the requests of its session name it: by topic id from Fetch v13 on, by
/// name before.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Id(Uuid, i32),
    Name(TopicName, i32),
}

impl Key {
    fn of(uses_ids: bool, topic: &TopicName, topic_id: Uuid, partition: i32) -> Key {
        if uses_ids {
            Key::Id(topic_id, partition)
        } else {
            Key::Name(topic.clone(), partition)
        }
    }
}

fn owned(p: &FetchPartition) -> FetchPartition {
    let mut p = p.clone();
    p.unknown_tagged_fields.clear();
    p
}

/// How one fetch uses sessions, from [`FetchSessions::begin`] to
/// [`FetchSessions::finish`].
pub enum Begun {
    /// No session: read what the request names and answer all of it; `open` if a new
    /// session is to remember it.
    Full { open: bool },
    /// An incremental fetch: read `topics` (the whole session) and answer what changed.
    Incremental {
        id: i32,
        session: Arc<Mutex<Session>>,
        /// The epoch the session expects next, once this fetch has begun.
        next_epoch: i32,
        topics: Vec<FetchTopic>,
    },
}

impl Begun {
    /// What to read: the request's topics, or the session's.
    pub fn topics<'a>(&'a self, req: &'a FetchRequest) -> &'a [FetchTopic] {
        match self {
            Begun::Full { .. } => &req.topics,
            Begun::Incremental { topics, .. } => topics,
        }
    }
}

impl std::fmt::Debug for FetchSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.cache.as_ref().map(|c| c.entry_count());
        f.debug_struct("FetchSessions")
            .field("open", &open)
            .finish()
    }
}

impl FetchSessions {
    pub fn new(slots: u64) -> FetchSessions {
        FetchSessions {
            cache: (slots > 0).then(|| {
                Cache::builder()
                    .max_capacity(slots)
                    .time_to_idle(IDLE)
                    .build()
            }),
        }
    }

    /// Starts one fetch by `owner`: opens, closes or advances the session it names.
    /// Err: the error code of the whole answer.
    pub fn begin(&self, req: &FetchRequest, version: i16, owner: &str) -> Result<Begun, i16> {
        let full = req.session_epoch == 0 || req.session_epoch == -1;
        if full {
            if req.session_id != 0
                && let Some(cache) = &self.cache
            {
                // A full fetch closes the session it names, if it is the caller's.
                if let Some(s) = cache.get(&req.session_id)
                    && lock(&s).owner == owner
                {
                    cache.invalidate(&req.session_id);
                }
            }
            let partitions: usize = req.topics.iter().map(|t| t.partitions.len()).sum();
            let open = req.session_epoch == 0
                && self.cache.is_some()
                && version >= 7
                && partitions <= MAX_PARTITIONS;
            return Ok(Begun::Full { open });
        }
        let not_found = ResponseError::FetchSessionIdNotFound.code();
        let cache = self.cache.as_ref().ok_or(not_found)?;
        let session = cache.get(&req.session_id).ok_or(not_found)?;
        let mut s = lock(&session);
        if s.owner != owner {
            return Err(not_found);
        }
        if s.next_epoch != req.session_epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch.code());
        }
        let uses_ids = version >= 13;
        if s.uses_ids != uses_ids {
            drop(s);
            cache.invalidate(&req.session_id);
            return Err(ResponseError::FetchSessionTopicIdError.code());
        }
        s.next_epoch = next(req.session_epoch);
        // By key, so that a request naming many of a large session's partitions costs
        // one pass over the session, not one per partition named.
        let forgotten: HashSet<Key> = req
            .forgotten_topics_data
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|&p| Key::of(uses_ids, &t.topic, t.topic_id, p))
            })
            .collect();
        if !forgotten.is_empty() {
            s.partitions
                .retain(|c| !forgotten.contains(&c.key(uses_ids)));
        }
        let mut at: HashMap<Key, usize> = if req.topics.is_empty() {
            HashMap::new()
        } else {
            (s.partitions.iter().enumerate())
                .map(|(i, c)| (c.key(uses_ids), i))
                .collect()
        };
        for t in &req.topics {
            for p in &t.partitions {
                let key = Key::of(uses_ids, &t.topic, t.topic_id, p.partition);
                match at.get(&key) {
                    Some(&i) => s.partitions[i].want = owned(p),
                    None => {
                        at.insert(key, s.partitions.len());
                        s.partitions.push(Cached::new(t, p));
                    }
                }
            }
        }
        if s.partitions.len() > MAX_PARTITIONS {
            drop(s);
            cache.invalidate(&req.session_id);
            return Err(not_found);
        }
        let topics = as_topics(&s.partitions);
        let next_epoch = s.next_epoch;
        drop(s);
        Ok(Begun::Incremental {
            id: req.session_id,
            session,
            next_epoch,
            topics,
        })
    }

    /// Completes the answer of a fetch that `begun`: opens the new session, or keeps in
    /// an incremental answer only what changed, and sets the session id.
    pub fn finish(
        &self,
        begun: Begun,
        req: &FetchRequest,
        version: i16,
        owner: &str,
        response: &mut FetchResponse,
    ) {
        match begun {
            Begun::Full { open: false } => crate::metrics::fetch_answered("none"),
            Begun::Full { open: true } => {
                let Some(cache) = &self.cache else { return };
                crate::metrics::fetch_answered("opened");
                let (mut partitions, mut moved) = (Vec::new(), Vec::new());
                for (t, out) in req.topics.iter().zip(&response.responses) {
                    for (p, data) in t.partitions.iter().zip(&out.partitions) {
                        let mut c = Cached::new(t, p);
                        c.told = Some(told(data));
                        if has_records(data) {
                            moved.push(c);
                        } else {
                            partitions.push(c);
                        }
                    }
                }
                partitions.append(&mut moved);
                let id = loop {
                    let id = (Uuid::new_v4().as_u128() as i32) & i32::MAX;
                    if id != 0 && !cache.contains_key(&id) {
                        break id;
                    }
                };
                let session = Session {
                    owner: owner.to_string(),
                    uses_ids: version >= 13,
                    next_epoch: 1,
                    partitions,
                };
                cache.insert(id, Arc::new(Mutex::new(session)));
                response.session_id = id;
            }
            Begun::Incremental {
                id,
                session,
                next_epoch,
                ..
            } => {
                crate::metrics::fetch_answered("incremental");
                response.session_id = id;
                let mut s = lock(&session);
                if s.next_epoch != next_epoch {
                    // Another fetch used the session meanwhile (clients send one at a
                    // time): this answer stays whole, which is never wrong.
                    return;
                }
                let answered: usize = response.responses.iter().map(|t| t.partitions.len()).sum();
                if answered != s.partitions.len() {
                    return;
                }
                let read = std::mem::take(&mut response.responses);
                let data = read.into_iter().flat_map(|t| t.partitions);
                let mut kept: Vec<Cached> = Vec::with_capacity(s.partitions.len());
                let mut moved: Vec<Cached> = Vec::new();
                let mut answer = Vec::new();
                for (mut c, p) in s.partitions.drain(..).zip(data) {
                    let now = told(&p);
                    let has_records = has_records(&p);
                    let respond = has_records
                        || p.error_code != 0
                        || c.told != Some(now)
                        || p.diverging_epoch.epoch >= 0
                        || p.preferred_read_replica.0 >= 0;
                    c.told = Some(now);
                    if respond {
                        answer.push((c.topic.clone(), c.topic_id, p));
                    }
                    if has_records {
                        moved.push(c);
                    } else {
                        kept.push(c);
                    }
                }
                kept.append(&mut moved);
                s.partitions = kept;
                drop(s);
                response.responses = grouped(answer);
            }
        }
    }
}

fn lock(s: &Mutex<Session>) -> std::sync::MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// KIP-227's epochs: 1, 2, …, wrapping past `i32::MAX` to 1 (0 and -1 mean full
/// fetches).
fn next(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

fn has_records(p: &PartitionData) -> bool {
    p.records.as_ref().is_some_and(|r| !r.is_empty())
}

fn told(p: &PartitionData) -> (i64, i64, i64) {
    (p.high_watermark, p.last_stable_offset, p.log_start_offset)
}

/// The session's partitions as a request's topics: consecutive partitions of one topic
/// together (a topic may appear more than once, as in Kafka's answers).
fn as_topics(partitions: &[Cached]) -> Vec<FetchTopic> {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for c in partitions {
        match topics.last_mut() {
            Some(t) if t.topic == c.topic && t.topic_id == c.topic_id => {
                t.partitions.push(c.want.clone())
            }
            _ => {
                let mut t = FetchTopic::default();
                t.topic = c.topic.clone();
                t.topic_id = c.topic_id;
                t.partitions.push(c.want.clone());
                topics.push(t);
            }
        }
    }
    topics
}

fn grouped(answer: Vec<(TopicName, Uuid, PartitionData)>) -> Vec<FetchableTopicResponse> {
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for (topic, topic_id, p) in answer {
        match topics.last_mut() {
            Some(t) if t.topic == topic && t.topic_id == topic_id => t.partitions.push(p),
            _ => {
                let mut t = FetchableTopicResponse::default();
                t.topic = topic;
                t.topic_id = topic_id;
                t.partitions.push(p);
                topics.push(t);
            }
        }
    }
    topics
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::PartitionData;

    use super::*;

    fn full(session_id: i32, epoch: i32) -> FetchRequest {
        let mut p = FetchPartition::default();
        p.partition = 0;
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_static_str("t"));
        t.partitions = vec![p];
        let mut r = FetchRequest::default();
        r.session_id = session_id;
        r.session_epoch = epoch;
        r.topics = vec![t];
        r
    }

    /// Opens a session as `owner`, its id.
    fn open(sessions: &FetchSessions, owner: &str) -> i32 {
        let req = full(0, 0);
        let begun = sessions.begin(&req, 12, owner).expect("begin");
        let mut response = FetchResponse::default();
        let mut t = FetchableTopicResponse::default();
        t.topic = req.topics[0].topic.clone();
        t.partitions = vec![PartitionData::default()];
        response.responses = vec![t];
        sessions.finish(begun, &req, 12, owner, &mut response);
        response.session_id
    }

    #[test]
    fn a_session_is_its_owners_only() {
        let sessions = FetchSessions::new(10);
        let id = open(&sessions, "User:alice");
        assert!(id > 0);
        let mut incremental = full(id, 1);
        incremental.topics.clear();
        let not_found = ResponseError::FetchSessionIdNotFound.code();
        assert!(matches!(sessions.begin(&incremental, 12, "User:bob"), Err(c) if c == not_found));
        // Another principal's full fetch naming it does not close it either.
        let _ = sessions.begin(&full(id, -1), 12, "User:bob").expect("full");
        assert!(matches!(
            sessions.begin(&incremental, 12, "User:alice"),
            Ok(Begun::Incremental { .. })
        ));
    }

    #[test]
    fn a_session_grown_past_its_bound_is_closed() {
        let sessions = FetchSessions::new(10);
        let id = open(&sessions, "User:alice");
        let mut grow = full(id, 1);
        grow.topics[0].partitions = (1..=MAX_PARTITIONS as i32)
            .map(|i| {
                let mut p = FetchPartition::default();
                p.partition = i;
                p
            })
            .collect();
        let not_found = ResponseError::FetchSessionIdNotFound.code();
        assert!(matches!(sessions.begin(&grow, 12, "User:alice"), Err(c) if c == not_found));
        grow.topics.clear();
        grow.session_epoch = 2;
        assert!(matches!(sessions.begin(&grow, 12, "User:alice"), Err(c) if c == not_found));
    }

    #[test]
    fn epochs_wrap_past_the_largest_to_one() {
        assert_eq!(next(1), 2);
        assert_eq!(next(i32::MAX), 1);
    }
}
