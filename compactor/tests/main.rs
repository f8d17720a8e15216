//! The compactor's integration tests, each file a module of this one binary.

mod compaction;
mod transactions;
