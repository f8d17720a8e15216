//! Log levels changed at run time, as Kafka's BROKER_LOGGER config resource does: each
//! logger is a `tracing` target spelled as Kafka spells logger names, with dots
//! (`strata_agent.group` for `strata_agent::group`, `strata.audit`), `root` is the
//! level of everything else, and levels have Kafka's log4j names. Like Kafka, a change
//! lasts until the agent restarts (it is not stored): the levels an agent starts with
//! are `STRATA_LOG`'s.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::EnvFilter;

/// Kafka's name for the level of every target not named otherwise.
pub const ROOT: &str = "root";

type Reload = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

struct Levels {
    /// Target (or [`ROOT`]) to directive level, as `EnvFilter` spells it.
    levels: BTreeMap<String, String>,
    reload: Reload,
}

static LEVELS: OnceLock<Mutex<Levels>> = OnceLock::new();

/// Parses `STRATA_LOG`-style directives (`info,strata_agent::group=debug`) into levels by
/// target. Directives with span or field filters are kept whole, under their own text.
fn parse(directives: &str) -> BTreeMap<String, String> {
    let mut levels = BTreeMap::from([(ROOT.to_string(), "info".to_string())]);
    for d in directives
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        match d.rsplit_once('=') {
            Some((target, level)) if !target.contains('[') => {
                levels.insert(target.to_string(), level.to_string());
            }
            Some(_) => {
                levels.insert(d.to_string(), String::new());
            }
            None => {
                levels.insert(ROOT.to_string(), d.to_string());
            }
        }
    }
    levels
}

fn directives(levels: &BTreeMap<String, String>) -> String {
    levels
        .iter()
        .map(|(target, level)| match (target.as_str(), level.as_str()) {
            (ROOT, level) => level.to_string(),
            (whole, "") => whole.to_string(),
            (target, level) => format!("{target}={level}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The filter the process starts with, from `directives` (`STRATA_LOG`, or `info`).
pub fn initial_filter(directives: &str) -> EnvFilter {
    EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Makes levels changeable: `initial` are the directives the filter was built from,
/// `reload` swaps the process's filter. Called once, as logging starts; without it
/// (in tests), changes are refused.
pub fn install(initial: &str, reload: Reload) {
    let _ = LEVELS.set(Mutex::new(Levels {
        levels: parse(initial),
        reload,
    }));
}

/// The loggers listed even without a level of their own (as Kafka lists every logger
/// it has): strata's crates and the agent's parts. Any other target may be set too.
const KNOWN: &[&str] = &[
    "strata::audit",
    "strata_agent",
    "strata_agent::controller",
    "strata_agent::fetcher",
    "strata_agent::group",
    "strata_agent::http",
    "strata_agent::isr",
    "strata_agent::membership",
    "strata_agent::replicas",
    "strata_agent::server",
    "strata_agent::txn",
    "strata_compactor",
    "strata_log",
    "strata_metastore",
    "strata_replication",
    "strata_tiering",
];

/// Root, the known loggers and every logger with a level of its own, each with the
/// level in effect for it (its own, else its closest parent's, else root's), in
/// Kafka's level names.
pub fn loggers() -> Vec<(String, String)> {
    let levels = match LEVELS.get() {
        Some(levels) => levels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .levels
            .clone(),
        None => parse(""),
    };
    let effective = |target: &str| {
        let mut at = target;
        loop {
            if let Some(level) = levels.get(at).filter(|l| !l.is_empty()) {
                return kafka_level(level);
            }
            match at.rsplit_once("::") {
                Some((parent, _)) => at = parent,
                None => return kafka_level(levels.get(ROOT).map_or("info", String::as_str)),
            }
        }
    };
    let mut names: Vec<&str> = KNOWN.to_vec();
    names.extend(
        levels
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(t, _)| t.as_str()),
    );
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| (name.replace("::", "."), effective(name)))
        .collect()
}

/// The `tracing` target of a Kafka logger name (`strata_agent.group`).
fn target(logger: &str) -> String {
    logger.replace('.', "::")
}

fn kafka_level(level: &str) -> String {
    match level.to_ascii_lowercase().as_str() {
        "off" => "OFF".to_string(),
        other => other.to_ascii_uppercase(),
    }
}

/// Validates a logger change; the error is the message sent with INVALID_CONFIG.
fn checked(logger: &str, level: Option<&str>) -> Result<Option<&'static str>, String> {
    if logger.is_empty()
        || !logger
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'))
    {
        return Err(format!("Invalid logger name: '{logger}'"));
    }
    let Some(level) = level else {
        if logger == ROOT {
            return Err("Removing the log level of the root logger is not allowed".to_string());
        }
        return Ok(None);
    };
    let level = match level {
        "TRACE" => "trace",
        "DEBUG" => "debug",
        "INFO" => "info",
        "WARN" => "warn",
        "ERROR" | "FATAL" => "error",
        "OFF" => "off",
        other => {
            return Err(format!(
                "Cannot set the log level of {logger} to {other} as it is not a supported log \
                 level. Valid log levels are TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF"
            ));
        }
    };
    Ok(Some(level))
}

/// Applies `(logger, level)` changes together (`None`: the logger falls back to root),
/// or none of them if one is invalid. With `validate_only`, only checks.
pub fn alter(changes: &[(String, Option<String>)], validate_only: bool) -> Result<(), String> {
    let mut parsed = Vec::with_capacity(changes.len());
    for (logger, level) in changes {
        parsed.push((target(logger), checked(logger, level.as_deref())?));
    }
    let Some(levels) = LEVELS.get() else {
        return Err("log levels cannot be changed in this process".to_string());
    };
    if validate_only {
        return Ok(());
    }
    let mut levels = levels.lock().unwrap_or_else(|p| p.into_inner());
    let mut next = levels.levels.clone();
    for (logger, level) in parsed {
        match level {
            Some(level) => next.insert(logger, level.to_string()),
            None => next.remove(&logger),
        };
    }
    let spelled = directives(&next);
    let filter = EnvFilter::try_new(&spelled).map_err(|e| format!("{spelled}: {e}"))?;
    (levels.reload)(filter)?;
    tracing::info!(levels = %spelled, "log levels changed");
    levels.levels = next;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_round_trip() {
        let levels = parse("warn,strata_agent::group=debug,h2[conn]=off");
        assert_eq!(levels.get(ROOT).map(String::as_str), Some("warn"));
        assert_eq!(
            levels.get("strata_agent::group").map(String::as_str),
            Some("debug")
        );
        assert_eq!(
            directives(&levels),
            "h2[conn]=off,warn,strata_agent::group=debug"
        );
        assert_eq!(parse("").get(ROOT).map(String::as_str), Some("info"));
    }

    #[test]
    fn checks_like_kafka() {
        assert_eq!(
            checked("strata_agent.group", Some("DEBUG")),
            Ok(Some("debug"))
        );
        assert_eq!(target("strata_agent.group"), "strata_agent::group");
        assert!(
            checked("strata_agent::group", Some("DEBUG")).is_err(),
            "Kafka's dots"
        );
        assert_eq!(checked("root", Some("FATAL")), Ok(Some("error")));
        assert!(checked("root", None).is_err());
        assert!(
            checked("strata_agent", Some("debug")).is_err(),
            "log4j names"
        );
        assert!(checked("bad name", Some("INFO")).is_err());
        assert_eq!(checked("strata_agent", None), Ok(None));
    }
}
