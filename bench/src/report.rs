//! What a run measured, as a table for people and JSON for scripts.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// A histogram of nanoseconds, from 1 µs to 10 min at 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 600_000_000_000, 3).expect("valid histogram bounds")
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        (!h.is_empty()).then(|| {
            let ms = |ns: u64| ns as f64 / 1e6;
            Latency {
                count: h.len(),
                p50_ms: ms(h.value_at_quantile(0.50)),
                p99_ms: ms(h.value_at_quantile(0.99)),
                p999_ms: ms(h.value_at_quantile(0.999)),
                max_ms: ms(h.max()),
            }
        })
    }
}

/// Whether everything sent arrived, once and intact.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verification {
    /// Records the broker acknowledged (produce, end-to-end) or that the partitions held
    /// when the run began (consume).
    pub expected: u64,
    /// Distinct records read back.
    pub received: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Values whose checksum did not match.
    pub corrupted: u64,
    /// Sends the producer gave up on (never acknowledged; not counted as lost, but they
    /// fail the run).
    pub failed_sends: u64,
    pub first_error: Option<String>,
}

impl Verification {
    /// Lost, corrupted or unacknowledged records fail a run (a figure with failed sends
    /// measures something else); duplicates fail it only when the producer promised none
    /// (idempotence).
    pub fn ok(&self, idempotent: bool) -> bool {
        self.lost == 0
            && self.corrupted == 0
            && self.failed_sends == 0
            && (!idempotent || self.duplicated == 0)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: String,
    pub bootstrap: String,
    pub topic: String,
    pub settings: serde_json::Value,
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    /// Produce: send to acknowledgement. End-to-end: send to receipt. At a fixed rate,
    /// measured from when each record was due, so a stall is not hidden.
    pub latency: Option<Latency>,
    /// Transactional produce: transactions committed, and how long each commit took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions: Option<Transactions>,
    pub verification: Verification,
    pub ok: bool,
}

/// What transactional producers' commits did.
#[derive(Debug, Clone, Serialize)]
pub struct Transactions {
    pub records_per_transaction: u64,
    pub committed: u64,
    pub per_s: f64,
    /// `commit_transaction` call to return: EndTxn plus the markers' replication.
    pub commit_latency: Option<Latency>,
}

impl Report {
    pub fn print_table(&self) {
        println!(
            "strata-bench {} → {} (topic {})",
            self.mode, self.bootstrap, self.topic
        );
        println!("  settings     {}", self.settings);
        println!(
            "  throughput   {:.0} records/s, {:.2} MB/s ({} records, {} bytes in {:.2} s)",
            self.records_per_s, self.mb_per_s, self.records, self.bytes, self.seconds
        );
        if let Some(l) = &self.latency {
            println!(
                "  latency ms   p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  ({} samples)",
                l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms, l.count
            );
        }
        if let Some(t) = &self.transactions {
            println!(
                "  transactions {} of {} records, {:.0}/s",
                t.committed, t.records_per_transaction, t.per_s
            );
            if let Some(l) = &t.commit_latency {
                println!(
                    "  commit ms    p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
                    l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
                );
            }
        }
        let v = &self.verification;
        println!(
            "  verified     expected {} received {} lost {} duplicated {} corrupted {} failed sends {}",
            v.expected, v.received, v.lost, v.duplicated, v.corrupted, v.failed_sends
        );
        if let Some(e) = &v.first_error {
            println!("  first error  {e}");
        }
        println!("  result       {}", if self.ok { "OK" } else { "FAILED" });
    }
}
