//! One shape for the agent's background work.
//!
//! Every long-running task of an agent (the listeners and connections, the replica
//! manager's reconcilers, the ISR manager, the controller, membership renewal, the
//! group coordinator's timers, tiering, and each partition's flusher and fetcher) is
//! spawned through [`Tasks::spawn`] under a name, and is written the same way: it waits
//! for its next tick or message *or* the shutdown token, handles that one thing, and
//! loops; it ends by returning [`Stopped`], which says why. So every task is tracked,
//! [`Tasks::drain`] waits for all of them within a bound at shutdown, and why each one
//! ended is logged and kept ([`Tasks::stopped`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Why a background task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The agent is stopping.
    Shutdown,
    /// Its work is over (a fetcher whose replica no longer follows that leader).
    Done(&'static str),
    /// It cannot go on (an fsync failed, a listener closed).
    Failed(String),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Shutdown => f.write_str("shutdown"),
            Stopped::Done(why) => f.write_str(why),
            Stopped::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

/// How many ended tasks [`Tasks::stopped`] remembers, by name (fetchers and flushers
/// come and go with partitions; the newest are kept).
const REMEMBERED: usize = 1024;

/// The tasks of one agent and the token that stops them.
#[derive(Debug, Clone)]
pub struct Tasks {
    tracker: TaskTracker,
    shutdown: CancellationToken,
    stopped: Arc<Mutex<BTreeMap<String, Stopped>>>,
}

impl Tasks {
    pub fn new(shutdown: CancellationToken) -> Tasks {
        Tasks {
            tracker: TaskTracker::new(),
            shutdown,
            stopped: Arc::default(),
        }
    }

    /// Cancelled when the agent begins to stop; every task watches it.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Runs `task` until it returns why it stopped; tracked, so [`Tasks::drain`] waits
    /// for it.
    pub fn spawn<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = Stopped> + Send + 'static,
    {
        let name = name.into();
        let stopped = Arc::clone(&self.stopped);
        self.tracker.spawn(async move {
            let why = task.await;
            match &why {
                Stopped::Failed(e) => tracing::error!(task = %name, error = %e, "task stopped"),
                why => tracing::debug!(task = %name, reason = %why, "task stopped"),
            }
            let mut stopped = stopped.lock().unwrap_or_else(|p| p.into_inner());
            if stopped.len() >= REMEMBERED && !stopped.contains_key(&name) {
                stopped.pop_first();
            }
            stopped.insert(name, why);
        });
    }

    /// Tasks still running.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }

    /// Why the tasks that ended did (the newest [`REMEMBERED`] by name).
    pub fn stopped(&self) -> BTreeMap<String, Stopped> {
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Cancels the shutdown token and waits at most `bound` for every task to end.
    /// Returns whether they all did.
    pub async fn drain(&self, bound: Duration) -> bool {
        self.shutdown.cancel();
        self.tracker.close();
        let done = tokio::time::timeout(bound, self.tracker.wait())
            .await
            .is_ok();
        if !done {
            tracing::warn!(
                running = self.tracker.len(),
                "tasks did not stop within {bound:?}"
            );
        }
        done
    }

    /// Waits for every task, without cancelling anything (for a group of tasks that
    /// end on their own, such as flushers after their partitions closed).
    pub async fn wait(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// Keeps something read from the metastore current, in the one shape every such loop
/// has: arm a watch on its version key, read it, wait for the watch (or `backstop`, in
/// case a watch is lost), again; stops on shutdown. The watch is armed before each read,
/// so no change made meanwhile is missed. A failed read keeps what was read before.
pub async fn follow<W, R>(
    what: &'static str,
    watch: impl Fn() -> W,
    read: impl Fn() -> R,
    backstop: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
) -> Stopped
where
    W: std::future::Future<Output = strata_metastore::Result<strata_metastore::kv::Watch>>,
    R: std::future::Future<Output = strata_metastore::Result<()>>,
{
    let retry = std::time::Duration::from_secs(1);
    loop {
        let armed = tokio::select! {
            r = watch() => r,
            _ = shutdown.cancelled() => return Stopped::Shutdown,
        };
        if let Err(e) = read().await {
            tracing::warn!(error = %e, what, "cannot read from the metastore; keeping what was read before");
        }
        let wait = match armed {
            Ok(watch) => tokio::select! {
                fired = watch => match fired {
                    Ok(()) => None,
                    Err(e) => Some(format!("the watch failed: {e}")),
                },
                _ = crate::clock::pause(backstop) => None,
                _ = shutdown.cancelled() => return Stopped::Shutdown,
            },
            Err(e) => Some(format!("cannot watch: {e}")),
        };
        if let Some(why) = wait {
            tracing::warn!(what, reason = %why, "re-reading in {retry:?}");
            tokio::select! {
                _ = crate::clock::pause(retry) => {}
                _ = shutdown.cancelled() => return Stopped::Shutdown,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every task is drained on shutdown, and why each one ended is kept.
    #[tokio::test]
    async fn drain_stops_every_task_and_records_why() {
        let tasks = Tasks::new(CancellationToken::new());
        for i in 0..3 {
            let token = tasks.shutdown().clone();
            tasks.spawn(format!("waiter-{i}"), async move {
                token.cancelled().await;
                Stopped::Shutdown
            });
        }
        tasks.spawn("finisher", async { Stopped::Done("nothing to do") });
        assert!(tasks.drain(Duration::from_secs(5)).await);
        assert_eq!(tasks.running(), 0);
        let stopped = tasks.stopped();
        assert_eq!(stopped.len(), 4);
        assert_eq!(stopped["waiter-1"], Stopped::Shutdown);
        assert_eq!(stopped["finisher"], Stopped::Done("nothing to do"));
    }

    /// A task that ignores shutdown does not hold the agent up past the bound.
    #[tokio::test]
    async fn drain_is_bounded() {
        let tasks = Tasks::new(CancellationToken::new());
        tasks.spawn("stuck", std::future::pending());
        assert!(!tasks.drain(Duration::from_millis(50)).await);
        assert_eq!(tasks.running(), 1);
    }
}
