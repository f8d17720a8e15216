//! Tiering: closed log segments to Parquet in object storage, and reads of archived
//! offsets back as Kafka record batches.
//!
//! - [`store`]: the object store from a URL (`file://` by default, `s3://` when configured);
//! - [`codec`]: record batches to Arrow/Parquet rows and back;
//! - [`worker`]: upload, then publish in the manifest (the crash-consistency argument is
//!   in its module docs);
//! - [`reader`]: fetches of archived offsets, with ranged reads and `moka` caches;
//! - [`merge`]: small archived objects merged into bigger ones;
//! - [`verify`]: a partition's archive read back and checked against its manifest.

pub mod codec;
pub mod error;
pub mod merge;
pub mod reader;
pub mod store;
pub mod verify;
pub mod worker;

pub use error::{Error, Result};
pub use reader::ArchiveReader;
pub use store::Archive;
pub use worker::{ClosedSegment, LocalPartition, PartitionStatus, TieringWorker};
