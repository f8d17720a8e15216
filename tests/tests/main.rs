//! The cross-crate integration tests, each file a module of this one binary: the agent
//! is linked into one test executable instead of five.

mod archive;
mod authorization;
mod cluster;
mod connections;
mod fetch_sessions;
mod hardening;
mod protocol;
mod quotas;
