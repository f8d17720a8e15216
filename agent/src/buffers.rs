//! Large buffers kept for reuse: request frames, fetch answers and the records a fetch
//! reads. Steady traffic then reads and writes into memory already faulted in, instead
//! of fresh pages: a block of 1 MiB or more is its own mapping (`main.rs` pins glibc's
//! mmap threshold so that a flood gives its memory back), faulted in and zeroed page by
//! page each time, and freed with an unmap.
//!
//! A pool keeps at most its idle bound in buffers nobody uses; a buffer is reused only
//! for a need of at least half its size, so a small request never holds a huge buffer.

use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;

/// Buffers smaller than this are not pooled (the allocator's arenas serve them well).
const POOLED_MIN: usize = 64 * 1024;

#[derive(Debug)]
pub struct BufferPool {
    idle: Mutex<Vec<Vec<u8>>>,
    max_idle_bytes: usize,
}

impl BufferPool {
    /// A pool keeping at most `max_idle_bytes` in idle buffers.
    pub fn new(max_idle_bytes: usize) -> BufferPool {
        BufferPool {
            idle: Mutex::new(Vec::new()),
            max_idle_bytes,
        }
    }

    /// An empty buffer with room for `size` bytes: an idle one if one fits.
    pub fn take(&self, size: usize) -> Vec<u8> {
        if size >= POOLED_MIN {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let fit = idle
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= size && b.capacity() / 2 <= size)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            if let Some(i) = fit {
                return idle.swap_remove(i);
            }
        }
        Vec::with_capacity(size)
    }

    /// Keeps `buf` for reuse, if it is large and the idle bound allows.
    pub fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() < POOLED_MIN {
            return;
        }
        buf.clear();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let held: usize = idle.iter().map(Vec::capacity).sum();
        if held + buf.capacity() <= self.max_idle_bytes {
            idle.push(buf);
        }
    }

    /// `buf` as `Bytes` that give it back to this pool when the last of them (slices
    /// included) is dropped.
    pub fn bytes(self: &Arc<Self>, buf: Vec<u8>) -> Bytes {
        if buf.capacity() < POOLED_MIN {
            return Bytes::from(buf);
        }
        Bytes::from_owner(Pooled {
            buf,
            pool: Arc::clone(self),
        })
    }
}

/// The pool of the buffers fetches read records into (one per process: reads are
/// planned deep in a partition, far from any connection): 32 MiB idle at most.
pub fn reads() -> &'static Arc<BufferPool> {
    static READS: LazyLock<Arc<BufferPool>> = LazyLock::new(|| Arc::new(BufferPool::new(32 << 20)));
    &READS
}

struct Pooled {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_when_the_last_slice_goes_and_only_within_bounds() {
        let pool = Arc::new(BufferPool::new(300_000));
        let mut buf = pool.take(200_000);
        buf.resize(200_000, 1);
        let at = buf.as_ptr();
        let bytes = pool.bytes(buf);
        let slice = bytes.slice(1..2);
        drop(bytes);
        let other = pool.take(200_000);
        assert_ne!(other.as_ptr(), at, "a slice still holds it");
        drop(other);
        drop(slice);
        let again = pool.take(150_000);
        assert_eq!(again.as_ptr(), at, "back once the slice is gone");
        drop(again);
        pool.give_back(Vec::with_capacity(200_000));
        assert!(
            pool.take(50_000).capacity() < 200_000,
            "not for a need under half its size"
        );
        pool.give_back(Vec::with_capacity(200_000));
        assert_eq!(
            pool.idle.lock().expect("lock").len(),
            1,
            "the idle bound keeps the second one out"
        );
        pool.give_back(Vec::with_capacity(1000));
        assert_eq!(
            pool.idle.lock().expect("lock").len(),
            1,
            "small ones are not kept"
        );
    }
}
