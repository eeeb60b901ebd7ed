//! Reading request fields: the conversions every version and operation shares (decimal disk
//! numbers, int64 sizes, required strings).

use csi_proxy_host::error::clip;
use csi_proxy_host::{Error, Result};

/// Parses a disk number that older versions carry as a decimal string. Only plain ASCII digits
/// are accepted (no sign, no blanks) and values beyond u32 are refused rather than truncated.
pub fn parse_disk_number(field: &str, value: &str) -> Result<u32> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} is empty: expected a decimal disk number")));
    }
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::invalid(format!(
            "{field} {:?} is not a decimal disk number (expected digits 0-9 only)",
            clip(value)
        )));
    }
    value.parse::<u32>().map_err(|_| {
        Error::invalid(format!("{field} {:?} is out of range: disk numbers go up to {}", clip(value), u32::MAX))
    })
}

/// Converts a size or count that the wire carries as int64 into the host's unsigned form.
pub fn non_negative(field: &str, value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::invalid(format!("{field} {value} is negative: expected 0 or more")))
}

/// Converts an unsigned host value into the wire's int64, refusing silent wrap-around.
pub fn to_i64(field: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::internal(format!("{field} {value} does not fit the wire's int64")))
}

/// Rejects an empty required string field.
pub fn required<'a>(field: &str, value: &'a str) -> Result<&'a str> {
    if value.is_empty() {
        Err(Error::invalid(format!("{field} is empty")))
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_numbers_parse_strictly() {
        assert_eq!(parse_disk_number("diskID", "0").unwrap(), 0);
        assert_eq!(parse_disk_number("diskID", "4294967295").unwrap(), u32::MAX);
        for bad in ["", "-1", "+1", " 1", "1 ", "0x10", "abc", "4294967296", "99999999999999999999999"] {
            let e = parse_disk_number("diskID", bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}");
            assert!(e.to_string().contains("diskID"), "{e}");
            if !bad.is_empty() {
                assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
            }
        }
        assert!(parse_disk_number("diskID", "4294967296").unwrap_err().to_string().contains("out of range"));
    }

    #[test]
    fn sizes_refuse_negative_values() {
        assert_eq!(non_negative("size_bytes", 5).unwrap(), 5);
        assert!(non_negative("size_bytes", -1).unwrap_err().to_string().contains("size_bytes -1"));
        assert!(to_i64("total_bytes", u64::MAX).is_err());
    }
}
