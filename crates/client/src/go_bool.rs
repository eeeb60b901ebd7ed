//! Booleans written as Go's `strconv.ParseBool` reads them, the spellings upstream's flags take:
//! `1`, `t`, `T`, `true`, `TRUE`, `True` and `0`, `f`, `F`, `false`, `FALSE`, `False`. The
//! daemon's boolean flags and csi-proxyctl's read them here, so both accept the same.

/// The value of `text`, `None` when it is none of the spellings.
pub fn parse(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_spellings_are_gos() {
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(super::parse(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(super::parse(f), Some(false), "{f}");
        }
        for bad in ["", "yes", "tRUE", "2", " true", "on"] {
            assert_eq!(super::parse(bad), None, "{bad:?}");
        }
    }
}
