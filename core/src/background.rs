//! Background work: what an agent does for itself rather than for a client (encoding
//! closed segments for the archive, merging archived objects, compacting logs) runs on a
//! few threads of its own, at a lower CPU priority than the threads serving requests,
//! and each kind within a byte rate (Kafka's
//! `remote.log.manager.copy.max.bytes.per.second` and
//! `log.cleaner.io.max.bytes.per.second` are the model).
//!
//! The request runtime never runs this work: a segment's encoding or a compaction that
//! takes a second of CPU would otherwise hold one of its worker threads, and every
//! request queued behind it, for that second. At the idle priority (Linux's
//! `SCHED_IDLE`, the default) the background runs only on CPU the foreground leaves
//! unused; at the low one (nice 10) it keeps a share of about a tenth when the CPU is
//! saturated, for agents that run hot all the time and must keep the archive moving.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::clock::Clock;

/// The kinds of background work, each with its own byte rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Closed segments read and encoded for the archive.
    Tiering,
    /// Logs compacted, and archived objects merged or compacted.
    Compaction,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Tiering, Kind::Compaction];

    /// Its metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Tiering => "tiering",
            Kind::Compaction => "compaction",
        }
    }
}

/// The CPU priority of the background threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// Linux's `SCHED_IDLE`: only CPU nothing else wants (a share of a few thousandths
    /// when the CPU is saturated).
    #[default]
    Idle,
    /// Nice 10: about a tenth of the CPU beside busy request threads.
    Low,
}

/// How the background pool is sized and limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Threads running background work (at least 1).
    pub threads: usize,
    pub priority: Priority,
    /// Bytes a second each kind may process; 0: no limit.
    pub tiering_bytes_per_second: u64,
    pub compaction_bytes_per_second: u64,
}

impl Limits {
    /// Half the cores (at least one thread) at the idle priority, and no byte limits.
    pub fn for_this_machine() -> Limits {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Limits {
            threads: (cores / 2).max(1),
            priority: Priority::Idle,
            tiering_bytes_per_second: 0,
            compaction_bytes_per_second: 0,
        }
    }

    fn bytes_per_second(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Tiering => self.tiering_bytes_per_second,
            Kind::Compaction => self.compaction_bytes_per_second,
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The pool: threads at a lower priority taking jobs in the order they came, and a
/// byte rate for each kind.
pub struct Background {
    queue: Arc<Queue>,
    rates: [RateLimit; 2],
    threads: usize,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

/// The background work did not run to its end: its thread panicked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panicked {
    pub kind: &'static str,
}

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "background {} work panicked", self.kind)
    }
}

impl std::error::Error for Panicked {}

impl Background {
    /// Starts the pool's threads. They live as long as the process (they only wait
    /// while there is nothing to do).
    pub fn start(limits: Limits, clock: Arc<dyn Clock>) -> Arc<Background> {
        let queue = Arc::new(Queue::default());
        let threads = limits.threads.max(1);
        for i in 0..threads {
            let queue = Arc::clone(&queue);
            let priority = limits.priority;
            std::thread::Builder::new()
                .name(format!("strata-background-{i}"))
                .spawn(move || {
                    lower_priority(priority);
                    work(&queue);
                })
                .expect("start a background thread");
        }
        Arc::new(Background {
            queue,
            rates: Kind::ALL
                .map(|k| RateLimit::new(limits.bytes_per_second(k), Arc::clone(&clock))),
            threads,
        })
    }

    /// Runs `f`, which processes `bytes`, on the pool once `kind`'s rate allows it, and
    /// returns what it returns.
    pub async fn run<T: Send + 'static>(
        &self,
        kind: Kind,
        bytes: u64,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Panicked> {
        self.rate(kind).take(bytes).await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        {
            let mut jobs = self.queue.jobs.lock().unwrap_or_else(|p| p.into_inner());
            jobs.push_back(job);
            metrics::gauge!("strata_background_queued").set(jobs.len() as f64);
        }
        self.queue.ready.notify_one();
        metrics::counter!("strata_background_bytes_total", "kind" => kind.label()).increment(bytes);
        rx.await.map_err(|_| Panicked { kind: kind.label() })
    }

    /// Charges `bytes` that work of `kind` processed (its size known only once it is
    /// done: the next job waits for them), and waits as the rate asks.
    pub async fn charge(&self, kind: Kind, bytes: u64) {
        metrics::counter!("strata_background_bytes_total", "kind" => kind.label()).increment(bytes);
        self.rate(kind).take(bytes).await;
    }

    /// `kind`'s byte rate.
    pub fn rate(&self, kind: Kind) -> &RateLimit {
        match kind {
            Kind::Tiering => &self.rates[0],
            Kind::Compaction => &self.rates[1],
        }
    }
}

fn work(queue: &Queue) {
    loop {
        let job = {
            let mut jobs = queue.jobs.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(job) = jobs.pop_front() {
                    metrics::gauge!("strata_background_queued").set(jobs.len() as f64);
                    break job;
                }
                jobs = queue.ready.wait(jobs).unwrap_or_else(|p| p.into_inner());
            }
        };
        // A panicking job drops its sender, which its caller sees as `Panicked`; the
        // thread goes on with the next.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

/// Runs `f` at the request threads' priority, then lowers the thread's again: for the
/// short parts of background work that hold a lock request threads wait on (a
/// compaction swapping its copies into a log). At the idle priority a thread holding
/// such a lock on a saturated CPU could wait long for its turn, and every request behind
/// the lock with it. Elsewhere than on a pool thread it just runs `f`.
///
/// Only the idle priority is raised: a thread may leave `SCHED_IDLE` for the normal
/// policy unprivileged, not lower its nice value; at nice 10 it keeps a share anyway.
pub fn urgent<T>(f: impl FnOnce() -> T) -> T {
    if POOL_PRIORITY.get() == Some(Priority::Idle) {
        set_priority(None);
        let out = f();
        set_priority(Some(Priority::Idle));
        out
    } else {
        f()
    }
}

std::thread_local! {
    /// The priority a pool thread runs at; `None` elsewhere.
    static POOL_PRIORITY: std::cell::Cell<Option<Priority>> = const { std::cell::Cell::new(None) };
}

/// Lowers the calling thread's CPU priority (on Linux the scheduling policy and the
/// nice value are a thread's).
fn lower_priority(priority: Priority) {
    POOL_PRIORITY.set(Some(priority));
    set_priority(Some(priority));
}

/// Sets the calling thread's priority: `None` is the request threads' (the normal
/// policy at nice 0).
#[allow(unsafe_code)]
fn set_priority(priority: Option<Priority>) {
    #[cfg(target_os = "linux")]
    {
        let rc = match priority {
            None => {
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: as below (a thread at the idle priority keeps nice 0).
                unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) }
            }
            Some(Priority::Idle) => {
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: sched_setscheduler reads one `sched_param` through a pointer to
                // a live local; pid 0 is the calling thread.
                unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) }
            }
            // SAFETY: gettid and setpriority take no pointers; they only change this
            // thread.
            Some(Priority::Low) => unsafe {
                libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10)
            },
        };
        if rc != 0 {
            eprintln!(
                "strata: could not set a background thread's priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = priority;
}

/// A byte rate shared by every job of one kind: each is charged before it runs and
/// waits until the rate allows it (a burst of up to a tenth of a second's worth goes
/// through at once).
#[derive(Debug)]
pub struct RateLimit {
    per_second: u64,
    clock: Arc<dyn Clock>,
    /// When the bytes charged so far are paid for, on the clock's monotonic reading.
    next: Mutex<Duration>,
}

impl RateLimit {
    /// `per_second` bytes a second; 0: no limit.
    pub fn new(per_second: u64, clock: Arc<dyn Clock>) -> RateLimit {
        let now = clock.monotonic();
        RateLimit {
            per_second,
            clock,
            next: Mutex::new(now),
        }
    }

    pub fn per_second(&self) -> u64 {
        self.per_second
    }

    /// How long to wait before processing `bytes`.
    pub fn charge(&self, bytes: u64) -> Duration {
        if self.per_second == 0 || bytes == 0 {
            return Duration::ZERO;
        }
        let now = self.clock.monotonic();
        let burst = Duration::from_millis(100);
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let start = (*next).max(now.saturating_sub(burst));
        *next = start + Duration::from_secs_f64(bytes as f64 / self.per_second as f64);
        next.saturating_sub(now + burst)
    }

    /// Charges `bytes` and waits as long as the rate asks.
    pub async fn take(&self, bytes: u64) {
        let wait = self.charge(bytes);
        if !wait.is_zero() {
            self.clock.sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn limits(threads: usize, tiering: u64) -> Limits {
        Limits {
            threads,
            priority: Priority::Low,
            tiering_bytes_per_second: tiering,
            compaction_bytes_per_second: 0,
        }
    }

    #[test]
    fn a_rate_lets_a_tenth_of_a_second_through_then_spaces_the_rest() {
        let clock = Arc::new(ManualClock::new(0));
        let rate = RateLimit::new(1000, clock.clone());
        assert_eq!(rate.charge(100), Duration::ZERO, "the burst");
        assert_eq!(rate.charge(100), Duration::from_millis(100));
        assert_eq!(rate.charge(500), Duration::from_millis(600));
        clock.advance(Duration::from_secs(10));
        assert_eq!(
            rate.charge(200),
            Duration::ZERO,
            "a burst again after a pause"
        );
        assert_eq!(rate.charge(100), Duration::from_millis(100), "not more");
        let unlimited = RateLimit::new(0, clock);
        assert_eq!(unlimited.charge(1 << 40), Duration::ZERO);
    }

    #[allow(unsafe_code)]
    fn this_threads_nice() -> i32 {
        // SAFETY: gettid and getpriority take no pointers.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[allow(unsafe_code)]
    fn this_threads_policy() -> i32 {
        // SAFETY: sched_getscheduler takes no pointers; pid 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[tokio::test]
    async fn the_default_pool_runs_at_the_idle_priority_save_urgent_sections() {
        let pool = Background::start(
            Limits::for_this_machine(),
            crate::clock::SystemClock::shared(),
        );
        let policy = pool.run(Kind::Tiering, 0, this_threads_policy).await;
        assert_eq!(policy, Ok(libc::SCHED_IDLE));
        let policies = pool
            .run(Kind::Compaction, 0, || {
                let inside = urgent(this_threads_policy);
                (inside, this_threads_policy())
            })
            .await;
        assert_eq!(policies, Ok((libc::SCHED_OTHER, libc::SCHED_IDLE)));
        assert_eq!(
            urgent(this_threads_policy),
            libc::SCHED_OTHER,
            "elsewhere: as it was"
        );
        assert_ne!(
            this_threads_policy(),
            libc::SCHED_IDLE,
            "only the pool's threads"
        );
    }

    #[tokio::test]
    async fn work_runs_on_the_pool_at_a_lower_priority_and_a_panic_is_an_error() {
        let pool = Background::start(limits(2, 0), crate::clock::SystemClock::shared());
        let (name, nice) = pool
            .run(Kind::Tiering, 10, || {
                let name = std::thread::current().name().map(str::to_string);
                (name, this_threads_nice())
            })
            .await
            .expect("ran");
        assert!(name.is_some_and(|n| n.starts_with("strata-background-")));
        assert_eq!(nice, 10);
        let failed = pool
            .run(Kind::Compaction, 0, || -> u32 { panic!("a bug in a job") })
            .await;
        assert_eq!(failed, Err(Panicked { kind: "compaction" }));
        let after = pool.run(Kind::Compaction, 0, || 7).await;
        assert_eq!(after, Ok(7), "the pool goes on after a panic");
    }

    #[tokio::test(start_paused = true)]
    async fn a_kind_waits_for_its_rate_and_the_others_do_not() {
        let clock = crate::clock::SystemClock::shared();
        let pool = Background::start(limits(1, 1000), Arc::clone(&clock));
        let t0 = clock.monotonic();
        pool.run(Kind::Tiering, 100, || ()).await.expect("ran");
        pool.run(Kind::Tiering, 1000, || ()).await.expect("ran");
        let tiering = clock.monotonic() - t0;
        assert!(tiering >= Duration::from_millis(100), "{tiering:?}");
        let t1 = clock.monotonic();
        pool.run(Kind::Compaction, 1 << 30, || ())
            .await
            .expect("ran");
        assert_eq!(
            clock.monotonic() - t1,
            Duration::ZERO,
            "compaction has no limit here"
        );
    }
}
