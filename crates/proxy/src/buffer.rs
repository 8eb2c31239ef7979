//! A read buffer a connection keeps while it is busy: bytes arrive at the end and are consumed
//! from the front, so requests that fit it allocate nothing. An idle connection may
//! [`release`](Buffer::release) it; the next read takes it again.

use tokio::io::AsyncReadExt as _;

/// The bytes are `data[start..]`; `data`'s spare capacity is where the next read lands. It is
/// read into uninitialised (tokio's `read_buf`), so making a buffer costs one `malloc`, not a
/// `calloc` that zeroes 4 KiB for every new connection (issue 27: 4,100 of the 36,700
/// instructions a connection-per-request cost under valgrind).
#[derive(Debug)]
pub(crate) struct Buffer {
    data: Vec<u8>,
    start: usize,
    /// The size it is made with, and made again after a release.
    capacity: usize,
}

impl Buffer {
    pub(crate) fn new(capacity: usize) -> Buffer {
        Buffer {
            data: Vec::with_capacity(capacity),
            start: 0,
            capacity,
        }
    }

    /// Gives the memory back while nothing is buffered (an idle connection's).
    pub(crate) fn release(&mut self) {
        if self.is_empty() {
            self.data = Vec::new();
            self.start = 0;
        }
    }

    /// The bytes read and not yet consumed.
    pub(crate) fn filled(&self) -> &[u8] {
        self.data.get(self.start..).unwrap_or_default()
    }

    pub(crate) fn len(&self) -> usize {
        self.data.len() - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.data.len()
    }

    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n.min(self.len());
        if self.start == self.data.len() {
            self.start = 0;
            self.data.clear();
        }
    }

    /// Moves what is buffered to the front.
    fn compact(&mut self) {
        if self.start > 0 {
            self.data.drain(..self.start);
            self.start = 0;
        }
    }

    /// Makes room for at least `want` more bytes than are buffered now (up to that many in
    /// total when `want` is larger than the buffer), moving what is buffered to the front.
    pub(crate) fn reserve(&mut self, want: usize) {
        let want = want.max(1);
        if self.data.capacity() - self.data.len() >= want {
            return;
        }
        self.compact();
        let need = self.data.len() + want;
        if need > self.data.capacity() {
            let size = need.max(self.data.capacity() * 2);
            self.data.reserve_exact(size - self.data.len());
        }
    }

    /// Gives memory back down to `capacity` if the buffer grew well past it and what is
    /// buffered fits.
    pub(crate) fn shrink_to(&mut self, capacity: usize) {
        if self.data.capacity() > 2 * capacity && self.len() <= capacity {
            self.compact();
            self.data.shrink_to(capacity);
        }
    }

    /// Reads what is available (at least one byte, or 0 at end of stream) into the free space,
    /// making some if there is none.
    pub(crate) async fn read_from<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        stream: &mut R,
    ) -> std::io::Result<usize> {
        if self.data.capacity() == 0 {
            self.data = Vec::with_capacity(self.capacity);
        } else if self.data.len() == self.data.capacity() {
            self.reserve(self.data.capacity().max(4096) / 2);
        }
        stream.read_buf(&mut self.data).await
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
        assert_eq!(b.data.capacity(), 64);
        b.release();
        assert_eq!(b.filled(), b"hello", "a buffer holding bytes keeps them");
    }

    #[test]
    fn consume_and_reserve_keep_the_bytes() {
        let mut b = Buffer::new(8);
        b.data.extend_from_slice(b"abcdef");
        b.consume(2);
        assert_eq!(b.filled(), b"cdef");
        b.reserve(10);
        assert_eq!(b.filled(), b"cdef");
        assert!(b.data.capacity() - b.data.len() >= 10);
        b.consume(4);
        assert!(b.is_empty());
        assert_eq!((b.start, b.data.len()), (0, 0));

        let mut b = Buffer::new(4);
        b.reserve(100);
        b.data.extend_from_slice(b"xyz");
        b.consume(1);
        b.shrink_to(4);
        assert_eq!(b.filled(), b"yz");
        assert!(b.data.capacity() >= 4 && b.data.capacity() < 100);
    }

    /// Reads, consumes, reserves and shrinks in a long random sequence keep exactly the bytes
    /// a plain queue keeps.
    #[tokio::test]
    async fn a_buffer_keeps_what_a_queue_keeps() {
        let mut model = std::collections::VecDeque::<u8>::new();
        let mut b = Buffer::new(16);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut byte = 0u8;
        for _ in 0..20_000 {
            match next() % 5 {
                0 | 1 => {
                    let n = (next() % 40) as usize;
                    let input: Vec<u8> = (0..n)
                        .map(|_| {
                            byte = byte.wrapping_add(1);
                            byte
                        })
                        .collect();
                    let mut reader = &input[..];
                    let got = b.read_from(&mut reader).await.unwrap();
                    model.extend(&input[..got]);
                }
                2 => {
                    let n = (next() as usize) % (b.len() + 1);
                    b.consume(n);
                    model.drain(..n);
                }
                3 => b.reserve((next() % 64) as usize),
                _ => b.shrink_to(16),
            }
            assert_eq!(b.filled(), model.iter().copied().collect::<Vec<_>>());
        }
    }
}
