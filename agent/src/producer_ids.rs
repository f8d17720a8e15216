//! Producer ids for idempotent producers, handed out from blocks reserved in the
//! metastore, so InitProducerId costs a metastore round trip only once per block.

use std::ops::Range;

use strata_metastore::Metastore;
use tokio::sync::Mutex;

/// Ids reserved per metastore transaction.
const BLOCK: i64 = 1000;

#[derive(Debug)]
pub struct ProducerIds {
    metastore: Metastore,
    block: Mutex<Range<i64>>,
}

impl ProducerIds {
    pub fn new(metastore: Metastore) -> ProducerIds {
        ProducerIds {
            metastore,
            block: Mutex::new(0..0),
        }
    }

    /// A producer id no one else has been given.
    pub async fn next(&self) -> Result<i64, strata_metastore::Error> {
        let mut block = self.block.lock().await;
        if block.is_empty() {
            *block = self.metastore.allocate_producer_ids(BLOCK).await?;
            tracing::debug!(
                first = block.start,
                last = block.end - 1,
                "reserved producer ids"
            );
        }
        let id = block.start;
        block.start += 1;
        Ok(id)
    }
}
