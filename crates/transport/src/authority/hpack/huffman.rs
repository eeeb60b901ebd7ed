//! The HPACK Huffman code (RFC 7541 §5.2, Appendix B).

use super::HpackError;

/// Code length in bits of each symbol of the HPACK Huffman code, indexed by symbol
/// (byte values 0..=255, then 256 = EOS), as listed in RFC 7541 Appendix B.
///
/// The code in Appendix B is canonical: within one length, codes are consecutive and ordered
/// by symbol, and shorter codes come first. The lengths alone therefore determine every code,
/// which keeps this table small and easy to check against the RFC.
pub(crate) const CODE_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, // 0x20  !"#$%&'()*+,-./
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, // 0x30 0123456789:;<=>?
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, // 0x40 @ABCDEFGHIJKLMNO
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, // 0x50 PQRSTUVWXYZ[\]^_
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, // 0x60 `abcdefghijklmno
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, // 0x70 pqrstuvwxyz{|}~
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 0xf0
    30, // EOS
];

const EOS: u16 = 256;
const MAX_CODE_LEN: usize = 30;

/// Canonical-code decoding tables, derived from [`CODE_LENGTHS`] at compile time.
struct Canonical {
    /// Number of codes of each length.
    count: [u32; MAX_CODE_LEN + 1],
    /// Numerically smallest code of each length.
    first_code: [u32; MAX_CODE_LEN + 1],
    /// Position in `symbols` of the first symbol of each length.
    first_index: [u32; MAX_CODE_LEN + 1],
    /// Symbols sorted by (code length, symbol).
    symbols: [u16; 257],
}

const fn build_canonical() -> Canonical {
    let mut count = [0u32; MAX_CODE_LEN + 1];
    let mut i = 0;
    while i < 257 {
        count[CODE_LENGTHS[i] as usize] += 1;
        i += 1;
    }
    let mut first_code = [0u32; MAX_CODE_LEN + 1];
    let mut first_index = [0u32; MAX_CODE_LEN + 1];
    let mut code = 0u32;
    let mut index = 0u32;
    let mut len = 1;
    while len <= MAX_CODE_LEN {
        first_code[len] = code;
        first_index[len] = index;
        code = (code + count[len]) << 1;
        index += count[len];
        len += 1;
    }
    let mut symbols = [0u16; 257];
    let mut next = first_index;
    let mut sym = 0;
    while sym < 257 {
        let l = CODE_LENGTHS[sym] as usize;
        symbols[next[l] as usize] = sym as u16;
        next[l] += 1;
        sym += 1;
    }
    Canonical { count, first_code, first_index, symbols }
}

static CANONICAL: Canonical = build_canonical();

/// A Huffman decoder that can be fed a string in pieces (a value may span frames). Strings are
/// short, so a bit-at-a-time walk over the canonical code is plenty fast and needs no table.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HuffmanStream {
    code: u32,
    len: usize,
    decoded: usize,
    failed: bool,
}

impl HuffmanStream {
    /// Decodes `input`, appending symbols to `out` while it has room (`limit` symbols in all).
    pub(crate) fn feed(&mut self, input: &[u8], out: &mut Vec<u8>, limit: usize) {
        let t = &CANONICAL;
        for &byte in input {
            if self.failed {
                return;
            }
            for shift in (0..8).rev() {
                self.code = (self.code << 1) | u32::from((byte >> shift) & 1);
                self.len += 1;
                if self.len > MAX_CODE_LEN {
                    // Unreachable for a complete code like HPACK's; kept so bad input can't panic.
                    self.failed = true;
                    return;
                }
                let offset = self.code.wrapping_sub(t.first_code[self.len]);
                if self.code >= t.first_code[self.len] && offset < t.count[self.len] {
                    let sym = t.symbols[(t.first_index[self.len] + offset) as usize];
                    if sym == EOS {
                        self.failed = true;
                        return;
                    }
                    if out.len() < limit {
                        out.push(sym as u8);
                    }
                    self.decoded += 1;
                    self.code = 0;
                    self.len = 0;
                }
            }
        }
    }

    /// Number of symbols decoded, once the whole string has been fed; an error for EOS inside
    /// the string or padding that is not a prefix of EOS (fewer than 8 one bits), as h2 rules.
    pub(crate) fn finish(&self) -> Result<usize, HpackError> {
        if self.failed || self.len > 7 || self.code != (1u32 << self.len) - 1 {
            return Err(HpackError::Huffman);
        }
        Ok(self.decoded)
    }
}

/// Decodes a whole Huffman-coded string.
pub(crate) fn huffman_decode(input: &[u8]) -> Result<Vec<u8>, HpackError> {
    let mut h = HuffmanStream::default();
    let mut out = Vec::with_capacity(input.len() + input.len() / 2);
    h.feed(input, &mut out, usize::MAX);
    h.finish()?;
    Ok(out)
}

/// Huffman-encodes `input`, padding the last octet with one bits.
pub fn huffman_encode(input: &[u8]) -> Vec<u8> {
    let t = &CANONICAL;
    // Recover each symbol's code from its rank within its length.
    let mut codes = [0u32; 257];
    for len in 1..=MAX_CODE_LEN {
        for k in 0..t.count[len] {
            let sym = t.symbols[(t.first_index[len] + k) as usize];
            codes[sym as usize] = t.first_code[len] + k;
        }
    }
    let mut out = Vec::new();
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    for &b in input {
        let len = u32::from(CODE_LENGTHS[b as usize]);
        acc = (acc << len) | u64::from(codes[b as usize]);
        bits += len;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) as u8) | ((1u8 << pad) - 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::hex;
    use super::*;

    #[test]
    fn huffman_rfc_c4_examples() {
        assert_eq!(huffman_decode(&hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff")).unwrap(), b"www.example.com");
        assert_eq!(huffman_decode(&hex("a8eb 1064 9cbf")).unwrap(), b"no-cache");
        assert_eq!(huffman_decode(&hex("25a8 49e9 5ba9 7d7f")).unwrap(), b"custom-key");
        assert_eq!(huffman_decode(&hex("25a8 49e9 5bb8 e8b4 bf")).unwrap(), b"custom-value");
    }

    #[test]
    fn huffman_code_is_complete_and_round_trips() {
        // The longest code (EOS) must come out as thirty 1 bits if the lengths are right.
        let t = &CANONICAL;
        assert_eq!(t.first_code[30] + t.count[30] - 1, (1 << 30) - 1);
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        assert_eq!(huffman_decode(&huffman_encode(&all)).unwrap(), all);
        assert_eq!(huffman_decode(&[]).unwrap(), b"");
    }

    #[test]
    fn huffman_rejects_bad_padding_and_eos() {
        // '0' is 00000; padding with zeros instead of ones is invalid.
        assert_eq!(huffman_decode(&[0b0000_0000]), Err(HpackError::Huffman));
        // A whole octet of padding is too much.
        assert_eq!(huffman_decode(&[0x07, 0xff]), Err(HpackError::Huffman));
        // Thirty ones is EOS, which must not appear in a string.
        assert_eq!(huffman_decode(&[0xff, 0xff, 0xff, 0xff]), Err(HpackError::Huffman));
    }

    #[test]
    fn streaming_huffman_matches_whole_string_decoding() {
        let text = br"%5C%5C.%5C%5Cpipe%5C%5Ccsi-proxy-disk-v1 \\.\pipe\x";
        let coded = huffman_encode(text);
        for split in 0..=coded.len() {
            let mut h = HuffmanStream::default();
            let mut out = Vec::new();
            h.feed(&coded[..split], &mut out, usize::MAX);
            h.feed(&coded[split..], &mut out, usize::MAX);
            assert_eq!(h.finish(), Ok(text.len()));
            assert_eq!(out, text);
        }
        // The output limit bounds what is kept, not what is counted.
        let mut h = HuffmanStream::default();
        let mut out = Vec::new();
        h.feed(&coded, &mut out, 3);
        assert_eq!((h.finish(), out.len()), (Ok(text.len()), 3));
    }
}
