//! The embedded backend: one SQLite file (WAL mode) that several processes on one machine
//! may share, which is how local multi-process clusters run.
//!
//! Transactions are pessimistic: `BEGIN IMMEDIATE` takes SQLite's write lock for the whole
//! transaction, so transactions are serializable and never conflict at commit; a lock
//! held by another process past the transaction time limit surfaces as a retryable
//! [`Error::Conflict`]. Writes go straight into the SQLite transaction, which gives
//! read-your-writes; the first failed write fails the commit.
//!
//! SQLite calls run on a thread of their own, which owns the connection (the "I/O
//! thread per disk" of `docs/decisions/0005-disk-io-and-the-runtime.md`): a commit's
//! fsync or a page read never blocks a runtime worker, and the worker never migrates to
//! another OS thread for it. Tasks send the thread jobs and await their answers; the
//! thread runs jobs in the order sent, so a transaction's writes (sent without waiting)
//! come before its later reads and its commit. Waiting for another process's lock is
//! done with async backoff, not by blocking.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use strata_core::clock::{Clock, SystemClock};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};

use crate::error::{Error, Result};
use crate::kv::{FDB_LIMITS, KeyValue, KvStore, KvTransaction, LimitTracker, Limits, Watch};

/// How long opening waits for another process that holds the file's lock.
const SETUP_WAIT: Duration = Duration::from_secs(10);

/// How often a watch re-reads its key. SQLite cannot tell one process about another's
/// commit, so watches poll; a read of one key in WAL mode takes microseconds and no lock.
const WATCH_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct SqliteStore {
    conn: Arc<ConnectionThread>,
    /// Held for a whole transaction (and a read outside one): the connection serves one
    /// at a time.
    lock: Arc<Mutex<()>>,
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
            conn: Arc::new(ConnectionThread::start(conn)?),
            lock: Arc::new(Mutex::new(())),
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
        let guard = Arc::clone(&self.lock).lock_owned().await;
        let started = self.clock.monotonic();
        let mut backoff = Duration::from_millis(1);
        loop {
            match self
                .conn
                .run(|c| c.execute_batch("BEGIN IMMEDIATE"))
                .await?
            {
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
            conn: Arc::clone(&self.conn),
            _guard: guard,
            tracker: LimitTracker::new(self.limits, &self.clock),
            failed: Arc::default(),
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
        let _one_at_a_time = self.lock.lock().await;
        let key = key.to_vec();
        self.conn.run(move |c| read_value(c, &key)).await?
    }
}

fn read_value(conn: &Connection, key: &[u8]) -> Result<Option<Vec<u8>>> {
    conn.prepare_cached("SELECT value FROM kv WHERE key = ?1")
        .and_then(|mut s| s.query_row(params![key], |r| r.get(0)).optional())
        .map_err(|e| sql_error("read", e))
}

type Job = Box<dyn FnOnce(&Connection) + Send>;

/// The thread that owns the connection and runs jobs on it, in the order sent. It ends
/// when the last handle to it is dropped.
#[derive(Debug)]
struct ConnectionThread {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl ConnectionThread {
    fn start(conn: Connection) -> Result<ConnectionThread> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sqlite-metastore".to_string())
            .spawn(move || {
                for job in queue {
                    job(&conn);
                }
            })
            .map_err(|e| Error::backend("start the sqlite thread", e))?;
        Ok(ConnectionThread { jobs })
    }

    /// Runs `f` on the connection and waits (without blocking) for its answer.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> T + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.submit(move |c| {
            let _ = tx.send(f(c));
        });
        rx.await.map_err(|_| {
            Error::backend(
                "sqlite thread",
                std::io::Error::other("the connection's thread is gone"),
            )
        })
    }

    /// Runs `f` on the connection without waiting: jobs sent later see it done.
    fn submit(&self, f: impl FnOnce(&Connection) + Send + 'static) {
        // A send fails only once the thread is gone; the next `run` reports that.
        let _ = self.jobs.send(Box::new(f));
    }
}

struct SqliteTransaction {
    conn: Arc<ConnectionThread>,
    _guard: OwnedMutexGuard<()>,
    tracker: LimitTracker,
    /// The first write that failed (on the connection's thread); it fails the commit.
    failed: Arc<std::sync::Mutex<Option<Error>>>,
    finished: bool,
}

impl SqliteTransaction {
    /// Sends a write; its failure, if any, is kept for the commit.
    fn write(&mut self, op: impl FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static) {
        let failed = Arc::clone(&self.failed);
        self.conn.submit(move |c| {
            if let Err(e) = op(c) {
                failed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(sql_error("write", e));
            }
        });
    }

    fn fail(&mut self, e: Error) {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    }
}

#[async_trait]
impl KvTransaction for SqliteTransaction {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tracker.key(key)?;
        self.tracker.alive()?;
        let key = key.to_vec();
        self.conn.run(move |c| read_value(c, &key)).await?
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
        let (begin, end) = (begin.to_vec(), end.to_vec());
        self.conn
            .run(move |c| {
                let mut stmt = c
                    .prepare_cached(sql)
                    .map_err(|e| sql_error("range read", e))?;
                stmt.query_map(params![begin, end, limit], |r| Ok((r.get(0)?, r.get(1)?)))
                    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<KeyValue>>>())
                    .map_err(|e| sql_error("range read", e))
            })
            .await?
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        if let Err(e) = self.tracker.write(key, value.len()) {
            self.fail(e);
            return;
        }
        let (key, value) = (key.to_vec(), value.to_vec());
        self.write(move |c| upsert(c, &key, &value));
    }

    fn clear(&mut self, key: &[u8]) {
        if let Err(e) = self.tracker.write(key, 0) {
            self.fail(e);
            return;
        }
        let key = key.to_vec();
        self.write(move |c| {
            c.prepare_cached("DELETE FROM kv WHERE key = ?1")?
                .execute(params![key])
                .map(drop)
        });
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) {
        if let Err(e) = self.tracker.write(begin, end.len()) {
            self.fail(e);
            return;
        }
        let (begin, end) = (begin.to_vec(), end.to_vec());
        self.write(move |c| {
            c.prepare_cached("DELETE FROM kv WHERE key >= ?1 AND key < ?2")?
                .execute(params![begin, end])
                .map(drop)
        });
    }

    fn atomic_add(&mut self, key: &[u8], delta: i64) {
        if let Err(e) = self.tracker.write(key, 8) {
            self.fail(e);
            return;
        }
        let key = key.to_vec();
        // Read and write in one job, so nothing comes between them.
        self.write(move |c| {
            let current: Option<Vec<u8>> = c
                .prepare_cached("SELECT value FROM kv WHERE key = ?1")?
                .query_row(params![key], |r| r.get(0))
                .optional()?;
            let mut le = [0u8; 8];
            if let Some(v) = current {
                let n = v.len().min(8);
                le[..n].copy_from_slice(&v[..n]);
            }
            let sum = i64::from_le_bytes(le).wrapping_add(delta);
            upsert(c, &key, &sum.to_le_bytes())
        });
    }

    async fn commit(mut self: Box<Self>) -> Result<()> {
        self.finished = true;
        let alive = self.tracker.alive();
        let failed = Arc::clone(&self.failed);
        // The failures of writes still queued are known only on the thread, after them.
        self.conn
            .run(move |c| {
                let earlier = failed.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(e) = earlier.or(alive.err()) {
                    let _ = c.execute_batch("ROLLBACK");
                    return Err(e);
                }
                c.execute_batch("COMMIT").map_err(|e| {
                    let _ = c.execute_batch("ROLLBACK");
                    sql_error("commit", e)
                })
            })
            .await?
    }
}

fn upsert(c: &Connection, key: &[u8], value: &[u8]) -> rusqlite::Result<()> {
    c.prepare_cached(
        "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])
    .map(drop)
}

impl Drop for SqliteTransaction {
    fn drop(&mut self) {
        if !self.finished {
            // Queued before the lock is released: the next transaction begins after it.
            self.conn.submit(|c| {
                let _ = c.execute_batch("ROLLBACK");
            });
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
