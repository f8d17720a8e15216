//! The audit log: one JSON line per privileged action (a topic created or deleted,
//! configs altered, a partition disabled, a group's offsets moved, a repair started),
//! with who asked, from where, what was asked and how it ended. It is written to
//! `{data_dir}/audit.log` and, for log collectors, as an INFO event of target
//! `strata::audit`. Secrets never reach it: callers pass the request's parameters, not
//! its headers.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::caller::Caller;

/// One entry of the log: one line.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = AuditEntry)]
pub struct Entry {
    /// Milliseconds since the epoch
    pub time_ms: i64,
    /// Who asked: User:ANONYMOUS without authentication
    pub principal: String,
    /// The client's address and port
    pub address: Option<String>,
    /// The interface: `http` or `kafka`
    pub via: String,
    /// `topic.create`, `partition.disable`, … (docs/audit.md)
    pub action: String,
    /// `topic:{name}`, `group:{id}`, `partition:{topic}-{p}`, …
    pub resource: String,
    /// The parameters asked for
    pub request: Value,
    pub ok: bool,
    /// The answer when `ok`, else why it was refused (the problem's detail)
    pub outcome: Value,
}

/// The audit log of one agent.
#[derive(Debug)]
pub struct Audit {
    path: PathBuf,
    file: Mutex<Option<File>>,
}

impl Audit {
    /// The audit log at `path`, opened (and created) at the first entry.
    pub fn at(path: &Path) -> Audit {
        Audit {
            path: path.to_path_buf(),
            file: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records that `caller` asked for `action` on `resource` with `request`, and how
    /// it ended: `Ok` with what it did, or `Err` with why it was refused.
    pub fn record(
        &self,
        caller: &Caller,
        action: &str,
        resource: &str,
        request: Value,
        outcome: Result<Value, String>,
    ) {
        let (ok, result) = match outcome {
            Ok(v) => (true, v),
            Err(why) => (false, Value::String(why)),
        };
        let entry = Entry {
            time_ms: crate::clock::now_ms(),
            principal: caller.principal.to_string(),
            address: caller.address.map(|a| a.to_string()),
            via: caller.via.to_string(),
            action: action.to_string(),
            resource: resource.to_string(),
            request,
            ok,
            outcome: result,
        };
        let entry = serde_json::to_string(&entry).unwrap_or_default();
        tracing::info!(target: "strata::audit", principal = %caller.principal, action, resource, ok, "{entry}");
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if file.is_none() {
            // Only the agent's user may read it (0600): it names who did what.
            match OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&self.path)
            {
                Ok(f) => *file = Some(f),
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot open the audit log");
                    return;
                }
            }
        }
        if let Some(f) = file.as_mut() {
            let mut line = entry;
            line.push('\n');
            // One write per line, so that concurrent entries never interleave.
            if let Err(e) = f.write_all(line.as_bytes()) {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot write the audit log");
                *file = None;
            }
        }
    }

    /// The last `limit` entries (newest last), for `GET /v1/audit`.
    pub fn tail(&self, limit: usize) -> std::io::Result<Vec<Entry>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let lines: Vec<&str> = text.lines().collect();
        Ok(lines[lines.len().saturating_sub(limit)..]
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn entries_are_json_lines_read_back_newest_last() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::at(&dir.path().join("audit.log"));
        assert!(audit.tail(10).expect("empty").is_empty());
        let caller = Caller::anonymous("127.0.0.1:5000".parse().ok(), "http");
        audit.record(
            &caller,
            "topic.create",
            "topic:a",
            json!({"partitions": 3}),
            Ok(json!({})),
        );
        audit.record(
            &caller,
            "topic.delete",
            "topic:b",
            json!({}),
            Err("Topic 'b' does not exist.".into()),
        );
        let tail = audit.tail(10).expect("tail");
        assert_eq!(tail.len(), 2);
        assert_eq!(tail[0].action, "topic.create");
        assert!(tail[0].ok);
        assert_eq!(tail[0].address.as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(tail[0].request, json!({"partitions": 3}));
        assert!(!tail[1].ok);
        assert_eq!(tail[1].outcome, "Topic 'b' does not exist.");
        assert_eq!(audit.tail(1).expect("tail")[0].action, "topic.delete");
    }
}
