//! Reading the big-endian fields of the state snapshots (producer state and
//! transactions) the log writes beside its segments.

/// The bytes still to read; each field read takes its bytes off the front, `None` when
/// too few are left.
pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.b.split_at_checked(N)?;
        self.b = rest;
        head.try_into().ok()
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    pub(crate) fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }
    pub(crate) fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }
    pub(crate) fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
}
