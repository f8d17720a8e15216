//! The services behind the protocol edges, in domain terms: they take topics,
//! partitions, offsets and record batches (not Kafka's request structs) and return
//! domain errors ([`crate::error::Error`]; [`admin::AdminError`],
//! [`configs::ConfigError`], [`security::SecurityError`]), so that the Kafka handlers
//! (`api/`) and the HTTP API can share them. The edges translate wire types to these
//! and back. The services also decide who may (they take the
//! [`crate::caller::Caller`], or a permit made for it) and audit what they change.

pub mod admin;
pub mod agents;
pub mod archive;
pub mod configs;
pub mod fetch;
pub mod groups;
pub mod lifecycle;
pub mod maintenance;
pub mod offsets;
pub mod placement;
pub mod produce;
pub mod reset;
pub mod security;
pub mod status;
pub mod transactions;
