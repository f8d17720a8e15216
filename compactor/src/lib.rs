//! Compactor: retention, log compaction, Parquet merging and orphan collection.
//!
//! Not built yet; the crate exists so the workspace has the layout of DESIGN.md section 3.
