//! The clock that code deciding correctness reads (leases, ISR lag, elections, the
//! controller, metastore limits, group sessions), injected so that tests drive time
//! instead of sleeping through it.
//!
//! [`Clock`] gives wall-clock milliseconds (what is stored and compared across agents:
//! lease ends, record timestamps) and a monotonic reading (what an agent measures on
//! its own: how long its lease still holds, timeouts), and sleeps on the monotonic one.
//! The real clock is [`SystemClock`] (with the `tokio` feature); tests use
//! [`ManualClock`], which moves only when told. The workspace's clippy configuration
//! bans reading the system clocks, and sleeping on them, anywhere but in the clock
//! modules.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// A sleep: completes once the monotonic clock reaches its deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the Unix epoch.
    fn wall_ms(&self) -> i64;
    /// Time since an arbitrary origin on a clock that never goes back.
    fn monotonic(&self) -> Duration;
    /// Completes once [`Clock::monotonic`] reaches `deadline`.
    fn sleep_until(&self, deadline: Duration) -> Sleep;

    /// Completes after `d` on this clock.
    fn sleep(&self, d: Duration) -> Sleep {
        self.sleep_until(self.monotonic() + d)
    }
}

/// The system's clocks: wall time, and tokio's monotonic clock (which tokio's paused
/// test time moves too).
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub struct SystemClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
#[allow(clippy::disallowed_methods)]
impl SystemClock {
    /// The system clock, shared as a [`Clock`].
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(SystemClock {
            origin: tokio::time::Instant::now(),
        })
    }
}

#[cfg(feature = "tokio")]
#[allow(clippy::disallowed_methods)]
impl Clock for SystemClock {
    fn wall_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        Box::pin(tokio::time::sleep_until(self.origin + deadline))
    }
}

/// A clock that moves only when [`ManualClock::advance`] is called; its wall clock
/// moves with it.
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<Mutex<Manual>>,
}

#[derive(Debug)]
struct Manual {
    wall_origin_ms: i64,
    now: Duration,
    /// Sleeps waiting: (id, deadline, waker).
    sleepers: Vec<(u64, Duration, Waker)>,
    next_id: u64,
}

impl ManualClock {
    /// A clock whose wall clock starts at `wall_origin_ms`.
    pub fn new(wall_origin_ms: i64) -> ManualClock {
        ManualClock {
            inner: Arc::new(Mutex::new(Manual {
                wall_origin_ms,
                now: Duration::ZERO,
                sleepers: Vec::new(),
                next_id: 0,
            })),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Manual> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves time on by `d`, waking every sleep whose deadline it reaches.
    pub fn advance(&self, d: Duration) {
        let woken: Vec<Waker> = {
            let mut s = self.state();
            s.now += d;
            let now = s.now;
            let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut s.sleepers)
                .into_iter()
                .partition(|(_, deadline, _)| *deadline <= now);
            s.sleepers = waiting;
            due.into_iter().map(|(_, _, w)| w).collect()
        };
        for w in woken {
            w.wake();
        }
    }

    /// Sleeps that are waiting for a deadline not reached yet.
    pub fn sleepers(&self) -> usize {
        self.state().sleepers.len()
    }
}

impl Clock for ManualClock {
    fn wall_ms(&self) -> i64 {
        let s = self.state();
        s.wall_origin_ms + s.now.as_millis() as i64
    }

    fn monotonic(&self) -> Duration {
        self.state().now
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        Box::pin(ManualSleep {
            clock: self.clone(),
            deadline,
            id: None,
        })
    }
}

struct ManualSleep {
    clock: ManualClock,
    deadline: Duration,
    /// Its entry among the clock's sleepers, once polled.
    id: Option<u64>,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let clock = self.clock.clone();
        let mut s = clock.state();
        if s.now >= self.deadline {
            return Poll::Ready(());
        }
        let waker = cx.waker().clone();
        match self
            .id
            .and_then(|id| s.sleepers.iter_mut().find(|e| e.0 == id))
        {
            Some(entry) => entry.2 = waker,
            None => {
                let id = s.next_id;
                s.next_id += 1;
                s.sleepers.push((id, self.deadline, waker));
                self.id = Some(id);
            }
        }
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.clock.state().sleepers.retain(|e| e.0 != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waker that counts its wakes.
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn sleeps_complete_when_time_is_advanced_past_them() {
        let clock = ManualClock::new(1_000);
        let count = Arc::new(Count(Default::default()));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let mut sleep = clock.sleep(Duration::from_secs(5));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance(Duration::from_secs(4));
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance(Duration::from_secs(1));
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(sleep.as_mut().poll(&mut cx).is_ready());
        assert_eq!(clock.wall_ms(), 6_000);
        assert_eq!(clock.monotonic(), Duration::from_secs(5));
    }
}
