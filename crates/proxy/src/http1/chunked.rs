//! An incremental decoder of the chunked transfer coding (RFC 9112 §7.1).
//!
//! ```text
//! chunked-body   = *chunk last-chunk trailer-section CRLF
//! chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! last-chunk     = 1*("0") [ chunk-ext ] CRLF
//! chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//! trailer-section = *( field-line CRLF )
//! ```
//!
//! The decoder is a byte-at-a-time state machine, so a body can arrive in pieces of any size:
//! it is fed whatever has been read, passes the data on, and says how much of the input
//! belonged to the body. It is used on both sides: request bodies are decoded and forwarded
//! with a length; chunked responses are checked as they are relayed (or decoded for an HTTP/1.0
//! client). Line endings must be CRLF. After a chunk size come only whitespace, then `;` and
//! extensions, or the CRLF: `5 junk` is refused, since two parsers that read a size line
//! differently would disagree on where the body ends. The bytes after a size, and the trailer
//! section, are bounded by `CHUNK_META_LIMIT`; trailer fields are checked as
//! `token ":" value` without obs-fold.

/// Why a chunked body is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChunkError {
    #[error("invalid chunk size line")]
    Size,
    #[error("chunk size too large")]
    Overflow,
    #[error("chunk data not followed by CRLF")]
    DataEnd,
    #[error("chunk extension or trailer section too long")]
    TooLong,
    #[error("invalid trailer field")]
    Trailer,
}

/// RFC 9110 §5.6.2.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size {
        digits: u8,
    },
    /// Whitespace after the size (BWS before a `;`).
    SizeSpace,
    /// After a `;`, to the end of the line.
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    /// In a trailer field's name.
    TrailerName,
    /// In a trailer field's value.
    Trailer,
    TrailerLf,
    FinalLf,
    Done,
}

/// An incremental chunked-body decoder: feeds on whatever bytes have arrived, reports the data
/// and how much of the input belongs to the body, and where it ends.
#[derive(Debug, Clone)]
pub(crate) struct Chunked {
    state: ChunkState,
    /// Data bytes left in the current chunk.
    remaining: u64,
    /// Bytes after the digits on the current size line (whitespace and extensions), or of the
    /// trailer section.
    meta: usize,
}

/// Bound on chunk extensions per line and on the trailer section: nothing in them is used,
/// so they only need to fit what real senders write.
const CHUNK_META_LIMIT: usize = 16 * 1024;

impl Default for Chunked {
    fn default() -> Self {
        Chunked {
            state: ChunkState::Size { digits: 0 },
            remaining: 0,
            meta: 0,
        }
    }
}

impl Chunked {
    pub(crate) fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Data bytes the sender has announced and not yet sent: the rest of the current chunk,
    /// or, while its size is being read, the size so far (a lower bound). A body that will
    /// exceed a limit is refused on its word, before its data arrives (as nginx does).
    pub(crate) fn announced(&self) -> u64 {
        self.remaining
    }

    /// The state after byte `b`, which follows the digits of a chunk size or whitespace after
    /// them: `chunk-size [ chunk-ext ] CRLF` with `chunk-ext = *( BWS ";" ... )` (RFC 9112
    /// §7.1.1). Whitespace straight before the CRLF is accepted too, as hyper does.
    fn after_size(&mut self, b: u8) -> Result<(), ChunkError> {
        self.state = match b {
            b' ' | b'\t' => ChunkState::SizeSpace,
            b';' => ChunkState::Extension,
            b'\r' => ChunkState::SizeLf,
            _ => return Err(ChunkError::Size),
        };
        Ok(())
    }

    /// Decodes from `input`, passing each run of data to `on_data`; returns the bytes of
    /// `input` consumed (all of them unless the body ended inside it).
    pub(crate) fn advance(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<usize, ChunkError> {
        use ChunkState::*;
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            // One match on the state per byte: this loop is on every chunked body's path.
            match self.state {
                Size { digits } => self.size_digit(b, digits)?,
                // Only whitespace, then the extensions or the end of the line: `5 junk` is
                // not a size line.
                SizeSpace => {
                    self.count_meta()?;
                    self.after_size(b)?;
                }
                Extension => match b {
                    b'\r' => self.state = SizeLf,
                    b'\n' => return Err(ChunkError::Size),
                    _ => self.count_meta()?,
                },
                SizeLf if b != b'\n' => return Err(ChunkError::Size),
                SizeLf if self.remaining == 0 => {
                    self.meta = 0;
                    self.state = TrailerStart;
                }
                SizeLf => self.state = Data,
                Data => {
                    let take = (input.len() - i)
                        .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                    on_data(&input[i..i + take]);
                    self.remaining -= take as u64;
                    i += take;
                    if self.remaining == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr if b == b'\r' => self.state = DataLf,
                DataLf if b == b'\n' => self.state = Size { digits: 0 },
                DataCr | DataLf => return Err(ChunkError::DataEnd),
                TrailerStart | TrailerName | Trailer => self.trailer_byte(b)?,
                TrailerLf if b == b'\n' => self.state = TrailerStart,
                FinalLf if b == b'\n' => {
                    self.state = Done;
                    return Ok(i + 1);
                }
                TrailerLf | FinalLf => return Err(ChunkError::Size),
                Done => return Ok(i),
            }
            i += 1;
        }
        Ok(i)
    }

    /// Takes byte `b` of a chunk size, `digits` hex digits in.
    fn size_digit(&mut self, b: u8, digits: u8) -> Result<(), ChunkError> {
        match (b as char).to_digit(16) {
            Some(d) => {
                if self.remaining > u64::MAX >> 4 {
                    return Err(ChunkError::Overflow);
                }
                self.remaining = self.remaining << 4 | u64::from(d);
                self.state = ChunkState::Size {
                    digits: digits.saturating_add(1),
                };
                Ok(())
            }
            None if digits == 0 => Err(ChunkError::Size),
            None => {
                self.meta = 1;
                self.after_size(b)
            }
        }
    }

    /// Takes byte `b` of a trailer field line, or the CR of the blank line that ends the
    /// body.
    fn trailer_byte(&mut self, b: u8) -> Result<(), ChunkError> {
        use ChunkState::*;
        if self.state != TrailerStart {
            self.count_meta()?;
        }
        self.state = match (self.state, b) {
            (TrailerStart, b'\r') => FinalLf,
            // A field line: `token ":" value` (no obs-fold, no empty name).
            (TrailerStart | TrailerName, b) if is_tchar(b) => TrailerName,
            (TrailerName, b':') => Trailer,
            (Trailer, b'\r') => TrailerLf,
            (Trailer, b) if b == b'\t' || !b.is_ascii_control() => Trailer,
            _ => return Err(ChunkError::Trailer),
        };
        Ok(())
    }

    /// Counts one more byte of extensions or trailer, against [`CHUNK_META_LIMIT`].
    fn count_meta(&mut self) -> Result<(), ChunkError> {
        self.meta += 1;
        if self.meta > CHUNK_META_LIMIT {
            return Err(ChunkError::TooLong);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dechunk(input: &[u8]) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut c = Chunked::default();
        let mut data = Vec::new();
        let used = c.advance(input, |d| data.extend_from_slice(d))?;
        Ok((data, used, c.is_done()))
    }

    #[test]
    fn chunked_bodies() {
        let body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (data, used, done) = dechunk(body).unwrap();
        assert_eq!(data, b"hello world");
        assert!(done);
        assert_eq!(used, body.len() - 4);

        // Byte by byte gives the same.
        let mut c = Chunked::default();
        let mut data = Vec::new();
        for b in &body[..body.len() - 4] {
            assert_eq!(
                c.advance(std::slice::from_ref(b), |d| data.extend_from_slice(d)),
                Ok(1)
            );
        }
        assert!(c.is_done());
        assert_eq!(data, b"hello world");

        assert_eq!(dechunk(b"zz\r\n").unwrap_err(), ChunkError::Size);
        assert_eq!(
            dechunk(b"ffffffffffffffffff\r\n").unwrap_err(),
            ChunkError::Overflow
        );
        assert_eq!(dechunk(b"3\r\nabcX").unwrap_err(), ChunkError::DataEnd);
        assert_eq!(dechunk(b"3\nabc").unwrap_err(), ChunkError::Size);
        assert_eq!(dechunk(b"\r\n").unwrap_err(), ChunkError::Size);
        assert_eq!(
            dechunk(b"0\r\nX(T: 1\r\n\r\n").unwrap_err(),
            ChunkError::Trailer
        );
        assert_eq!(
            dechunk(b"0\r\n folded\r\n\r\n").unwrap_err(),
            ChunkError::Trailer
        );
        assert_eq!(
            dechunk(b"0\r\nNoColon\r\n\r\n").unwrap_err(),
            ChunkError::Trailer
        );
        let (_, _, done) = dechunk(b"3\r\nab").unwrap();
        assert!(!done);
    }

    #[test]
    fn after_the_size_only_whitespace_then_an_extension_or_the_line_end() {
        // chunk-size [ chunk-ext ] CRLF, chunk-ext = *( BWS ";" BWS ext-name [ ... ] ).
        for good in [
            &b"5;a=b\r\nhello\r\n0\r\n\r\n"[..],
            b"5 ;a=b\r\nhello\r\n0\r\n\r\n",
            b"5 \t ; a = \"b\"\r\nhello\r\n0\r\n\r\n",
            b"5 \r\nhello\r\n0\t\r\n\r\n",
        ] {
            let (data, used, done) = dechunk(good).unwrap_or_else(|e| panic!("{good:?}: {e}"));
            assert_eq!((&data[..], used, done), (&b"hello"[..], good.len(), true));
        }
        for bad in [
            &b"5 junk\r\nhello\r\n0\r\n\r\n"[..],
            b"5junk\r\nhello\r\n0\r\n\r\n",
            b"5 5\r\nhello\r\n0\r\n\r\n",
            b"5\t=x\r\nhello\r\n0\r\n\r\n",
            b"5 \n",
            b"5\r\nhello\r\n0 junk\r\n\r\n",
        ] {
            assert_eq!(dechunk(bad).unwrap_err(), ChunkError::Size, "{bad:?}");
        }
        // Whitespace counts against the extension limit, as extensions do.
        let mut long = b"5".to_vec();
        long.resize(CHUNK_META_LIMIT + 2, b' ');
        assert_eq!(dechunk(&long).unwrap_err(), ChunkError::TooLong);
        let mut long = b"5;".to_vec();
        long.resize(CHUNK_META_LIMIT + 3, b'x');
        assert_eq!(dechunk(&long).unwrap_err(), ChunkError::TooLong);
    }
}
