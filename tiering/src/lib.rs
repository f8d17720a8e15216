//! Tiering: moves closed log segments to object storage as Parquet and reads them back.
//!
//! Not built yet (issue 4); the crate exists so the workspace has the layout of
//! DESIGN.md section 3.
