//! Self-checking record values. Every value carries who sent it and when, and ends with a
//! CRC32C of everything before it, so a reader can tell a corrupted record from a good
//! one and count each record exactly once without remembering what was sent.
//!
//! ```text
//! run id u32 | producer u32 | sequence u64 | send time ns u64 | filler … | crc32c u32
//! ```
//!
//! The filler is random capital letters (as Kafka's own `kafka-producer-perf-test`
//! sends), so compression has something to do but not too much.

use std::sync::OnceLock;
use std::time::Instant;

pub const HEADER: usize = 24;
pub const TRAILER: usize = 4;
/// The smallest value that holds a header and a checksum (and a few filler bytes).
pub const MIN_SIZE: usize = 32;

/// Nanoseconds since this process first asked; producers and consumers of one run share
/// the process, so their clocks agree.
pub fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// What a value says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub run: u32,
    pub producer: u32,
    pub seq: u64,
    pub sent_ns: u64,
}

/// Writes values of one size, reusing one buffer.
#[derive(Debug)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new(size: usize, seed: u64) -> Writer {
        assert!(size >= MIN_SIZE, "values need at least {MIN_SIZE} bytes");
        let mut state = seed | 1;
        let buf = (0..size)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                b'A' + (state % 26) as u8
            })
            .collect();
        Writer { buf }
    }

    pub fn value(&mut self, stamp: Stamp) -> &[u8] {
        let n = self.buf.len();
        self.buf[0..4].copy_from_slice(&stamp.run.to_le_bytes());
        self.buf[4..8].copy_from_slice(&stamp.producer.to_le_bytes());
        self.buf[8..16].copy_from_slice(&stamp.seq.to_le_bytes());
        self.buf[16..24].copy_from_slice(&stamp.sent_ns.to_le_bytes());
        let crc = crc32c::crc32c(&self.buf[..n - TRAILER]);
        self.buf[n - TRAILER..].copy_from_slice(&crc.to_le_bytes());
        &self.buf
    }
}

/// Reads a value's stamp; `None` if it is too short or its checksum does not match.
pub fn read(value: &[u8]) -> Option<Stamp> {
    if value.len() < HEADER + TRAILER {
        return None;
    }
    let (body, crc) = value.split_at(value.len() - TRAILER);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
    Some(Stamp {
        run: u32_at(0),
        producer: u32_at(4),
        seq: u64_at(8),
        sent_ns: u64_at(16),
    })
}

/// Which sequence numbers of each producer arrived, and how often.
#[derive(Debug, Default)]
pub struct Tally {
    seen: Vec<Vec<u8>>,
    pub distinct: u64,
    pub duplicated: u64,
}

impl Tally {
    pub fn add(&mut self, producer: u32, seq: u64) {
        let p = producer as usize;
        if self.seen.len() <= p {
            self.seen.resize_with(p + 1, Vec::new);
        }
        let seen = &mut self.seen[p];
        let s = seq as usize;
        if seen.len() <= s {
            seen.resize((s + 1).max(seen.len() * 2), 0);
        }
        if seen[s] == 0 {
            self.distinct += 1;
        } else {
            self.duplicated += 1;
        }
        seen[s] = seen[s].saturating_add(1);
    }

    pub fn contains(&self, producer: u32, seq: u64) -> bool {
        self.seen
            .get(producer as usize)
            .and_then(|s| s.get(seq as usize))
            .is_some_and(|&n| n > 0)
    }

    pub fn merge(&mut self, other: &Tally) {
        for (p, seen) in other.seen.iter().enumerate() {
            for (s, &n) in seen.iter().enumerate() {
                for _ in 0..n {
                    self.add(p as u32, s as u64);
                }
            }
        }
    }

    /// Every `(producer, seq)` counted at least once.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.seen.iter().enumerate().flat_map(|(p, seen)| {
            seen.iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(move |(s, _)| (p as u32, s as u64))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_reads_back_and_any_flipped_bit_is_caught() {
        let mut w = Writer::new(100, 7);
        let stamp = Stamp {
            run: 9,
            producer: 2,
            seq: 12345,
            sent_ns: 678,
        };
        let value = w.value(stamp).to_vec();
        assert_eq!(read(&value), Some(stamp));
        for i in 0..value.len() * 8 {
            let mut bad = value.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert_eq!(read(&bad), None, "bit {i}");
        }
        assert_eq!(read(&value[..20]), None);
    }

    #[test]
    fn the_tally_counts_distinct_and_duplicated() {
        let mut t = Tally::default();
        t.add(0, 0);
        t.add(0, 5);
        t.add(3, 1);
        t.add(0, 5);
        assert_eq!((t.distinct, t.duplicated), (3, 1));
        assert!(t.contains(0, 5) && !t.contains(0, 1) && !t.contains(9, 0));
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(0, 0), (0, 5), (3, 1)]);
    }
}
