//! The embedded backend: one SQLite file (WAL mode) that several processes on one machine
//! may share, which is how local multi-process clusters run.
//!
//! Transactions are pessimistic: `BEGIN IMMEDIATE` takes SQLite's write lock for the whole
//! transaction, so transactions are serializable and never conflict at commit; a lock
//! held by another process past the transaction time limit surfaces as a retryable
//! [`Error::Conflict`]. Writes go straight into the SQLite transaction, which gives
//! read-your-writes; the first failed write fails the commit.
//!
//! SQLite calls run on the calling task: each is a few microseconds on a local file, and
//! waiting for another process's lock is done with async backoff, not by blocking.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use strata_core::clock::{Clock, SystemClock};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::{Error, Result};
use crate::kv::{FDB_LIMITS, KeyValue, KvStore, KvTransaction, LimitTracker, Limits, Watch};

/// How long opening waits for another process that holds the file's lock.
const SETUP_WAIT: Duration = Duration::from_secs(10);

/// How often a watch re-reads its key. SQLite cannot tell one process about another's
/// commit, so watches poll; a read of one key in WAL mode takes microseconds and no lock.
const WATCH_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    limits: Limits,
    clock: Arc<dyn Clock>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        // Another process may be setting the file up at this moment. The busy timeout
        // covers most of that wait, but SQLite answers some lock conflicts at once
        // without calling its busy handler (switching a new file to WAL while another
        // connection does): those are retried here, within the same bound.
        let pause = Duration::from_millis(10);
        let mut attempts = SETUP_WAIT.as_millis() / pause.as_millis();
        let conn = loop {
            match Self::set_up(path) {
                Err(e) if is_busy(&e) && attempts > 0 => {
                    attempts -= 1;
                    std::thread::sleep(pause);
                }
                other => break other.map_err(|e| Error::backend("prepare sqlite metastore", e))?,
            }
        };
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            path: path.to_path_buf(),
            limits: FDB_LIMITS,
            clock: SystemClock::shared(),
        })
    }

    /// Opens a connection and sets the file up: WAL, full sync, the table.
    /// Transactions themselves wait with async backoff, in `begin`.
    fn set_up(path: &Path) -> rusqlite::Result<Connection> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(SETUP_WAIT)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY NOT NULL, value BLOB NOT NULL) WITHOUT ROWID",
        )?;
        conn.busy_timeout(Duration::ZERO)?;
        Ok(conn)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This store, timing its transactions (and its waits) on `clock`.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> SqliteStore {
        SqliteStore { clock, ..self }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

fn sql_error(context: &'static str, e: rusqlite::Error) -> Error {
    if is_busy(&e) {
        Error::Conflict(format!("{context}: {e}"))
    } else {
        Error::backend(context, e)
    }
}

#[async_trait]
impl KvStore for SqliteStore {
    async fn begin(&self) -> Result<Box<dyn KvTransaction>> {
        let conn = Arc::clone(&self.conn).lock_owned().await;
        let started = self.clock.monotonic();
        let mut backoff = Duration::from_millis(1);
        loop {
            match disk(|| conn.execute_batch("BEGIN IMMEDIATE")) {
                Ok(()) => break,
                Err(e)
                    if is_busy(&e)
                        && self.clock.monotonic() - started < self.limits.transaction_duration =>
                {
                    self.clock.sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(sql_error("begin transaction", e)),
            }
        }
        Ok(Box::new(SqliteTransaction {
            conn,
            tracker: LimitTracker::new(self.limits, &self.clock),
            failed: None,
            finished: false,
        }))
    }

    async fn watch(&self, key: &[u8]) -> Result<Watch> {
        let initial = self.read_committed(key).await?;
        let store = self.clone();
        let key = key.to_vec();
        Ok(Box::pin(async move {
            loop {
                store.clock.sleep(WATCH_POLL).await;
                match store.read_committed(&key).await {
                    Ok(now) if now != initial => return Ok(()),
                    Ok(_) | Err(Error::Conflict(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }))
    }
}

impl SqliteStore {
    /// The committed value at `key`, read outside any transaction.
    async fn read_committed(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let conn = self.conn.lock().await;
        read_value(&conn, key)
    }
}

fn read_value(conn: &Connection, key: &[u8]) -> Result<Option<Vec<u8>>> {
    disk(|| {
        conn.prepare_cached("SELECT value FROM kv WHERE key = ?1")
            .and_then(|mut s| s.query_row(params![key], |r| r.get(0)).optional())
            .map_err(|e| sql_error("read", e))
    })
}

/// Runs SQLite work that may read the file or fsync it (a commit) without stalling the
/// runtime while the connection is held: on a multi-threaded runtime the worker hands
/// its other tasks to another thread meanwhile (`block_in_place`); on a current-thread
/// runtime (some tests) or outside one it runs in place. See
/// `docs/decisions/0005-disk-io-and-the-runtime.md`.
fn disk<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

struct SqliteTransaction {
    conn: OwnedMutexGuard<Connection>,
    tracker: LimitTracker,
    /// The first write that failed; it fails the commit.
    failed: Option<Error>,
    finished: bool,
}

impl SqliteTransaction {
    fn write(&mut self, op: impl FnOnce(&Connection) -> rusqlite::Result<()>) {
        if self.failed.is_none()
            && let Err(e) = op(&self.conn)
        {
            self.failed = Some(sql_error("write", e));
        }
    }

    fn read_value(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        read_value(&self.conn, key)
    }
}

#[async_trait]
impl KvTransaction for SqliteTransaction {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tracker.key(key)?;
        self.tracker.alive()?;
        self.read_value(key)
    }

    async fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<KeyValue>> {
        self.tracker.alive()?;
        let sql = if reverse {
            "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key DESC LIMIT ?3"
        } else {
            "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key ASC LIMIT ?3"
        };
        let limit = if limit == 0 { -1 } else { limit as i64 };
        let conn = &self.conn;
        disk(|| {
            let mut stmt = conn
                .prepare_cached(sql)
                .map_err(|e| sql_error("range read", e))?;
            stmt.query_map(params![begin, end, limit], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<KeyValue>>>())
                .map_err(|e| sql_error("range read", e))
        })
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        if let Err(e) = self.tracker.write(key, value.len()) {
            self.failed.get_or_insert(e);
            return;
        }
        self.write(|c| {
            c.prepare_cached("INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")?
                .execute(params![key, value])
                .map(drop)
        });
    }

    fn clear(&mut self, key: &[u8]) {
        if let Err(e) = self.tracker.write(key, 0) {
            self.failed.get_or_insert(e);
            return;
        }
        self.write(|c| {
            c.prepare_cached("DELETE FROM kv WHERE key = ?1")?
                .execute(params![key])
                .map(drop)
        });
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) {
        if let Err(e) = self.tracker.write(begin, end.len()) {
            self.failed.get_or_insert(e);
            return;
        }
        self.write(|c| {
            c.prepare_cached("DELETE FROM kv WHERE key >= ?1 AND key < ?2")?
                .execute(params![begin, end])
                .map(drop)
        });
    }

    fn atomic_add(&mut self, key: &[u8], delta: i64) {
        let current = match self.read_value(key) {
            Ok(v) => v,
            Err(e) => {
                self.failed.get_or_insert(e);
                return;
            }
        };
        let mut le = [0u8; 8];
        if let Some(v) = current {
            let n = v.len().min(8);
            le[..n].copy_from_slice(&v[..n]);
        }
        let sum = i64::from_le_bytes(le).wrapping_add(delta);
        self.set(key, &sum.to_le_bytes());
    }

    async fn commit(mut self: Box<Self>) -> Result<()> {
        self.finished = true;
        if let Some(e) = self.failed.take() {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(e);
        }
        if let Err(e) = self.tracker.alive() {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(e);
        }
        let conn = &self.conn;
        if let Err(e) = disk(|| conn.execute_batch("COMMIT")) {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(sql_error("commit", e));
        }
        Ok(())
    }
}

impl Drop for SqliteTransaction {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_conformance_suite() {
        let dirs = std::sync::Mutex::new(Vec::new());
        let factory = |clock: Arc<dyn Clock>| -> Arc<dyn KvStore> {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = SqliteStore::open(&dir.path().join("m.sqlite"))
                .expect("open")
                .with_clock(clock);
            dirs.lock().expect("lock").push(dir);
            Arc::new(store)
        };
        crate::conformance::run_all(&factory).await;
    }

    /// Agents started together open one file at once; none may fail on the lock.
    #[test]
    fn concurrent_opens_of_a_new_file_all_succeed() {
        for round in 0..5 {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("m.sqlite");
            let openers: Vec<_> = (0..6)
                .map(|_| {
                    let p = path.clone();
                    std::thread::spawn(move || SqliteStore::open(&p).map(drop))
                })
                .collect();
            for o in openers {
                o.join()
                    .expect("thread")
                    .unwrap_or_else(|e| panic!("round {round}: {e}"));
            }
        }
    }
}
