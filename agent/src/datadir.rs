//! The data directory: an exclusive lock so two agents never share one, and a format
//! marker so an agent never reads a layout it does not understand.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The on-disk layout this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
const FORMAT_FILE: &str = "strata.format";
const LOCK_FILE: &str = ".lock";
const ID_FILE: &str = "strata.id";

/// A locked data directory; the lock lasts as long as this value.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    /// Random, made when the directory was first used: tells this agent's restarts
    /// from another agent that claims the same node id.
    id: String,
    _lock: File,
}

/// Creates `path` and any missing parents as the agent's own (0700: the data directory
/// holds the metastore with its SCRAM verifiers, the audit log and every record). A
/// directory that exists keeps its mode: the operator chose it.
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

impl DataDir {
    /// Creates or opens `path`, takes its lock, and checks its format.
    pub fn open(path: &Path) -> anyhow::Result<DataDir> {
        create_private_dir(path)
            .with_context(|| format!("cannot create data dir {}", path.display()))?;
        let lock_path = path.join(LOCK_FILE);
        let mut lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("cannot open {}", lock_path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let holder = fs::read_to_string(&lock_path).unwrap_or_default();
                bail!(
                    "data dir {} is locked by another strata process (pid {}); stop it or choose another --data-dir",
                    path.display(),
                    holder.trim()
                );
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", lock_path.display()));
            }
        }
        lock.set_len(0)
            .and_then(|_| write!(lock, "{}", std::process::id()))
            .ok();

        let format_path = path.join(FORMAT_FILE);
        match fs::read_to_string(&format_path) {
            Ok(text) => {
                let found = text
                    .trim()
                    .strip_prefix("format = ")
                    .and_then(|v| v.parse::<u32>().ok())
                    .with_context(|| {
                        format!("{} is not a strata format file", format_path.display())
                    })?;
                if found != FORMAT_VERSION {
                    bail!(
                        "data dir {} was written by an incompatible strata version (format {found}; this build reads format {FORMAT_VERSION})",
                        path.display()
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let tmp = path.join(format!("{FORMAT_FILE}.tmp"));
                fs::write(&tmp, format!("format = {FORMAT_VERSION}\n"))
                    .and_then(|_| File::open(&tmp)?.sync_all())
                    .and_then(|_| fs::rename(&tmp, &format_path))
                    .with_context(|| format!("cannot write {}", format_path.display()))?;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", format_path.display()));
            }
        }
        let id = read_or_create_id(&path.join(ID_FILE))?;
        Ok(DataDir {
            path: path.to_path_buf(),
            id,
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where partition logs live.
    pub fn logs(&self) -> PathBuf {
        self.path.join("logs")
    }
}

fn read_or_create_id(path: &Path) -> anyhow::Result<String> {
    match fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_string()),
        Ok(_) => bail!("{} is empty", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().simple().to_string();
            let tmp = path.with_extension("tmp");
            fs::write(&tmp, format!("{id}\n"))
                .and_then(|_| File::open(&tmp)?.sync_all())
                .and_then(|_| fs::rename(&tmp, path))
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(id)
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_survives_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = DataDir::open(dir.path()).expect("open").id().to_string();
        assert_eq!(DataDir::open(dir.path()).expect("reopen").id(), id);
        let other = tempfile::tempdir().expect("tempdir");
        assert_ne!(DataDir::open(other.path()).expect("open").id(), id);
    }

    #[test]
    fn second_open_is_refused_while_locked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = DataDir::open(dir.path()).expect("first");
        let err = DataDir::open(dir.path()).expect_err("second must fail");
        assert!(
            err.to_string().contains("locked by another strata process"),
            "{err}"
        );
        drop(first);
        DataDir::open(dir.path()).expect("free again");
    }

    #[test]
    fn incompatible_format_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(FORMAT_FILE), "format = 99\n").expect("write");
        let err = DataDir::open(dir.path()).expect_err("must refuse");
        assert!(
            err.to_string().contains("incompatible strata version"),
            "{err}"
        );
    }
}
