//! Just enough HPACK (RFC 7541) for two jobs:
//!
//! - the building blocks of the adapter's HPACK mirror (`super::mirror`): integers read one
//!   octet at a time ([`IntStep`]), a Huffman decoder that can be fed a string piece by piece
//!   ([`huffman`]) and the table ([`table`]);
//! - [`HeaderDecoder`] ([`decoder`]), a plain header block decoder for tests that read raw
//!   server frames.
//!
//! Both apply `h2`'s limit where RFC 7541 sets none (integers of at most five octets), so that
//! they agree with the server about where a representation ends.

mod decoder;
pub(crate) mod huffman;
mod table;

pub use self::decoder::HeaderDecoder;
pub(crate) use self::huffman::{huffman_decode, huffman_encode, HuffmanStream};
pub(crate) use self::table::{Entry, Table};

// ===== errors =====

/// Why [`HeaderDecoder`] could not decode a header block. The adapter's HPACK mirror meets some
/// of the same conditions (an integer too long, an invalid Huffman string) and stops
/// interpreting the connection there, so that the HTTP/2 server sees, and rejects, the
/// original bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HpackError {
    /// A representation runs past the end of the block.
    #[error("truncated representation")]
    Truncated,
    /// An integer needs more continuation octets than h2 accepts.
    #[error("integer too long")]
    IntegerOverflow,
    /// Index 0, or an index past the end of the static + dynamic table.
    #[error("invalid table index {0}")]
    BadIndex(usize),
    /// Invalid Huffman code: EOS inside the string, or bad padding.
    #[error("invalid Huffman-coded string")]
    Huffman,
    /// Dynamic table size update above the limit the decoder advertised.
    #[error("table size update to {0} above limit")]
    TableSizeTooLarge(usize),
    /// Dynamic table size update after a header field (h2 rejects these).
    #[error("table size update after a header field")]
    TableSizeMisplaced,
}

// ===== integers (RFC 7541 §5.1) =====

/// Most continuation octets accepted after the prefix octet. h2 gives up after five octets in
/// total, so accepting more here could let the two decoders disagree about where a
/// representation ends.
const MAX_CONTINUATION_OCTETS: usize = 4;

/// Decodes an integer whose first octet keeps `prefix_bits` low bits for the value.
/// Returns the value and the number of octets it occupied.
pub(crate) fn decode_int(buf: &[u8], prefix_bits: u8) -> Result<(usize, usize), HpackError> {
    debug_assert!((1..=8).contains(&prefix_bits));
    let mut step = IntStep::First { prefix: prefix_bits };
    for (i, &b) in buf.iter().enumerate() {
        if let Some(value) = step.feed(b)? {
            return Ok((value, i + 1));
        }
    }
    Err(HpackError::Truncated)
}

/// An HPACK integer read one octet at a time, with h2's limit of five octets in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntStep {
    /// Expecting the first octet, whose low `prefix` bits start the value.
    First {
        prefix: u8,
    },
    More {
        value: usize,
        shift: u32,
        octets: usize,
    },
}

impl IntStep {
    /// Takes the next octet; the value once complete.
    pub(crate) fn feed(&mut self, b: u8) -> Result<Option<usize>, HpackError> {
        match *self {
            IntStep::First { prefix } => {
                let mask = (((1u16) << prefix) - 1) as u8;
                let value = usize::from(b & mask);
                if value < usize::from(mask) {
                    return Ok(Some(value));
                }
                *self = IntStep::More { value, shift: 0, octets: 1 };
                Ok(None)
            }
            IntStep::More { value, shift, octets } => {
                // Four continuation octets carry at most 28 bits: no overflow even on 32 bits.
                let value = value + (usize::from(b & 0x7f) << shift);
                if b & 0x80 == 0 {
                    return Ok(Some(value));
                }
                if octets + 1 == MAX_CONTINUATION_OCTETS + 1 {
                    return Err(HpackError::IntegerOverflow);
                }
                *self = IntStep::More { value, shift: shift + 7, octets: octets + 1 };
                Ok(None)
            }
        }
    }
}

/// Appends `value` as an HPACK integer; `flags` supplies the bits above the prefix.
#[cfg(any(test, feature = "fuzzing"))]
pub fn encode_int(mut value: usize, prefix_bits: u8, flags: u8, out: &mut Vec<u8>) {
    let mask = (((1u16) << prefix_bits) - 1) as usize;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Test input written as hex, whitespace ignored.
#[cfg(test)]
fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_rfc_c1() {
        // C.1.1: 10 in a 5-bit prefix.
        assert_eq!(decode_int(&[0b0000_1010], 5), Ok((10, 1)));
        // C.1.2: 1337 in a 5-bit prefix takes three octets.
        assert_eq!(decode_int(&[0x1f, 0x9a, 0x0a], 5), Ok((1337, 3)));
        // C.1.3: 42 starting at an octet boundary.
        assert_eq!(decode_int(&[42], 8), Ok((42, 1)));
        // Bits above the prefix are ignored.
        assert_eq!(decode_int(&[0xea], 5), Ok((10, 1)));
        // Exactly the prefix maximum needs a zero continuation octet.
        assert_eq!(decode_int(&[0x1f, 0x00], 5), Ok((31, 2)));
    }

    #[test]
    fn integer_limits() {
        assert_eq!(decode_int(&[], 5), Err(HpackError::Truncated));
        assert_eq!(decode_int(&[0x1f, 0x80], 5), Err(HpackError::Truncated));
        // Four continuation octets are accepted (as in h2), a fifth is not.
        assert_eq!(decode_int(&[0x7f, 0xff, 0xff, 0xff, 0x7f], 7), Ok((127 + (1 << 28) - 1, 5)));
        assert_eq!(decode_int(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0x01], 7), Err(HpackError::IntegerOverflow));
    }

    #[test]
    fn integer_round_trip() {
        for prefix in 1..=8u8 {
            for value in [0usize, 1, 30, 31, 126, 127, 128, 255, 1337, 16_384, 1 << 20] {
                let mut buf = Vec::new();
                encode_int(value, prefix, 0, &mut buf);
                assert_eq!(decode_int(&buf, prefix), Ok((value, buf.len())), "{value}/{prefix}");
            }
        }
    }
}
