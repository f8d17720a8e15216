//! Kafka's client-quota model as plain data: which entities a quota may be set on, how
//! a request's (user, client id) finds its quota (Kafka's precedence, most specific
//! first), the sampled rate a quota is measured with, and the throttle time of a
//! violation. No I/O and no clock: callers pass the time.

use std::collections::{BTreeMap, HashMap};

use strata_metastore::QuotaEntity;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    /// Produce request bytes per second (`producer_byte_rate`).
    Produce,
    /// Fetch response bytes per second (`consumer_byte_rate`).
    Fetch,
    /// Time spent handling the client's requests, in percent of one thread
    /// (`request_percentage`).
    Request,
}

impl QuotaKind {
    pub const ALL: [QuotaKind; 3] = [QuotaKind::Produce, QuotaKind::Fetch, QuotaKind::Request];

    /// Kafka's quota key.
    pub fn key(self) -> &'static str {
        match self {
            QuotaKind::Produce => "producer_byte_rate",
            QuotaKind::Fetch => "consumer_byte_rate",
            QuotaKind::Request => "request_percentage",
        }
    }
}

/// The per-address quota key (KIP-612), on `ip` entities.
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// Why an alteration is refused (INVALID_REQUEST, with this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// Checks an alteration of one entity as Kafka does: the entity is a user, a client id,
/// both, or an address; each key is one that entity may have; values are positive.
pub fn validate(entity: &QuotaEntity, ops: &[(String, Option<f64>)]) -> Result<(), Invalid> {
    let types: Vec<&str> = entity.keys().map(String::as_str).collect();
    let user_or_client = match types.as_slice() {
        [USER] | [CLIENT_ID] => true,
        // BTreeMap order: "client-id" before "user".
        [CLIENT_ID, USER] => true,
        [IP] => false,
        _ => {
            return Err(Invalid(format!(
                "Invalid quota entity combination: {} (user, client-id, both, or ip)",
                types.join(", ")
            )));
        }
    };
    if let Some(Some(name)) = entity.get(IP)
        && name.parse::<std::net::IpAddr>().is_err()
    {
        return Err(Invalid(format!("{name} is not a valid IP address")));
    }
    if entity.values().any(|n| n.as_deref() == Some("")) {
        return Err(Invalid("an entity name is empty".into()));
    }
    for (key, value) in ops {
        let known = if user_or_client {
            QuotaKind::ALL.iter().any(|k| k.key() == key)
        } else {
            key == CONNECTION_CREATION_RATE
        };
        if !known {
            return Err(Invalid(format!(
                "{key} is not a quota of a {} entity",
                types.join("/")
            )));
        }
        if let Some(v) = value
            && !(v.is_finite() && *v > 0.0)
        {
            return Err(Invalid(format!("{key} must be positive, not {v}")));
        }
        // Kafka's byte rates are longs and the connection rate an int: only the
        // request percentage may have a fraction.
        if let Some(v) = value
            && key != QuotaKind::Request.key()
            && v.fract() != 0.0
        {
            return Err(Invalid(format!("{key} cannot be a fractional value.")));
        }
    }
    Ok(())
}

/// Whose usage one quota counts: the user and client id, as far as the entity the
/// quota came from names them (a quota on `user=alice` is shared by all her clients).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SensorKey {
    pub kind: QuotaKind,
    pub user: Option<String>,
    pub client_id: Option<String>,
}

/// Every quota, arranged for lookups.
#[derive(Debug, Default)]
pub struct QuotaIndex {
    by_entity: HashMap<QuotaEntity, BTreeMap<String, f64>>,
}

/// Kafka's precedence: (user, client id) levels, most specific first. `Some(true)` is
/// the request's own name, `Some(false)` the type's default, `None` absent.
const LEVELS: [(Option<bool>, Option<bool>); 8] = [
    (Some(true), Some(true)),
    (Some(true), Some(false)),
    (Some(true), None),
    (Some(false), Some(true)),
    (Some(false), Some(false)),
    (Some(false), None),
    (None, Some(true)),
    (None, Some(false)),
];

impl QuotaIndex {
    pub fn new(records: Vec<strata_metastore::QuotaRecord>) -> QuotaIndex {
        QuotaIndex {
            by_entity: records.into_iter().map(|r| (r.entity, r.values)).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_entity.is_empty()
    }

    /// The quota of `kind` for `user` (the principal's name) and `client_id`, and whose
    /// usage it counts; `None` when no entity sets one.
    pub fn quota(&self, kind: QuotaKind, user: &str, client_id: &str) -> Option<(f64, SensorKey)> {
        for (u, c) in LEVELS {
            let mut entity = QuotaEntity::new();
            if let Some(own) = u {
                entity.insert(USER.to_string(), own.then(|| user.to_string()));
            }
            if let Some(own) = c {
                entity.insert(CLIENT_ID.to_string(), own.then(|| client_id.to_string()));
            }
            if let Some(v) = self.by_entity.get(&entity).and_then(|q| q.get(kind.key())) {
                return Some((
                    *v,
                    SensorKey {
                        kind,
                        user: u.map(|_| user.to_string()),
                        client_id: c.map(|_| client_id.to_string()),
                    },
                ));
            }
        }
        None
    }

    /// The connection creation rate allowed from `ip`: its own, else the default.
    pub fn connection_rate(&self, ip: &str) -> Option<f64> {
        [Some(ip.to_string()), None].into_iter().find_map(|name| {
            let entity: QuotaEntity = [(IP.to_string(), name)].into_iter().collect();
            self.by_entity
                .get(&entity)
                .and_then(|q| q.get(CONNECTION_CREATION_RATE))
                .copied()
        })
    }

    /// The entities a DescribeClientQuotas filter selects, with their quotas.
    pub fn entries(&self) -> impl Iterator<Item = (&QuotaEntity, &BTreeMap<String, f64>)> {
        self.by_entity.iter()
    }
}

/// How a quota is measured (Kafka's `quota.window.num` samples of
/// `quota.window.size.seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub samples: usize,
    pub window_ms: u64,
}

/// A rate over the last few windows, as Kafka's `Rate` of `SampledStat`s: the sum of
/// the samples still in range over the time they span, which counts as at least all
/// but one full window (so a client's first second is not measured as a burst).
#[derive(Debug, Clone)]
pub struct Rate {
    windows: Windows,
    /// (window start ms, amount), oldest first; at most `samples` of them.
    samples: std::collections::VecDeque<(u64, f64)>,
}

impl Rate {
    pub fn new(windows: Windows) -> Rate {
        Rate {
            windows,
            samples: std::collections::VecDeque::with_capacity(windows.samples),
        }
    }

    fn purge(&mut self, now_ms: u64) {
        let span = self.windows.window_ms * self.windows.samples as u64;
        while let Some(&(start, _)) = self.samples.front() {
            if now_ms.saturating_sub(start) >= span {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    /// Adds `amount` (which may be negative, to take back what was not sent) at
    /// `now_ms`.
    pub fn record(&mut self, now_ms: u64, amount: f64) {
        self.purge(now_ms);
        match self.samples.back_mut() {
            Some((start, sum)) if now_ms < *start + self.windows.window_ms => *sum += amount,
            _ => {
                if self.samples.len() == self.windows.samples {
                    self.samples.pop_front();
                }
                self.samples.push_back((now_ms, amount));
            }
        }
    }

    /// The time the rate is taken over, in ms.
    fn span_ms(&self, now_ms: u64) -> f64 {
        let w = self.windows.window_ms;
        let oldest = self.samples.front().map_or(now_ms, |(s, _)| *s);
        let mut elapsed = now_ms.saturating_sub(oldest);
        let full = elapsed / w;
        let min_full = self.windows.samples.saturating_sub(1) as u64;
        if full < min_full {
            elapsed += (min_full - full) * w;
        }
        elapsed.max(1) as f64
    }

    /// The rate per second at `now_ms`.
    pub fn per_second(&mut self, now_ms: u64) -> f64 {
        self.purge(now_ms);
        let total: f64 = self.samples.iter().map(|(_, a)| a).sum();
        total * 1000.0 / self.span_ms(now_ms)
    }

    /// How long the client must wait for its rate to come back to `quota` (Kafka's
    /// `(rate - quota) / quota * window`), at most the whole measured span; 0 within
    /// the quota.
    pub fn throttle_ms(&mut self, now_ms: u64, quota: f64) -> u64 {
        let rate = self.per_second(now_ms);
        if rate <= quota {
            return 0;
        }
        let span = self.span_ms(now_ms);
        let max = (self.windows.window_ms * self.windows.samples as u64) as f64;
        ((rate - quota) / quota * span).min(max).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_metastore::QuotaRecord;

    fn entity(parts: &[(&str, Option<&str>)]) -> QuotaEntity {
        parts
            .iter()
            .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
            .collect()
    }

    fn record(parts: &[(&str, Option<&str>)], key: &str, v: f64) -> QuotaRecord {
        QuotaRecord {
            entity: entity(parts),
            values: [(key.to_string(), v)].into_iter().collect(),
        }
    }

    #[test]
    fn the_most_specific_entity_wins_as_in_kafka() {
        let p = "producer_byte_rate";
        let index = QuotaIndex::new(vec![
            record(
                &[("user", Some("alice")), ("client-id", Some("app"))],
                p,
                1.0,
            ),
            record(&[("user", Some("alice"))], p, 2.0),
            record(&[("user", None)], p, 3.0),
            record(&[("client-id", Some("app"))], p, 4.0),
            record(&[("client-id", None)], p, 5.0),
        ]);
        let q = |u: &str, c: &str| {
            index
                .quota(QuotaKind::Produce, u, c)
                .map(|(v, k)| (v, k.user, k.client_id))
        };
        assert_eq!(
            q("alice", "app"),
            Some((1.0, Some("alice".into()), Some("app".into())))
        );
        // alice's own quota, shared by all her clients.
        assert_eq!(q("alice", "other"), Some((2.0, Some("alice".into()), None)));
        // The default user's: each user counted on its own.
        assert_eq!(q("bob", "app"), Some((3.0, Some("bob".into()), None)));
        assert_eq!(index.quota(QuotaKind::Fetch, "alice", "app"), None);
        let clients_only = QuotaIndex::new(vec![
            record(&[("client-id", Some("app"))], p, 4.0),
            record(&[("client-id", None)], p, 5.0),
        ]);
        assert_eq!(
            clients_only
                .quota(QuotaKind::Produce, "bob", "app")
                .map(|q| q.0),
            Some(4.0)
        );
        assert_eq!(
            clients_only
                .quota(QuotaKind::Produce, "bob", "x")
                .map(|q| q.0),
            Some(5.0)
        );
    }

    #[test]
    fn entities_and_keys_are_checked() {
        let set = |k: &str, v: f64| vec![(k.to_string(), Some(v))];
        assert!(
            validate(
                &entity(&[("user", Some("a"))]),
                &set("producer_byte_rate", 1e6)
            )
            .is_ok()
        );
        assert!(
            validate(
                &entity(&[("user", None), ("client-id", Some("c"))]),
                &set("request_percentage", 50.0)
            )
            .is_ok()
        );
        assert!(
            validate(
                &entity(&[("ip", Some("10.0.0.1"))]),
                &set(CONNECTION_CREATION_RATE, 5.0)
            )
            .is_ok()
        );
        assert!(
            validate(
                &entity(&[("ip", Some("10.0.0.1"))]),
                &set("producer_byte_rate", 5.0)
            )
            .is_err()
        );
        assert!(
            validate(
                &entity(&[("ip", Some("nope"))]),
                &set(CONNECTION_CREATION_RATE, 5.0)
            )
            .is_err()
        );
        assert!(
            validate(
                &entity(&[("user", Some("a"))]),
                &set(CONNECTION_CREATION_RATE, 5.0)
            )
            .is_err()
        );
        assert!(
            validate(
                &entity(&[("user", Some("a"))]),
                &set("producer_byte_rate", 0.0)
            )
            .is_err()
        );
        assert!(validate(&entity(&[("user", Some("a"))]), &set("bogus", 1.0)).is_err());
        assert!(
            validate(
                &entity(&[("user", Some("a"))]),
                &set("producer_byte_rate", 1.5)
            )
            .is_err()
        );
        assert!(
            validate(
                &entity(&[("user", Some("a"))]),
                &set("request_percentage", 1.5)
            )
            .is_ok()
        );
        assert!(validate(&entity(&[("user", Some("a")), ("ip", None)]), &[]).is_err());
        assert!(validate(&entity(&[("group", Some("a"))]), &[]).is_err());
    }

    #[test]
    fn the_rate_counts_at_least_all_but_one_window_and_throttles_the_excess() {
        let mut rate = Rate::new(Windows {
            samples: 11,
            window_ms: 1000,
        });
        // 10 MB at once: over the minimum span of 10 s, 1 MB/s: within a 1 MB/s quota.
        rate.record(0, 10e6);
        assert_eq!(rate.per_second(0), 1e6);
        assert_eq!(rate.throttle_ms(0, 1e6), 0);
        // 5 MB more a second later: 15 MB over 10 s, 50 % over: 5 s to wait.
        rate.record(1000, 5e6);
        assert_eq!(rate.throttle_ms(1000, 1e6), 5000);
        // Long after, the old samples are gone.
        assert_eq!(rate.per_second(60_000), 0.0);
        // Taken back (what was not sent): within the quota again.
        rate.record(60_000, 20e6);
        rate.record(60_000, -15e6);
        assert_eq!(rate.throttle_ms(60_000, 1e6), 0);
        // Never more than the whole measured span.
        rate.record(60_000, 1e12);
        assert_eq!(rate.throttle_ms(60_000, 1.0), 11_000);
    }
}
