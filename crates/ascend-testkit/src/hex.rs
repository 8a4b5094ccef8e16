//! Bytes as lowercase hex text and back.

/// `b` as lowercase hex, two digits a byte.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of hex text (surrounding white space ignored). Panics, naming the text, on an
/// odd length or a non-hex digit: a test's own input is wrong then.
#[track_caller]
pub fn from_hex(s: &str) -> Vec<u8> {
    let s = s.trim();
    assert!(s.len() % 2 == 0, "odd-length hex text {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .unwrap_or_else(|| panic!("not hex at {i}: {s:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let b: Vec<u8> = (0..=255).collect();
        let h = to_hex(&b);
        assert_eq!(h.len(), 512);
        assert!(h.starts_with("000102") && h.ends_with("fdfeff"));
        assert_eq!(from_hex(&format!(" {h}\n")), b);
    }

    #[test]
    #[should_panic(expected = "odd-length")]
    fn odd_length_is_refused() {
        from_hex("abc");
    }

    #[test]
    #[should_panic(expected = "not hex")]
    fn a_bad_digit_is_refused() {
        from_hex("0g");
    }
}
