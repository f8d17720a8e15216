//! The conformance suite every [`KvStore`] backend must pass: the contract of `kv.rs`,
//! checked the same way for SQLite, FoundationDB and the fault-injecting wrapper.
//!
//! A backend's tests call [`run_all`] with a factory for fresh, empty stores.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use strata_core::clock::{Clock, ManualClock, SystemClock};

use crate::error::Error;
use crate::kv::{FDB_LIMITS, KvStore, prefix_end, transact};

/// Makes a fresh, empty store (its own file, prefix or directory).
/// Makes a fresh, empty store timing its transactions on the clock given.
pub type Factory<'a> = &'a (dyn Fn(Arc<dyn Clock>) -> Arc<dyn KvStore> + Sync);

/// Runs every check; panics with the name of the first that fails.
pub async fn run_all(factory: Factory<'_>) {
    let new_store = || factory(SystemClock::shared());
    eprintln!("conformance: read_your_writes");
    read_your_writes(new_store().as_ref()).await;
    eprintln!("conformance: range_reads");
    range_reads(new_store().as_ref()).await;
    eprintln!("conformance: clear_range");
    clear_range(new_store().as_ref()).await;
    eprintln!("conformance: atomic_add");
    atomic_add(new_store().as_ref()).await;
    eprintln!("conformance: uncommitted_writes_vanish");
    uncommitted_writes_vanish(new_store().as_ref()).await;
    eprintln!("conformance: concurrent_read_modify_write");
    concurrent_read_modify_write(new_store()).await;
    eprintln!("conformance: watch");
    watch(new_store().as_ref()).await;
    eprintln!("conformance: size_limits");
    size_limits(new_store().as_ref()).await;
    eprintln!("conformance: time_limit");
    let clock = ManualClock::new(0);
    time_limit(factory(Arc::new(clock.clone())).as_ref(), &clock).await;
}

async fn read_your_writes(store: &dyn KvStore) {
    let mut t = store.begin().await.expect("begin");
    assert_eq!(
        t.get(b"a").await.expect("get"),
        None,
        "read_your_writes: empty store"
    );
    t.set(b"a", b"1");
    assert_eq!(
        t.get(b"a").await.expect("get").as_deref(),
        Some(&b"1"[..]),
        "read_your_writes: own set"
    );
    t.clear(b"a");
    assert_eq!(
        t.get(b"a").await.expect("get"),
        None,
        "read_your_writes: own clear"
    );
    t.set(b"a", b"2");
    t.commit().await.expect("commit");
    let mut t = store.begin().await.expect("begin");
    assert_eq!(
        t.get(b"a").await.expect("get").as_deref(),
        Some(&b"2"[..]),
        "read_your_writes: committed"
    );
}

async fn range_reads(store: &dyn KvStore) {
    let mut t = store.begin().await.expect("begin");
    for k in [&b"r/a"[..], b"r/b", b"r/c", b"r/d", b"s/a", b"r"] {
        t.set(k, k);
    }
    t.commit().await.expect("commit");
    let mut t = store.begin().await.expect("begin");
    let keys = |kvs: Vec<(Vec<u8>, Vec<u8>)>| kvs.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    let all = keys(
        t.get_range(b"r/", &prefix_end(b"r/"), 0, false)
            .await
            .expect("range"),
    );
    assert_eq!(
        all,
        [
            b"r/a".to_vec(),
            b"r/b".to_vec(),
            b"r/c".to_vec(),
            b"r/d".to_vec()
        ],
        "range_reads: forward"
    );
    let two = keys(
        t.get_range(b"r/", &prefix_end(b"r/"), 2, false)
            .await
            .expect("range"),
    );
    assert_eq!(
        two,
        [b"r/a".to_vec(), b"r/b".to_vec()],
        "range_reads: limit"
    );
    let back = keys(
        t.get_range(b"r/", &prefix_end(b"r/"), 3, true)
            .await
            .expect("range"),
    );
    assert_eq!(
        back,
        [b"r/d".to_vec(), b"r/c".to_vec(), b"r/b".to_vec()],
        "range_reads: reverse with limit"
    );
    let half_open = keys(t.get_range(b"r/b", b"r/d", 0, false).await.expect("range"));
    assert_eq!(
        half_open,
        [b"r/b".to_vec(), b"r/c".to_vec()],
        "range_reads: end excluded"
    );
    // Uncommitted writes show in ranges too.
    t.set(b"r/bb", b"x");
    t.clear(b"r/c");
    let mixed = keys(
        t.get_range(b"r/", &prefix_end(b"r/"), 0, false)
            .await
            .expect("range"),
    );
    assert_eq!(
        mixed,
        [
            b"r/a".to_vec(),
            b"r/b".to_vec(),
            b"r/bb".to_vec(),
            b"r/d".to_vec()
        ],
        "range_reads: own writes"
    );
}

async fn clear_range(store: &dyn KvStore) {
    let mut t = store.begin().await.expect("begin");
    for k in [&b"c/1"[..], b"c/2", b"c/3", b"d/1"] {
        t.set(k, b"v");
    }
    t.commit().await.expect("commit");
    let mut t = store.begin().await.expect("begin");
    t.clear_range(b"c/", &prefix_end(b"c/"));
    t.commit().await.expect("commit");
    let mut t = store.begin().await.expect("begin");
    assert!(
        t.get_range(b"c/", &prefix_end(b"c/"), 0, false)
            .await
            .expect("range")
            .is_empty(),
        "clear_range"
    );
    assert!(
        t.get(b"d/1").await.expect("get").is_some(),
        "clear_range: outside untouched"
    );
}

async fn atomic_add(store: &dyn KvStore) {
    for delta in [5i64, -2, 10] {
        let mut t = store.begin().await.expect("begin");
        t.atomic_add(b"n", delta);
        t.commit().await.expect("commit");
    }
    let mut t = store.begin().await.expect("begin");
    let v = t.get(b"n").await.expect("get").expect("set by add");
    assert_eq!(
        i64::from_le_bytes(v.try_into().expect("8 bytes")),
        13,
        "atomic_add: little-endian sum"
    );
}

async fn uncommitted_writes_vanish(store: &dyn KvStore) {
    let mut t = store.begin().await.expect("begin");
    t.set(b"gone", b"1");
    drop(t);
    let mut t = store.begin().await.expect("begin");
    assert_eq!(
        t.get(b"gone").await.expect("get"),
        None,
        "uncommitted_writes_vanish"
    );
}

/// Two tasks increment one key many times with read-modify-write transactions; with
/// serializable isolation and retries, no increment is lost.
async fn concurrent_read_modify_write(store: Arc<dyn KvStore>) {
    let per_task = 25;
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for _ in 0..per_task {
                    transact(store.as_ref(), |txn| {
                        async move {
                            let n = txn.get(b"counter").await?.map_or(0u64, |v| {
                                u64::from_be_bytes(v.as_slice().try_into().unwrap_or([0; 8]))
                            });
                            tokio::task::yield_now().await;
                            txn.set(b"counter", &(n + 1).to_be_bytes());
                            Ok(())
                        }
                        .boxed()
                    })
                    .await
                    .expect("transact");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("join");
    }
    let mut t = store.begin().await.expect("begin");
    let v = t.get(b"counter").await.expect("get").expect("counter");
    assert_eq!(
        u64::from_be_bytes(v.try_into().expect("8 bytes")),
        2 * per_task,
        "concurrent_read_modify_write"
    );
}

/// A watch started before a change resolves after it, for a set and for a clear.
async fn watch(store: &dyn KvStore) {
    for change in [Some(&b"1"[..]), None] {
        let watch = store.watch(b"watched").await.expect("watch");
        transact(store, |txn| {
            async move {
                match change {
                    Some(v) => txn.set(b"watched", v),
                    None => txn.clear(b"watched"),
                }
                Ok(())
            }
            .boxed()
        })
        .await
        .expect("transact");
        tokio::time::timeout(Duration::from_secs(10), watch)
            .await
            .expect("watch: resolves within 10 s of a change")
            .expect("watch");
    }
}

async fn size_limits(store: &dyn KvStore) {
    let limits = FDB_LIMITS;
    let big_value = vec![0u8; limits.value_bytes + 1];
    let mut t = store.begin().await.expect("begin");
    t.set(b"v", &big_value);
    let r = t.commit().await;
    assert!(
        matches!(r, Err(Error::LimitExceeded(_))),
        "size_limits: value: {r:?}"
    );
    let big_key = vec![b'k'; limits.key_bytes + 1];
    let mut t = store.begin().await.expect("begin");
    t.set(&big_key, b"v");
    assert!(
        matches!(t.commit().await, Err(Error::LimitExceeded(_))),
        "size_limits: key"
    );
    let mut t = store.begin().await.expect("begin");
    let value = vec![0u8; limits.value_bytes];
    for i in 0..(limits.transaction_bytes / limits.value_bytes + 1) {
        t.set(format!("many/{i}").as_bytes(), &value);
    }
    assert!(
        matches!(t.commit().await, Err(Error::LimitExceeded(_))),
        "size_limits: transaction"
    );
    let mut t = store.begin().await.expect("begin");
    assert!(
        t.get_range(b"many/", &prefix_end(b"many/"), 0, false)
            .await
            .expect("range")
            .is_empty(),
        "size_limits: nothing of a refused transaction is visible"
    );
    drop(t);
    // At the limits exactly, all is fine.
    let mut t = store.begin().await.expect("begin");
    t.set(&vec![b'k'; limits.key_bytes], &value);
    t.commit().await.expect("size_limits: at the limit");
}

/// A transaction older than the limit cannot commit (time is a manual clock: nothing
/// sleeps through the 5 s).
async fn time_limit(store: &dyn KvStore, clock: &ManualClock) {
    let mut t = store.begin().await.expect("begin");
    t.set(b"slow", b"1");
    clock.advance(FDB_LIMITS.transaction_duration + Duration::from_millis(1));
    assert!(
        matches!(t.commit().await, Err(Error::TransactionTooOld { .. })),
        "time_limit"
    );
}
