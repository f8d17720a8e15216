//! A response frame in pieces, so that the records of a fetch answer are not copied
//! into it. `kafka-protocol` encodes a partition's records with one `put_slice` of the
//! `Bytes` the answer holds; [`Frame`] recognizes those slices by address and keeps a
//! reference to the `Bytes` instead of copying them, and the writer sends the pieces
//! with vectored writes (`writev`). What the encoder writes itself (headers, offsets,
//! aborted transactions) is copied into one buffer as before.
//!
//! Each fetched byte is copied once less: from the log into the read buffer, and from
//! there into the socket (the kernel's copy), not also into the frame.

use std::io::IoSlice;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Records shorter than this are copied: a piece of their own would cost more (an
/// `iovec`, a reference) than the copy saves.
pub const SPLICED_MIN: usize = 16 * 1024;

/// An encoded frame: what the encoder wrote, with the records it named spliced in by
/// reference.
#[derive(Debug)]
pub struct Frame {
    inline: BytesMut,
    /// Each spliced piece: where it goes in `inline` (before the byte at that index),
    /// and its bytes.
    spliced: Vec<(usize, Bytes)>,
    spliced_len: usize,
    /// The records that may be spliced, not yet seen (recognized by address and length).
    wanted: Vec<Bytes>,
}

impl Frame {
    /// A frame written into `inline` (emptied), which splices `wanted` where the
    /// encoder puts exactly one of them (those shorter than [`SPLICED_MIN`] are copied
    /// all the same).
    pub fn new(mut inline: BytesMut, wanted: Vec<Bytes>) -> Frame {
        inline.clear();
        Frame {
            inline,
            spliced: Vec::new(),
            spliced_len: 0,
            wanted,
        }
    }

    /// The frame's whole length.
    pub fn len(&self) -> usize {
        self.inline.len() + self.spliced_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the encoder wrote (its first 4 bytes are the frame's size prefix, before
    /// any spliced piece).
    pub fn inline_mut(&mut self) -> &mut [u8] {
        &mut self.inline[..]
    }

    /// The pieces in order.
    pub fn pieces(&self) -> Vec<IoSlice<'_>> {
        let mut out = Vec::with_capacity(2 * self.spliced.len() + 1);
        let mut from = 0;
        for (at, bytes) in &self.spliced {
            out.push(IoSlice::new(&self.inline[from..*at]));
            out.push(IoSlice::new(bytes));
            from = *at;
        }
        out.push(IoSlice::new(&self.inline[from..]));
        out.retain(|s| !s.is_empty());
        out
    }

    /// The inline buffer, for an encoder that writes into a `BytesMut` only (every
    /// spliced piece copied in first, so what it writes comes after them).
    pub fn inline_buf(&mut self) -> &mut BytesMut {
        self.unsplice();
        &mut self.inline
    }

    /// The buffer the encoder wrote into, to be given back to its pool; the spliced
    /// records are dropped (their read buffers go back to theirs).
    pub fn into_inline(self) -> BytesMut {
        self.inline
    }

    /// The whole frame in one buffer (tests).
    pub fn to_vec(&self) -> Vec<u8> {
        self.pieces()
            .iter()
            .flat_map(|s| s.iter().copied())
            .collect()
    }

    /// Copies every spliced piece into the inline buffer: for an encoder that goes back
    /// into what it wrote (`seek`, `range`) past a spliced piece. (A fetch answer's
    /// encoder never does.)
    fn unsplice(&mut self) {
        if self.spliced.is_empty() {
            return;
        }
        let mut whole = BytesMut::with_capacity(self.len());
        for piece in self.pieces() {
            whole.put_slice(&piece);
        }
        self.inline = whole;
        self.spliced.clear();
        self.spliced_len = 0;
    }

    /// Where logical offset `offset` is in the inline buffer, if no spliced piece
    /// covers it or comes after it.
    fn inline_at(&self, offset: usize) -> Option<usize> {
        let spliced_before: usize = self.spliced_len;
        let last = self
            .spliced
            .last()
            .map_or(0, |(at, _)| *at + spliced_before);
        (offset >= last).then(|| offset - spliced_before)
    }
}

// Safety: every method but `put_slice` is the inline buffer's own, so the frame keeps
// the promises `BytesMut` keeps (`chunk_mut` is writable and `advance_mut` marks what
// the caller initialized). `put_slice` either copies, as `BytesMut` does, or keeps a
// reference and writes nothing.
#[allow(unsafe_code)]
unsafe impl BufMut for Frame {
    fn remaining_mut(&self) -> usize {
        self.inline.remaining_mut()
    }

    #[allow(unsafe_code)]
    unsafe fn advance_mut(&mut self, cnt: usize) {
        // Safety: the caller's promise is passed on to the buffer it was made for.
        unsafe { self.inline.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.inline.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= SPLICED_MIN
            && let Some(i) = (self.wanted.iter())
                .position(|r| r.as_ptr() == src.as_ptr() && r.len() == src.len())
        {
            let bytes = self.wanted.swap_remove(i);
            self.spliced_len += bytes.len();
            self.spliced.push((self.inline.len(), bytes));
            return;
        }
        self.inline.put_slice(src);
    }
}

impl ByteBufMut for Frame {
    fn offset(&self) -> usize {
        self.len()
    }

    fn seek(&mut self, offset: usize) {
        if self.inline_at(offset).is_none() {
            self.unsplice();
        }
        let at = self.inline_at(offset).unwrap_or(offset);
        self.inline.resize(at, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        if self.inline_at(r.start).is_none() {
            self.unsplice();
        }
        let start = self.inline_at(r.start).unwrap_or(r.start);
        &mut self.inline[start..start + r.len()]
    }
}

/// Writes `frame` whole: its pieces with vectored writes.
pub async fn write<W: AsyncWrite + Unpin>(writer: &mut W, frame: &Frame) -> std::io::Result<()> {
    let mut pieces = frame.pieces();
    let mut left = &mut pieces[..];
    while !left.is_empty() {
        let n = writer.write_vectored(left).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut left, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_records_are_spliced_by_reference_and_the_frame_reads_as_if_copied() {
        let big = Bytes::from(vec![7u8; SPLICED_MIN]);
        let small = Bytes::from(vec![9u8; 10]);
        let mut frame = Frame::new(BytesMut::new(), vec![big.clone(), small.clone()]);
        frame.put_i32(1);
        frame.put_slice(&big);
        frame.put_i32(2);
        frame.put_slice(&small);
        frame.put_slice(&big.clone()); // The same records again: copied this time.
        assert_eq!(frame.spliced.len(), 1);
        assert_eq!(frame.len(), 4 + big.len() + 4 + 10 + big.len());
        let mut expected = Vec::new();
        expected.extend_from_slice(&1i32.to_be_bytes());
        expected.extend_from_slice(&big);
        expected.extend_from_slice(&2i32.to_be_bytes());
        expected.extend_from_slice(&small);
        expected.extend_from_slice(&big);
        assert_eq!(frame.to_vec(), expected);
    }

    #[test]
    fn a_slice_of_the_same_length_elsewhere_is_copied() {
        let big = Bytes::from(vec![1u8; SPLICED_MIN]);
        let other = vec![1u8; SPLICED_MIN];
        let mut frame = Frame::new(BytesMut::new(), vec![big]);
        frame.put_slice(&other);
        assert!(frame.spliced.is_empty());
        assert_eq!(frame.to_vec(), other);
    }

    #[test]
    fn going_back_past_a_spliced_piece_copies_it_in_first() {
        let big = Bytes::from(vec![3u8; SPLICED_MIN]);
        let mut frame = Frame::new(BytesMut::new(), vec![big.clone()]);
        frame.put_i32(0);
        frame.put_slice(&big);
        frame.put_i32(5);
        frame.range(0..4).copy_from_slice(&42i32.to_be_bytes());
        let mut expected = 42i32.to_be_bytes().to_vec();
        expected.extend_from_slice(&big);
        expected.extend_from_slice(&5i32.to_be_bytes());
        assert_eq!(frame.to_vec(), expected);
        // Past the last piece no copy is needed.
        let mut frame = Frame::new(BytesMut::new(), vec![big.clone()]);
        frame.put_slice(&big);
        frame.put_i32(0);
        let end = frame.len();
        frame
            .range(end - 4..end)
            .copy_from_slice(&6i32.to_be_bytes());
        assert_eq!(frame.spliced.len(), 1);
        assert_eq!(&frame.to_vec()[end - 4..], &6i32.to_be_bytes());
    }

    #[tokio::test]
    async fn a_frame_is_written_whole_in_order() {
        let big = Bytes::from((0..SPLICED_MIN * 3).map(|i| i as u8).collect::<Vec<_>>());
        let mut frame = Frame::new(BytesMut::new(), vec![big.clone()]);
        frame.put_i32(11);
        frame.put_slice(&big);
        frame.put_i32(12);
        let mut out = Vec::new();
        write(&mut out, &frame).await.expect("written");
        assert_eq!(out, frame.to_vec());
    }
}
