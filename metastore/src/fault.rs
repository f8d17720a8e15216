//! A backend wrapper that injects the failures FoundationDB clients must survive: commit
//! conflicts, and "maybe committed" results (`commit_unknown_result`) after commits that
//! did apply. Running the typed layer on it proves that every typed operation is
//! idempotent under retry.

use std::sync::Mutex;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::kv::{KeyValue, KvStore, KvTransaction};

/// How often each fault fires, in percent of commits.
#[derive(Debug, Clone, Copy)]
pub struct FaultRates {
    pub conflict_percent: u32,
    pub maybe_committed_percent: u32,
}

#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    rates: FaultRates,
    /// xorshift64 state: deterministic for a seed.
    rng: Mutex<u64>,
}

impl<S: KvStore> FaultyStore<S> {
    pub fn new(inner: S, rates: FaultRates, seed: u64) -> FaultyStore<S> {
        FaultyStore {
            inner,
            rates,
            rng: Mutex::new(seed.max(1)),
        }
    }

    fn roll(&self) -> u32 {
        let mut s = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        (*s % 100) as u32
    }
}

#[async_trait]
impl<S: KvStore> KvStore for FaultyStore<S> {
    async fn begin(&self) -> Result<Box<dyn KvTransaction>> {
        let inner = self.inner.begin().await?;
        let r = self.roll();
        let fault = if r < self.rates.conflict_percent {
            Some(Fault::Conflict)
        } else if r < self.rates.conflict_percent + self.rates.maybe_committed_percent {
            Some(Fault::MaybeCommitted)
        } else {
            None
        };
        Ok(Box::new(FaultyTransaction { inner, fault }))
    }

    async fn watch(&self, key: &[u8]) -> Result<crate::kv::Watch> {
        self.inner.watch(key).await
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Fail the commit without applying it.
    Conflict,
    /// Apply the commit, then report an unknown result.
    MaybeCommitted,
}

struct FaultyTransaction {
    inner: Box<dyn KvTransaction>,
    fault: Option<Fault>,
}

#[async_trait]
impl KvTransaction for FaultyTransaction {
    async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get(key).await
    }
    async fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<KeyValue>> {
        self.inner.get_range(begin, end, limit, reverse).await
    }
    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.inner.set(key, value)
    }
    fn clear(&mut self, key: &[u8]) {
        self.inner.clear(key)
    }
    fn clear_range(&mut self, begin: &[u8], end: &[u8]) {
        self.inner.clear_range(begin, end)
    }
    fn atomic_add(&mut self, key: &[u8], delta: i64) {
        self.inner.atomic_add(key, delta)
    }
    async fn commit(self: Box<Self>) -> Result<()> {
        match self.fault {
            None => self.inner.commit().await,
            Some(Fault::Conflict) => Err(Error::Conflict("injected conflict".to_string())),
            Some(Fault::MaybeCommitted) => {
                self.inner.commit().await?;
                Err(Error::MaybeCommitted)
            }
        }
    }
}
