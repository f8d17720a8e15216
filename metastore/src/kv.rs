//! The ordered, transactional key-value contract every metastore backend implements,
//! shaped after FoundationDB: an ordered byte key space; serializable transactions with
//! read-your-writes; range reads forward and reverse with limits; set, clear, clear range
//! and atomic add; retry on conflict.
//!
//! Every backend enforces FoundationDB's limits ([`Limits`]) so that code which works on
//! the embedded backend cannot fail on FoundationDB for size or duration.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use strata_core::clock::Clock;

use tokio_util::sync::CancellationToken;

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::error::{Error, Result};

/// A key and its value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// The sizes and durations FoundationDB allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub transaction_bytes: usize,
    pub transaction_duration: Duration,
}

/// Bytes of every key that a backend may spend on its own prefix (FoundationDB's
/// subspace): the key limit callers get is FoundationDB's 10,000 bytes less this.
pub const KEY_PREFIX_RESERVE: usize = 100;

pub const FDB_LIMITS: Limits = Limits {
    key_bytes: 10_000 - KEY_PREFIX_RESERVE,
    value_bytes: 100_000,
    transaction_bytes: 10_000_000,
    transaction_duration: Duration::from_secs(5),
};

/// Tracks one transaction against [`Limits`], its age on `clock`.
#[derive(Debug)]
pub struct LimitTracker {
    limits: Limits,
    clock: Arc<dyn Clock>,
    started: Duration,
    written_bytes: usize,
}

impl LimitTracker {
    pub fn new(limits: Limits, clock: &Arc<dyn Clock>) -> Self {
        LimitTracker {
            limits,
            clock: Arc::clone(clock),
            started: clock.monotonic(),
            written_bytes: 0,
        }
    }

    pub fn key(&self, key: &[u8]) -> Result<()> {
        if key.len() > self.limits.key_bytes {
            return Err(Error::LimitExceeded(format!(
                "key of {} bytes exceeds {} bytes",
                key.len(),
                self.limits.key_bytes
            )));
        }
        Ok(())
    }

    pub fn write(&mut self, key: &[u8], value_len: usize) -> Result<()> {
        self.key(key)?;
        if value_len > self.limits.value_bytes {
            return Err(Error::LimitExceeded(format!(
                "value of {value_len} bytes exceeds {} bytes",
                self.limits.value_bytes
            )));
        }
        self.written_bytes += key.len() + value_len;
        if self.written_bytes > self.limits.transaction_bytes {
            return Err(Error::LimitExceeded(format!(
                "transaction writes more than {} bytes",
                self.limits.transaction_bytes
            )));
        }
        Ok(())
    }

    pub fn alive(&self) -> Result<()> {
        if self.clock.monotonic() - self.started > self.limits.transaction_duration {
            return Err(Error::TransactionTooOld {
                limit_ms: self.limits.transaction_duration.as_millis() as u64,
            });
        }
        Ok(())
    }
}

/// A backend: something that starts transactions.
#[async_trait]
pub trait KvStore: Send + Sync + Debug {
    async fn begin(&self) -> Result<Box<dyn KvTransaction>>;

    /// Starts watching `key` (FoundationDB's watch). Once this returns, the [`Watch`]
    /// resolves after the value at `key` changes from what it was when the watch began.
    /// It may also resolve without a change (after a reconnect, say), so callers re-read
    /// what they care about; it never misses a change committed after it began.
    async fn watch(&self, key: &[u8]) -> Result<Watch>;
}

/// A started watch; see [`KvStore::watch`].
pub type Watch = BoxFuture<'static, Result<()>>;

/// One transaction. Writes are visible to the transaction's own reads at once and to
/// everyone else after a successful [`KvTransaction::commit`]; dropping it without
/// committing discards them. A write that breaks a limit fails the commit.
#[async_trait]
pub trait KvTransaction: Send {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Keys in `[begin, end)`, ascending (or descending when `reverse`), at most `limit`
    /// of them (0 means no limit).
    async fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<KeyValue>>;
    fn set(&mut self, key: &[u8], value: &[u8]);
    fn clear(&mut self, key: &[u8]);
    fn clear_range(&mut self, begin: &[u8], end: &[u8]);
    /// Adds `delta` to the little-endian signed 64-bit integer at `key` (absent = 0).
    fn atomic_add(&mut self, key: &[u8], delta: i64);
    async fn commit(self: Box<Self>) -> Result<()>;
}

/// The end of the key range holding every key that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff]
}

const MAX_ATTEMPTS: u32 = 20;

/// How long one call may take by default, every attempt of its transaction together.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(15);

/// When a call gives up: after its deadline on `clock`, or at once when `abandon` is
/// cancelled.
#[derive(Debug, Clone)]
pub struct CallLimits {
    pub deadline: Duration,
    pub abandon: Option<CancellationToken>,
    pub clock: Arc<dyn Clock>,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            deadline: DEFAULT_DEADLINE,
            abandon: None,
            clock: strata_core::clock::SystemClock::shared(),
        }
    }
}

/// [`transact_within`] with the default limits.
pub async fn transact<T, F>(store: &dyn KvStore, body: F) -> Result<T>
where
    T: Send,
    F: for<'t> FnMut(&'t mut dyn KvTransaction) -> BoxFuture<'t, Result<T>> + Send,
{
    transact_within(store, &CallLimits::default(), body).await
}

/// Runs `body` in a transaction and commits it, retrying the whole body on a retryable
/// error with capped exponential backoff, all within `limits`: past the deadline the call
/// fails with [`Error::DeadlineExceeded`], and once `limits.abandon` is cancelled with
/// [`Error::ShuttingDown`] (an attempt cut short may have committed, as with any
/// unknown result). `body` may run more than once, so it must derive everything it
/// writes from what it reads in the transaction.
pub async fn transact_within<T, F>(
    store: &dyn KvStore,
    limits: &CallLimits,
    mut body: F,
) -> Result<T>
where
    T: Send,
    F: for<'t> FnMut(&'t mut dyn KvTransaction) -> BoxFuture<'t, Result<T>> + Send,
{
    let clock = &limits.clock;
    let deadline = clock.monotonic() + limits.deadline;
    let timed_out = || Error::DeadlineExceeded {
        after_ms: limits.deadline.as_millis() as u64,
    };
    let abandoned = async {
        match &limits.abandon {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(abandoned);
    let started = clock.monotonic();
    let mut backoff = Duration::from_millis(2);
    let mut attempt = 0;
    let outcome = loop {
        attempt += 1;
        let once = async {
            let mut txn = store.begin().await?;
            let value = body(txn.as_mut()).await?;
            txn.commit().await?;
            Ok(value)
        };
        let outcome: Result<T> = tokio::select! {
            o = once => o,
            () = clock.sleep_until(deadline) => Err(timed_out()),
            () = &mut abandoned => Err(Error::ShuttingDown),
        };
        match outcome {
            Err(e) if e.is_retryable() && attempt < MAX_ATTEMPTS => {
                tracing::debug!(attempt, error = %e, "retrying metastore transaction");
                if clock.monotonic() + backoff >= deadline {
                    break Err(timed_out());
                }
                tokio::select! {
                    () = clock.sleep(backoff) => {}
                    () = &mut abandoned => break Err(Error::ShuttingDown),
                }
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            other => break other,
        }
    };
    metrics::counter!("strata_metastore_transactions_total").increment(1);
    metrics::histogram!("strata_metastore_transaction_duration_seconds")
        .record((clock.monotonic() - started).as_secs_f64());
    if attempt > 1 {
        metrics::counter!("strata_metastore_transaction_retries_total")
            .increment(u64::from(attempt - 1));
    }
    if outcome.is_err() {
        metrics::counter!("strata_metastore_transaction_errors_total").increment(1);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use strata_core::clock::ManualClock;

    use super::*;

    /// A backend that never answers (a hung FoundationDB client, a wedged disk).
    #[derive(Debug)]
    struct Hung;

    #[async_trait]
    impl KvStore for Hung {
        async fn begin(&self) -> Result<Box<dyn KvTransaction>> {
            std::future::pending().await
        }

        async fn watch(&self, _key: &[u8]) -> Result<Watch> {
            std::future::pending().await
        }
    }

    fn read_nothing(txn: &mut dyn KvTransaction) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { txn.get(b"k").await.map(drop) })
    }

    /// A hung backend fails the call at its deadline instead of holding the caller
    /// (on a manual clock: nothing sleeps through the 15 s).
    #[tokio::test]
    async fn a_hung_backend_fails_at_the_deadline() {
        let clock = ManualClock::new(0);
        let limits = CallLimits {
            deadline: Duration::from_secs(15),
            abandon: None,
            clock: Arc::new(clock.clone()),
        };
        let call = tokio::spawn(async move { transact_within(&Hung, &limits, read_nothing).await });
        // Once the call sleeps on its deadline, move time up to and past it.
        while clock.sleepers() == 0 {
            tokio::task::yield_now().await;
        }
        clock.advance(Duration::from_secs(14));
        tokio::task::yield_now().await;
        assert!(!call.is_finished(), "gave up before the deadline");
        clock.advance(Duration::from_secs(1));
        let outcome = call.await.expect("task");
        assert!(
            matches!(outcome, Err(Error::DeadlineExceeded { after_ms: 15_000 })),
            "{outcome:?}"
        );
    }

    /// Cancelling the abandon token ends a call in flight at once.
    #[tokio::test]
    async fn shutdown_abandons_a_call_in_flight() {
        let token = CancellationToken::new();
        let limits = CallLimits {
            deadline: Duration::from_secs(600),
            abandon: Some(token.clone()),
            ..CallLimits::default()
        };
        let call = tokio::spawn(async move { transact_within(&Hung, &limits, read_nothing).await });
        tokio::task::yield_now().await;
        token.cancel();
        let outcome = call.await.expect("task");
        assert!(matches!(outcome, Err(Error::ShuttingDown)), "{outcome:?}");
    }
}
