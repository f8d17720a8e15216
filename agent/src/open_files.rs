//! The agent's budget of open files, derived from its `RLIMIT_NOFILE`.
//!
//! At start the soft limit is raised to the hard one (as Kafka's packaging asks
//! operators to do by hand). A partition replica holds one file open, its active
//! segment's (sealed segments open theirs per read), and with replication one
//! connection per follower (a leader's) or to its leader (a follower's): at most as
//! many descriptors as the topic has replicas. A quarter of the limit, and at least
//! [`RESERVED_FILES_MIN`], stays for client connections, the metastore and files opened
//! for a moment (reads of sealed segments, index and snapshot writes).
//!
//! A topic or partition creation that would take any agent past its share is refused
//! before anything is written (INVALID_PARTITIONS, naming the limit), and a replica
//! that would not fit is not opened (the topic stays unserved here, and the agent
//! starts). Agents are assumed to run with the same limit: placement checks every
//! agent's replicas against this agent's budget.

/// Descriptors kept out of the replicas' budget, at the least.
pub const RESERVED_FILES_MIN: u64 = 256;

/// This agent's open-file limit and the share of it partition replicas may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileBudget {
    /// The process's `RLIMIT_NOFILE` soft limit.
    pub limit: u64,
}

impl FileBudget {
    /// Raises this process's soft open-file limit to its hard limit, and returns the
    /// budget for the limit in force after that.
    pub fn raise() -> FileBudget {
        let (soft, hard) = match nofile() {
            Some(l) => l,
            None => {
                tracing::warn!("cannot read the open-file limit; assuming 1024");
                return FileBudget { limit: 1024 };
            }
        };
        let limit = if soft < hard && set_nofile(hard, hard) {
            tracing::info!(from = soft, to = hard, "raised the open-file limit");
            hard
        } else {
            soft
        };
        FileBudget { limit }
    }

    /// Descriptors partition replicas may hold.
    pub fn replica_files(&self) -> u64 {
        let reserved = (self.limit / 4).max(RESERVED_FILES_MIN);
        self.limit.saturating_sub(reserved)
    }

    /// Descriptors one replica of a topic of `replication_factor` replicas may hold.
    pub fn files_per_replica(replication_factor: usize) -> u64 {
        replication_factor.max(1) as u64
    }

    /// Why `more` replica files do not fit beside the `in_use` ones, if they do not.
    pub fn refuse(&self, in_use: u64, more: u64) -> Option<String> {
        let room = self.replica_files().saturating_sub(in_use);
        (more > room).then(|| {
            format!(
                "the partitions would need {more} more open files on an agent that has room for {room} \
                 (open-file limit {}, of which {} for partitions and {in_use} in use); \
                 raise the limit (ulimit -n) or create fewer partitions",
                self.limit,
                self.replica_files()
            )
        })
    }
}

#[allow(unsafe_code)]
fn nofile() -> Option<(u64, u64)> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a pointer to a live, properly
    // aligned local; RLIMIT_NOFILE is a valid resource.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    (rc == 0).then_some((l.rlim_cur, l.rlim_max))
}

#[allow(unsafe_code)]
fn set_nofile(soft: u64, hard: u64) -> bool {
    let l = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the `rlimit` behind a pointer to a live local.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_a_reserve_and_refuses_what_does_not_fit() {
        let b = FileBudget { limit: 1024 };
        assert_eq!(b.replica_files(), 768);
        assert_eq!(b.refuse(0, 600), None);
        assert_eq!(b.refuse(600, 168), None);
        let why = b.refuse(600, 169).expect("does not fit");
        assert!(why.contains("open-file limit 1024"), "{why}");
        assert_eq!(FileBudget { limit: 100 }.replica_files(), 0);
        assert_eq!(FileBudget { limit: 1 << 20 }.replica_files(), 786_432);
        assert_eq!(FileBudget::files_per_replica(0), 1);
        assert_eq!(FileBudget::files_per_replica(3), 3);
    }

    #[test]
    fn raising_keeps_the_soft_limit_at_or_below_the_hard_one() {
        let before = nofile().expect("getrlimit");
        let b = FileBudget::raise();
        let after = nofile().expect("getrlimit");
        assert_eq!(b.limit, after.0);
        assert!(after.0 >= before.0 && after.0 <= after.1);
    }
}
