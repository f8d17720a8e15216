//! Key layout. Every key is a tuple of elements under one prefix; strings are encoded as
//! in FoundationDB's tuple layer (0x02, the bytes with 0x00 escaped as 0x00 0xff, 0x00)
//! and integers as 0x15 plus 4 big-endian bytes, so keys sort as their tuples do.
//!
//! | key                                   | value            | written by              |
//! |---------------------------------------|------------------|-------------------------|
//! | (prefix, "cluster")                   | ClusterRecord    | the first agent, once   |
//! | (prefix, "topic", name)               | TopicRecord      | admin requests          |
//! | (prefix, "partition", name, index)    | PartitionRecord  | admin; later the leader |
//! | (prefix, "manifest", name, index, first offset) | ManifestEntry | the tiering worker |
//! | (prefix, "logstart", name, index)     | LogStart         | retention, DeleteRecords |
//! | (prefix, "garbage", object path)      | Garbage          | retention, topic deletion; the compactor deletes |
//! | (prefix, "archivecleaner", name, index) | ArchiveCleaner | the archive's compaction |
//! | (prefix, "compactorlease", name, index) | CompactorLease | the compactor working on the archive |
//!
//! Group, offset and producer-id keys are in `groups.rs`.

/// Builds a key element by element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl Key {
    pub fn new(prefix: &[u8]) -> Key {
        Key(prefix.to_vec())
    }

    pub fn str(mut self, s: &str) -> Key {
        self.0.push(0x02);
        for &b in s.as_bytes() {
            self.0.push(b);
            if b == 0 {
                self.0.push(0xff);
            }
        }
        self.0.push(0x00);
        self
    }

    pub fn u32(mut self, n: u32) -> Key {
        self.0.push(0x15);
        self.0.extend_from_slice(&n.to_be_bytes());
        self
    }

    pub fn u64(mut self, n: u64) -> Key {
        self.0.push(0x19);
        self.0.extend_from_slice(&n.to_be_bytes());
        self
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// The integer element encoded by [`Key::u32`] at byte `at` of `key`, if there is one.
pub fn u32_at(key: &[u8], at: usize) -> Option<u32> {
    match key.get(at..at + 5)? {
        [0x15, b @ ..] => Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_like_tuples() {
        let a = Key::new(b"p").str("topic").str("a").into_bytes();
        let ab = Key::new(b"p").str("topic").str("a\0b").into_bytes();
        let b = Key::new(b"p").str("topic").str("b").into_bytes();
        assert!(a < ab && ab < b);
        let p1 = Key::new(b"p").str("t").u32(1).into_bytes();
        let p256 = Key::new(b"p").str("t").u32(256).into_bytes();
        assert!(p1 < p256);
        let prefix = Key::new(b"p").str("t").into_bytes();
        assert_eq!(u32_at(&p256, prefix.len()), Some(256));
        assert_eq!(u32_at(&p256, 1), None);
    }
}
