//! The production backend: FoundationDB (API 7.3), behind the cargo feature `fdb`.
//!
//! Every key lives under one subspace, the tuple `(prefix,)`, so several clusters (or a
//! test run) can share one FoundationDB cluster. The typed layer's keys are already
//! tuple-encoded (`keys.rs`), so a whole key is a valid tuple.
//!
//! Retries: the typed layer runs every operation through [`crate::transact`], the retry
//! loop every backend shares (the crate's `Database::run` cannot be used behind a
//! backend-neutral trait). It restarts the whole body on a retryable error, at most
//! 20 times. On a failed commit this backend first calls FoundationDB's `on_error`,
//! which waits the client's recommended backoff and tells retryable errors (conflicts,
//! `commit_unknown_result`, a recovering cluster) from final ones;
//! `commit_unknown_result` becomes [`Error::MaybeCommitted`], which every typed
//! operation is written to survive (see `docs/metastore.md`). Every transaction has
//! FoundationDB's `timeout` option set, so an unreachable cluster fails a request after
//! [`TRANSACTION_TIMEOUT`] (times the attempts) instead of hanging it.
//!
//! Limits: the same [`LimitTracker`] as every backend refuses keys, values and
//! transactions over FoundationDB's limits before FoundationDB sees them, with the same
//! error; the prefix fits in the bytes [`KEY_PREFIX_RESERVE`] sets aside.
//!
//! The client's network thread starts once per process ([`FdbStore::open`]) and is
//! stopped by [`stop_network`] before the process exits.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use foundationdb::options::{MutationType, TransactionOption};
use foundationdb::{Database, FdbError, RangeOption, Transaction};

use crate::error::{Error, Result};
use crate::keys::Key;
use crate::kv::{
    FDB_LIMITS, KEY_PREFIX_RESERVE, KeyValue, KvStore, KvTransaction, LimitTracker, Limits, Watch,
    prefix_end,
};

/// How long one transaction may wait on the cluster before it fails (FoundationDB's
/// `timeout` transaction option); a little over the 5 s a transaction may live.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(6);

/// FoundationDB error codes this backend maps to the trait's meanings.
mod code {
    pub const TRANSACTION_TOO_OLD: i32 = 1007;
    pub const TRANSACTION_TIMED_OUT: i32 = 1031;
    pub const TRANSACTION_TOO_LARGE: i32 = 2101;
    pub const KEY_TOO_LARGE: i32 = 2102;
    pub const VALUE_TOO_LARGE: i32 = 2103;
}

static NETWORK: OnceLock<Mutex<Option<foundationdb::api::NetworkAutoStop>>> = OnceLock::new();

fn start_network() -> Result<()> {
    let mut failure = None;
    NETWORK.get_or_init(|| {
        // SAFETY: `boot` may run once per process, which the `OnceLock` ensures, and the
        // network must be stopped before exit, which `stop_network` does.
        #[allow(unsafe_code)]
        let booted = foundationdb::api::FdbApiBuilder::default()
            .build()
            .and_then(|builder| unsafe { builder.boot() });
        match booted {
            Ok(stop) => Mutex::new(Some(stop)),
            Err(e) => {
                failure = Some(e);
                Mutex::new(None)
            }
        }
    });
    match failure {
        Some(e) => Err(fdb_error("start the FoundationDB client", e)),
        None => Ok(()),
    }
}

/// Stops the FoundationDB client's network thread; call once, as the process ends.
pub fn stop_network() {
    if let Some(network) = NETWORK.get() {
        drop(network.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

#[derive(Clone)]
pub struct FdbStore {
    db: std::sync::Arc<Database>,
    prefix: Vec<u8>,
    limits: Limits,
    clock: std::sync::Arc<dyn strata_core::clock::Clock>,
}

impl std::fmt::Debug for FdbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdbStore")
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .finish_non_exhaustive()
    }
}

impl FdbStore {
    /// This store, timing its transactions on `clock`.
    pub fn with_clock(self, clock: std::sync::Arc<dyn strata_core::clock::Clock>) -> FdbStore {
        FdbStore { clock, ..self }
    }

    /// Connects to the cluster named by `cluster_file` (the client's default file when
    /// `None`) and keeps every key under the subspace `(prefix,)`.
    pub fn open(cluster_file: Option<&str>, prefix: &str) -> Result<FdbStore> {
        let prefix = Key::new(b"").str(prefix).into_bytes();
        if prefix.len() > KEY_PREFIX_RESERVE {
            return Err(Error::Invalid(format!(
                "the FoundationDB key prefix takes {} bytes; at most {KEY_PREFIX_RESERVE} are allowed",
                prefix.len()
            )));
        }
        start_network()?;
        let db = Database::new(cluster_file).map_err(|e| fdb_error("open the database", e))?;
        Ok(FdbStore {
            db: std::sync::Arc::new(db),
            prefix,
            limits: FDB_LIMITS,
            clock: strata_core::clock::SystemClock::shared(),
        })
    }

    fn new_transaction(&self) -> Result<Transaction> {
        let trx = self
            .db
            .create_trx()
            .map_err(|e| fdb_error("create a transaction", e))?;
        trx.set_option(TransactionOption::Timeout(
            TRANSACTION_TIMEOUT.as_millis() as i32
        ))
        .map_err(|e| fdb_error("set transaction options", e))?;
        Ok(trx)
    }

    /// Removes every key of this store's subspace (tests use a fresh prefix each).
    pub async fn clear_all(&self) -> Result<()> {
        let trx = self.new_transaction()?;
        trx.clear_range(&self.prefix, &prefix_end(&self.prefix));
        trx.commit()
            .await
            .map(drop)
            .map_err(|e| map_error(FdbError::from(e)))
    }
}

/// Maps a FoundationDB error to the trait's meaning of it.
fn map_error(e: FdbError) -> Error {
    match e.code() {
        code::TRANSACTION_TOO_OLD => Error::TransactionTooOld {
            limit_ms: FDB_LIMITS.transaction_duration.as_millis() as u64,
        },
        code::TRANSACTION_TOO_LARGE | code::KEY_TOO_LARGE | code::VALUE_TOO_LARGE => {
            Error::LimitExceeded(e.message().to_string())
        }
        code::TRANSACTION_TIMED_OUT => fdb_error("transaction timed out: is the cluster up?", e),
        _ if e.is_maybe_committed() => Error::MaybeCommitted,
        _ if e.is_retryable() => Error::Conflict(e.message().to_string()),
        _ => fdb_error("transaction", e),
    }
}

fn fdb_error(context: &'static str, e: FdbError) -> Error {
    Error::backend(context, e)
}

#[async_trait]
impl KvStore for FdbStore {
    async fn begin(&self) -> Result<Box<dyn KvTransaction>> {
        Ok(Box::new(FdbTransaction {
            trx: self.new_transaction()?,
            prefix: self.prefix.clone(),
            tracker: LimitTracker::new(self.limits, &self.clock),
            failed: None,
        }))
    }

    async fn watch(&self, key: &[u8]) -> Result<Watch> {
        let trx = self.new_transaction()?;
        // A watch outlives its transaction, so the transaction's timeout must not apply.
        trx.set_option(TransactionOption::Timeout(0))
            .map_err(|e| fdb_error("set transaction options", e))?;
        let full = [self.prefix.as_slice(), key].concat();
        // Reading the key makes the watch compare against this transaction's snapshot.
        trx.get(&full, false).await.map_err(map_error)?;
        let fired = trx.watch(&full);
        trx.commit()
            .await
            .map_err(|e| map_error(FdbError::from(e)))?;
        Ok(Box::pin(async move { fired.await.map_err(map_error) }))
    }
}

struct FdbTransaction {
    trx: Transaction,
    prefix: Vec<u8>,
    tracker: LimitTracker,
    /// The first write that broke a limit; it fails the commit.
    failed: Option<Error>,
}

impl FdbTransaction {
    fn full(&self, key: &[u8]) -> Vec<u8> {
        [self.prefix.as_slice(), key].concat()
    }

    fn check_write(&mut self, key: &[u8], value_len: usize) -> bool {
        if self.failed.is_some() {
            return false;
        }
        match self.tracker.write(key, value_len) {
            Ok(()) => true,
            Err(e) => {
                self.failed = Some(e);
                false
            }
        }
    }
}

#[async_trait]
impl KvTransaction for FdbTransaction {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tracker.key(key)?;
        self.tracker.alive()?;
        let value = self
            .trx
            .get(&self.full(key), false)
            .await
            .map_err(map_error)?;
        Ok(value.map(|v| v.to_vec()))
    }

    async fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<KeyValue>> {
        self.tracker.alive()?;
        let mut option = RangeOption::from((self.full(begin), self.full(end)));
        option.limit = (limit > 0).then_some(limit);
        option.reverse = reverse;
        let mut out = Vec::new();
        let mut next = Some(option);
        let mut iteration = 1;
        // One call returns a batch; a limit or the end of the range ends the loop.
        while let Some(option) = next.take() {
            let batch = self
                .trx
                .get_range(&option, iteration, false)
                .await
                .map_err(map_error)?;
            for kv in batch.iter() {
                let key = kv
                    .key()
                    .strip_prefix(self.prefix.as_slice())
                    .ok_or_else(|| Error::Corrupt {
                        key: String::from_utf8_lossy(kv.key()).into_owned(),
                        reason: "a range read returned a key outside the store's prefix"
                            .to_string(),
                    })?;
                out.push((key.to_vec(), kv.value().to_vec()));
            }
            if limit > 0 && out.len() >= limit {
                out.truncate(limit);
                break;
            }
            next = option.next_range(&batch);
            iteration += 1;
        }
        Ok(out)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        if self.check_write(key, value.len()) {
            self.trx.set(&self.full(key), value);
        }
    }

    fn clear(&mut self, key: &[u8]) {
        if self.check_write(key, 0) {
            self.trx.clear(&self.full(key));
        }
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) {
        if self.check_write(begin, end.len()) {
            self.trx.clear_range(&self.full(begin), &self.full(end));
        }
    }

    fn atomic_add(&mut self, key: &[u8], delta: i64) {
        if self.check_write(key, 8) {
            self.trx
                .atomic_op(&self.full(key), &delta.to_le_bytes(), MutationType::Add);
        }
    }

    async fn commit(mut self: Box<Self>) -> Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.tracker.alive()?;
        let FdbTransaction { trx, .. } = *self;
        match trx.commit().await {
            Ok(_) => Ok(()),
            Err(failed) => {
                let error = *failed;
                // `on_error` waits out FoundationDB's recommended backoff; it fails at
                // once for an error that retrying cannot fix.
                match failed.on_error().await {
                    Ok(_) => Err(map_error(error)),
                    Err(final_error) => Err(map_error(final_error)),
                }
            }
        }
    }
}

/// These run only against a real cluster: `FDB_CLUSTER_FILE=/etc/foundationdb/fdb.cluster
/// cargo test -p strata-metastore --features fdb`. Each store gets a fresh prefix. The
/// typed layer's tests run on FoundationDB too (see `test_metastores` in `lib.rs`).
#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::*;

    pub(crate) fn cluster_file() -> Option<String> {
        let file = std::env::var("FDB_CLUSTER_FILE").ok();
        if file.is_none() {
            eprintln!("skipped: FDB_CLUSTER_FILE is not set");
        }
        file
    }

    pub(crate) fn fresh(cluster_file: &str) -> FdbStore {
        let prefix = format!("strata-test-{}", uuid::Uuid::new_v4().simple());
        FdbStore::open(Some(cluster_file), &prefix).expect("open FoundationDB")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_conformance_suite() {
        let Some(file) = cluster_file() else { return };
        let stores = std::sync::Mutex::new(Vec::new());
        let factory = |clock: Arc<dyn strata_core::clock::Clock>| -> Arc<dyn KvStore> {
            let store = fresh(&file).with_clock(clock);
            stores.lock().expect("lock").push(store.clone());
            Arc::new(store)
        };
        crate::conformance::run_all(&factory).await;
        for store in stores.into_inner().expect("lock") {
            store.clear_all().await.expect("clean up");
        }
    }
}
