//! A read buffer a connection keeps while it is busy: bytes arrive at the end and are consumed
//! from the front, so requests that fit it allocate nothing. An idle connection may
//! [`release`](Buffer::release) it; the next read takes it again.

use tokio::io::AsyncReadExt as _;

#[derive(Debug)]
pub(crate) struct Buffer {
    data: Vec<u8>,
    start: usize,
    end: usize,
    /// The size it is made with, and made again after a release.
    capacity: usize,
}

impl Buffer {
    pub(crate) fn new(capacity: usize) -> Buffer {
        Buffer {
            data: vec![0; capacity],
            start: 0,
            end: 0,
            capacity,
        }
    }

    /// Gives the memory back while nothing is buffered (an idle connection's).
    pub(crate) fn release(&mut self) {
        if self.is_empty() {
            self.data = Vec::new();
        }
    }

    /// The bytes read and not yet consumed.
    pub(crate) fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n.min(self.len());
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Makes room for at least `want` more bytes than are buffered now (up to that many in
    /// total when `want` is larger than the buffer), moving what is buffered to the front.
    pub(crate) fn reserve(&mut self, want: usize) {
        if self.data.len() - self.end >= want.max(1) {
            return;
        }
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let need = self.end + want.max(1);
        if need > self.data.len() {
            self.data.resize(need.max(self.data.len() * 2), 0);
        }
    }

    /// Gives memory back down to `capacity` if the buffer grew well past it and what is
    /// buffered fits.
    pub(crate) fn shrink_to(&mut self, capacity: usize) {
        if self.data.len() > 2 * capacity && self.len() <= capacity {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            self.data.truncate(capacity);
            self.data.shrink_to_fit();
        }
    }

    /// Reads what is available (at least one byte, or 0 at end of stream) into the free space,
    /// making some if there is none.
    pub(crate) async fn read_from<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        stream: &mut R,
    ) -> std::io::Result<usize> {
        if self.data.is_empty() {
            self.data = vec![0; self.capacity];
        } else if self.end == self.data.len() {
            self.reserve(self.data.len().max(4096) / 2);
        }
        let n = stream.read(&mut self.data[self.end..]).await?;
        self.end += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_released_buffer_is_taken_again_by_the_next_read() {
        let mut b = Buffer::new(64);
        b.release();
        assert_eq!(b.data.capacity(), 0);
        let mut input: &[u8] = b"hello";
        assert_eq!(b.read_from(&mut input).await.unwrap(), 5);
        assert_eq!(b.filled(), b"hello");
        assert_eq!(b.data.len(), 64);
        b.release();
        assert_eq!(b.filled(), b"hello", "a buffer holding bytes keeps them");
    }

    #[test]
    fn consume_and_reserve_keep_the_bytes() {
        let mut b = Buffer::new(8);
        b.data[..6].copy_from_slice(b"abcdef");
        b.end = 6;
        b.consume(2);
        assert_eq!(b.filled(), b"cdef");
        b.reserve(10);
        assert_eq!(b.filled(), b"cdef");
        assert!(b.data.len() - b.end >= 10);
        b.consume(4);
        assert!(b.is_empty());
        assert_eq!((b.start, b.end), (0, 0));

        let mut b = Buffer::new(4);
        b.reserve(100);
        b.data[..3].copy_from_slice(b"xyz");
        b.end = 3;
        b.consume(1);
        b.shrink_to(4);
        assert_eq!(b.filled(), b"yz");
        assert_eq!(b.data.len(), 4);
    }
}
