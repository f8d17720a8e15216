//! The tiering integration tests, each file a module of this one binary.

mod compaction;
mod integrity;
