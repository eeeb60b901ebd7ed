//! Placeholders for rejected `:authority` values: a replacement payload with the original's
//! encoded length, decoded length and Huffman flag, so that no frame changes size.

use super::hpack::{huffman_decode, huffman_encode};

/// Characters a placeholder is made of: each is valid anywhere in an `http::uri::Authority`
/// and its Huffman code is 5 bits plus the given extra (RFC 7541 Appendix B). With these,
/// `k` characters can carry any number of extra bits from 0 to `8k` except `8k - 1` (and 4
/// for a single character), which [`reachable`] encodes.
const PLACEHOLDER_CHARS: [(usize, u8); 7] =
    [(8, b'$'), (6, b'\''), (5, b'!'), (3, b'&'), (2, b'x'), (1, b'b'), (0, b'a')];

fn reachable(chars: usize, extra: usize) -> bool {
    extra == 0 || (extra <= 8 * chars && extra != 8 * chars - 1 && !(chars == 1 && extra == 4))
}

/// The bytes to put in place of a string literal's payload so that it decodes to a valid
/// `:authority` of `decoded_len` octets while keeping its `encoded_len` octets on the wire, its
/// Huffman flag and its length prefix: then no frame changes size, so `h2` sees the same frame
/// layout, CONTINUATION count and header-list size as it would have for a client that sent a
/// valid authority. Plain literals get `x` repeated; Huffman-coded ones a mix of characters
/// whose codes add up to the same number of octets. `None` when no such value exists (a
/// Huffman string averaging more than 13 bits per character, such as a run of backslashes or
/// non-ASCII text); the value is then left for `h2` to refuse.
pub(crate) fn placeholder_payload(huffman: bool, encoded_len: usize, decoded_len: usize) -> Option<Vec<u8>> {
    if decoded_len == 0 {
        return None;
    }
    let payload = if !huffman {
        if encoded_len != decoded_len {
            return None;
        }
        vec![b'x'; decoded_len]
    } else {
        // Total code bits must fill exactly `encoded_len` octets with 0-7 bits of padding.
        let base = 5 * decoded_len;
        let top = 8 * encoded_len;
        let low = base.max(top.checked_sub(7)?);
        let extra = (low..=top).map(|bits| bits - base).find(|&e| reachable(decoded_len, e))?;
        let mut text = Vec::with_capacity(decoded_len);
        let mut left = extra;
        for i in 0..decoded_len {
            let rest = decoded_len - i - 1;
            let &(add, ch) = PLACEHOLDER_CHARS.iter().find(|&&(add, _)| add <= left && reachable(rest, left - add))?;
            text.push(ch);
            left -= add;
        }
        let coded = huffman_encode(&text);
        if coded.len() != encoded_len {
            return None;
        }
        debug_assert!(huffman_decode(&coded).is_ok_and(|d| d == text));
        coded
    };
    Some(payload)
}

/// The decoded placeholder, for tests and logs.
pub(crate) fn placeholder_text(huffman: bool, payload: &[u8]) -> Vec<u8> {
    if huffman {
        huffman_decode(payload).unwrap_or_default()
    } else {
        payload.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::super::hpack::huffman::CODE_LENGTHS;
    use super::*;

    #[test]
    fn placeholder_alphabet_has_the_code_lengths_it_assumes() {
        for (extra, ch) in PLACEHOLDER_CHARS {
            assert_eq!(usize::from(CODE_LENGTHS[usize::from(ch)]), 5 + extra, "{}", ch as char);
        }
        let all: Vec<u8> = PLACEHOLDER_CHARS.iter().map(|&(_, c)| c).collect();
        assert!(http::uri::Authority::try_from(&all[..]).is_ok());
        // `reachable` agrees with brute force for small counts.
        for k in 0..4usize {
            let mut sums = std::collections::BTreeSet::from([0usize]);
            for _ in 0..k {
                sums = sums.iter().flat_map(|s| PLACEHOLDER_CHARS.iter().map(move |&(a, _)| s + a)).collect();
            }
            for extra in 0..=8 * k + 2 {
                assert_eq!(reachable(k, extra), sums.contains(&extra), "k={k} extra={extra}");
            }
        }
    }

    #[test]
    fn placeholders_keep_both_lengths_and_are_valid_authorities() {
        let originals: [&[u8]; 5] = [
            br"\\.\pipe\csi-proxy-disk-v1",
            b"%5C%5C.%5C%5Cpipe%5C%5Ccsi-proxy-disk-v1",
            b"/run/csi-proxy/csi-proxy-disk-v1.sock",
            b"a b",
            b"0",
        ];
        for original in originals {
            for huffman in [false, true] {
                let encoded = if huffman { huffman_encode(original) } else { original.to_vec() };
                let p = placeholder_payload(huffman, encoded.len(), original.len()).expect("placeholder");
                assert_eq!(p.len(), encoded.len());
                let text = placeholder_text(huffman, &p);
                assert_eq!(text.len(), original.len());
                assert!(http::uri::Authority::try_from(&text[..]).is_ok(), "{text:?}");
            }
        }
        // Every length pair a Huffman string can have, up to a size, either works or is
        // denser than 13 bits per character.
        for decoded in 1..40usize {
            for encoded in (5 * decoded).div_ceil(8)..=(30 * decoded).div_ceil(8) {
                match placeholder_payload(true, encoded, decoded) {
                    Some(p) => {
                        assert_eq!(p.len(), encoded);
                        let text = huffman_decode(&p).unwrap();
                        assert_eq!(text.len(), decoded);
                        assert!(http::uri::Authority::try_from(&text[..]).is_ok());
                    }
                    None => assert!(8 * encoded - 7 > 13 * decoded, "{decoded}/{encoded}"),
                }
            }
        }
        assert_eq!(placeholder_payload(false, 3, 3).unwrap(), b"xxx");
        assert_eq!(placeholder_payload(false, 0, 0), None);
        assert_eq!(placeholder_payload(true, 8, 2), None, "30 bits per character");
    }
}
