//! A bounds-checked little-endian reader over the bytes of a GGUF file.

use crate::GgufError;

/// Reads primitive values from a byte slice, failing with [`GgufError::Truncated`] instead of
/// reading past the end.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(crate) fn file_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Take `n` bytes, naming `what` in the error if the file ends first.
    pub(crate) fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n as u64,
                available: self.remaining() as u64,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &dyn Fn() -> String) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: &dyn Fn() -> String) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count that will be used to allocate `count` items of at least `min_item_bytes` bytes
    /// each: rejected unless that many bytes remain in the file.
    pub(crate) fn count(&mut self, min_item_bytes: usize, what: &dyn Fn() -> String) -> Result<usize, GgufError> {
        let count = self.u64(what)?;
        let need = count.checked_mul(min_item_bytes.max(1) as u64);
        match need {
            Some(need) if need <= self.remaining() as u64 => Ok(count as usize),
            _ => Err(GgufError::AbsurdCount { what: what(), count, file_len: self.file_len() }),
        }
    }

    /// A GGUF string: u64 length then UTF-8 bytes.
    pub(crate) fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.count(1, what)?;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 { what: what() }),
        }
    }
}
