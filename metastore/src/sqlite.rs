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
//!
//! Commits are grouped (group commit): each transaction is a savepoint inside one SQLite
//! transaction, and a transaction that finishes while another is already waiting for
//! the connection leaves the SQLite transaction open for it; the last of the group
//! commits them all with one fsync, and every member's `commit` returns once that
//! commit is durable (or fails with it). A group holds at most [`GROUP_MEMBERS`]
//! transactions and stays open at most [`GROUP_WINDOW`]. A later member may read an
//! earlier member's writes before they are durable, but no caller sees anything before
//! its own commit returns, and the group is durable or lost as one: as if the
//! transactions had run one after another and the last had failed, taking the others
//! with it. Without contention nothing waits: a lone transaction commits at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// The most transactions one fsync makes durable.
const GROUP_MEMBERS: usize = 128;
/// How long a group stays open after its first member: the most a transaction's commit
/// waits for later ones (then one fsync).
const GROUP_WINDOW: Duration = Duration::from_millis(5);

#[derive(Debug, Clone)]
pub struct SqliteStore {
    conn: Arc<ConnectionThread>,
    /// Held for a whole transaction (and a read outside one): the connection serves one
    /// at a time.
    lock: Arc<Mutex<()>>,
    /// How many tasks wait for `lock` now: a finishing transaction leaves its group open
    /// for the next only while one waits.
    waiting: Arc<AtomicUsize>,
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
            waiting: Arc::default(),
            path: path.to_path_buf(),
            limits: FDB_LIMITS,
            clock: SystemClock::shared(),
        })
    }

    /// Opens a connection and sets the file up: WAL, full sync, the table.
    /// Transactions themselves wait with async backoff, in `begin`.
    fn set_up(path: &Path) -> rusqlite::Result<Connection> {
        // Created readable by its owner only (0600): it holds the SCRAM verifiers.
        // SQLite gives its WAL and shared-memory files the database file's mode.
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| {
                    rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                        Some(format!("cannot create {}: {e}", path.display())),
                    )
                })?;
        }
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
        let guard = self.take_lock().await;
        let started = self.clock.monotonic();
        let mut backoff = Duration::from_millis(1);
        loop {
            let (tx, opened) = oneshot::channel();
            let next = self.next_member();
            let clock = Arc::clone(&self.clock);
            self.conn.submit(move |c| {
                // A member nobody is left to end (its begin was given up) ends at once.
                if let Err(Ok(())) = tx.send(open_member(c, clock.monotonic())) {
                    let _ = end_member(c, false, next(), None);
                }
            });
            let opened = opened.await.map_err(|_| thread_gone())?;
            match opened {
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
            guard: Some(guard),
            next_member: Arc::new(self.next_member()),
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
    /// The committed value at `key`, read outside any transaction (a group still open
    /// is committed first).
    async fn read_committed(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let _one_at_a_time = self.take_lock().await;
        let key = key.to_vec();
        self.conn
            .run(move |c| {
                commit_group(c);
                read_value(c, &key)
            })
            .await?
    }

    /// For a member ending on the connection's thread: the time now if another
    /// transaction waits for the connection (the group may stay open for it), else
    /// `None`.
    fn next_member(&self) -> impl Fn() -> Option<Duration> + Send + Sync + 'static {
        let (waiting, clock) = (Arc::clone(&self.waiting), Arc::clone(&self.clock));
        move || (waiting.load(Ordering::SeqCst) > 0).then(|| clock.monotonic())
    }

    /// Waits for the connection, counted in `waiting` meanwhile. A wait given up leaves
    /// behind a job that commits an open group nobody else will come for.
    async fn take_lock(&self) -> OwnedMutexGuard<()> {
        struct Waiting<'a>(&'a SqliteStore, bool);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                let left = self.0.waiting.fetch_sub(1, Ordering::SeqCst) - 1;
                if !self.1 && left == 0 {
                    let waiting = Arc::clone(&self.0.waiting);
                    self.0.conn.submit(move |c| {
                        if waiting.load(Ordering::SeqCst) == 0 {
                            commit_group(c);
                        }
                    });
                }
            }
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut waiting = Waiting(self, false);
        let guard = Arc::clone(&self.lock).lock_owned().await;
        waiting.1 = true;
        guard
    }
}

/// The connection thread's own state: the group of transactions its open SQLite
/// transaction holds. Only jobs touch it, one at a time.
#[derive(Default)]
struct Group {
    /// Whether a SQLite transaction is open.
    open: bool,
    /// Whether a member is between its savepoint and its end: nothing may commit then.
    member_active: bool,
    /// When the group's first member began (the store clock's monotonic time).
    opened: Duration,
    members: usize,
    /// The members that finished and wait for the group's commit.
    durable: Vec<oneshot::Sender<Result<()>>>,
    /// SQLite commits so far (each one fsync).
    commits: u64,
}

/// The connection and its group, owned by the connection's thread; jobs get it.
struct Conn {
    sql: Connection,
    group: std::cell::RefCell<Group>,
}

impl std::ops::Deref for Conn {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.sql
    }
}

impl Conn {
    fn group<T>(&self, f: impl FnOnce(&mut Group) -> T) -> T {
        f(&mut self.group.borrow_mut())
    }
}

/// Starts a member: opens a SQLite transaction unless a group's is open, then the
/// member's savepoint.
fn open_member(c: &Conn, now: Duration) -> rusqlite::Result<()> {
    if !c.group(|g| g.open) {
        c.execute_batch("BEGIN IMMEDIATE")?;
        c.group(|g| {
            g.open = true;
            g.opened = now;
            g.members = 0;
        });
    }
    if let Err(e) = c.execute_batch("SAVEPOINT member") {
        commit_group(c);
        return Err(e);
    }
    c.group(|g| {
        g.member_active = true;
        g.members += 1;
    });
    Ok(())
}

/// Ends the active member: keeps its writes (`keep`) or undoes them. Then commits the
/// group, unless `wait` asks to leave it open for the next member and the group has
/// room and time left (at `now`); `durable` learns when its writes are durable (or
/// lost).
fn end_member(
    c: &Conn,
    keep: bool,
    wait: Option<Duration>,
    durable: Option<oneshot::Sender<Result<()>>>,
) -> Result<()> {
    let undo = |c: &Conn| c.execute_batch("ROLLBACK TO member; RELEASE member");
    let ended = if keep {
        c.execute_batch("RELEASE member").map_err(|e| {
            let _ = undo(c);
            sql_error("commit", e)
        })
    } else {
        undo(c).map_err(|e| sql_error("rollback", e))
    };
    let stay_open = c.group(|g| {
        g.member_active = false;
        if let (Ok(()), Some(durable)) = (&ended, durable) {
            g.durable.push(durable);
        }
        wait.is_some_and(|now| {
            g.members < GROUP_MEMBERS && now.saturating_sub(g.opened) < GROUP_WINDOW
        })
    });
    if !stay_open || ended.is_err() {
        commit_group(c);
    }
    ended
}

/// Commits the open group, if any and no member is active, and tells its members.
fn commit_group(c: &Conn) {
    let Some(durable) = c.group(|g| {
        (g.open && !g.member_active).then(|| {
            g.open = false;
            g.commits += 1;
            std::mem::take(&mut g.durable)
        })
    }) else {
        return;
    };
    let committed = c.execute_batch("COMMIT").inspect_err(|_| {
        let _ = c.execute_batch("ROLLBACK");
    });
    metrics::counter!("strata_metastore_commits_total").increment(1);
    for member in durable {
        let _ = member.send(
            committed
                .as_ref()
                .map(drop)
                .map_err(|e| Error::backend("commit", std::io::Error::other(e.to_string()))),
        );
    }
}

fn read_value(conn: &Connection, key: &[u8]) -> Result<Option<Vec<u8>>> {
    conn.prepare_cached("SELECT value FROM kv WHERE key = ?1")
        .and_then(|mut s| s.query_row(params![key], |r| r.get(0)).optional())
        .map_err(|e| sql_error("read", e))
}

type Job = Box<dyn FnOnce(&Conn) + Send>;

fn thread_gone() -> Error {
    Error::backend(
        "sqlite thread",
        std::io::Error::other("the connection's thread is gone"),
    )
}

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
                let conn = Conn {
                    sql: conn,
                    group: Default::default(),
                };
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
        f: impl FnOnce(&Conn) -> T + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.submit(move |c| {
            let _ = tx.send(f(c));
        });
        rx.await.map_err(|_| thread_gone())
    }

    /// Runs `f` on the connection without waiting: jobs sent later see it done.
    fn submit(&self, f: impl FnOnce(&Conn) + Send + 'static) {
        // A send fails only once the thread is gone; the next `run` reports that.
        let _ = self.jobs.send(Box::new(f));
    }
}

struct SqliteTransaction {
    conn: Arc<ConnectionThread>,
    /// The connection, until the transaction ends (its commit may still be waiting for
    /// its group's).
    guard: Option<OwnedMutexGuard<()>>,
    /// Whether another transaction waits for the connection (see `next_member`).
    next_member: Arc<dyn Fn() -> Option<Duration> + Send + Sync>,
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
        let next = Arc::clone(&self.next_member);
        let (durable, durable_rx) = oneshot::channel();
        // The failures of writes still queued are known only on the thread, after them.
        self.conn
            .run(move |c| {
                let earlier = failed.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(e) = earlier.or(alive.err()) {
                    let _ = end_member(c, false, next(), None);
                    return Err(e);
                }
                end_member(c, true, next(), Some(durable))
            })
            .await??;
        // The next transaction may run in this one's group now.
        self.guard = None;
        durable_rx.await.map_err(|_| thread_gone())?
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
            let next = Arc::clone(&self.next_member);
            self.conn.submit(move |c| {
                let _ = end_member(c, false, next(), None);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::transact;

    fn store_in(dir: &tempfile::TempDir) -> SqliteStore {
        SqliteStore::open(&dir.path().join("m.sqlite")).expect("open")
    }

    /// SQLite commits (fsyncs) so far on this store's connection.
    async fn commits(store: &SqliteStore) -> u64 {
        store
            .conn
            .run(|c| c.group(|g| g.commits))
            .await
            .expect("run")
    }

    /// Waits until `n` tasks wait for the store's connection.
    async fn until_waiting(store: &SqliteStore, n: usize) {
        while store.waiting.load(Ordering::SeqCst) != n {
            tokio::task::yield_now().await;
        }
    }

    async fn committed(path: &Path, key: &[u8]) -> Option<Vec<u8>> {
        // Another connection sees only what SQLite committed.
        SqliteStore::open(path)
            .expect("open")
            .read_committed(key)
            .await
            .expect("read")
    }

    /// Many transactions at once share fsyncs, and every one of them is durable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_transactions_share_commits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(store_in(&dir));
        let before = commits(&store).await;
        let tasks: Vec<_> = (0..200u32)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    transact(store.as_ref(), |t| {
                        Box::pin(async move {
                            t.atomic_add(b"count", 1);
                            t.set(format!("k{i}").as_bytes(), &i.to_le_bytes());
                            Ok(())
                        })
                    })
                    .await
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task").expect("transaction");
        }
        let fsyncs = commits(&store).await - before;
        assert!(fsyncs < 100, "200 transactions took {fsyncs} commits");
        let path = dir.path().join("m.sqlite");
        assert_eq!(
            committed(&path, b"count").await,
            Some(200i64.to_le_bytes().to_vec())
        );
        for i in [0u32, 99, 199] {
            let key = format!("k{i}");
            assert_eq!(
                committed(&path, key.as_bytes()).await,
                Some(i.to_le_bytes().to_vec())
            );
        }
    }

    /// A member that fails leaves nothing behind, and the group's others are committed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_member_leaves_its_group_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(store_in(&dir));
        let mut first = store.begin().await.expect("begin");
        let waiter = Arc::clone(&store);
        let second = tokio::spawn(async move {
            let mut t = waiter.begin().await.expect("begin");
            t.set(b"second", b"2");
            t.set(b"too big", &vec![0u8; 200_000]);
            t.commit().await
        });
        until_waiting(&store, 1).await;
        first.set(b"first", b"1");
        // Another waits: the group stays open for it; its failure commits the group.
        first.commit().await.expect("first commit");
        assert!(second.await.expect("task").is_err(), "an oversized value");
        let path = dir.path().join("m.sqlite");
        assert_eq!(committed(&path, b"first").await, Some(b"1".to_vec()));
        assert_eq!(committed(&path, b"second").await, None);
        assert_eq!(committed(&path, b"too big").await, None);
    }

    /// The transaction a group was left open for gives up waiting: the group is
    /// committed anyway, and its member's commit returns.
    #[tokio::test]
    async fn a_group_whose_next_member_gives_up_is_committed() {
        use futures::FutureExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(store_in(&dir));
        let mut first = store.begin().await.expect("begin");
        let mut next = Box::pin(store.take_lock());
        assert!(
            (&mut next).now_or_never().is_none(),
            "queued behind the first"
        );
        first.set(b"first", b"1");
        let committing = tokio::spawn(first.commit());
        let deferred = || store.conn.run(|c| c.group(|g| g.durable.len()));
        let left_open = async {
            while deferred().await.expect("run") == 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), left_open)
            .await
            .expect("the group is left open for the transaction waiting");
        drop(next);
        let outcome = tokio::time::timeout(Duration::from_secs(10), committing).await;
        outcome
            .expect("the commit returns")
            .expect("task")
            .expect("commit");
        let path = dir.path().join("m.sqlite");
        assert_eq!(committed(&path, b"first").await, Some(b"1".to_vec()));
    }

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
