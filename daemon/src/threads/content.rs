//! Turn text measured and cut in UTF-16 code units (the unit of ThreadRead's limits),
//! never splitting a character.

/// Length in UTF-16 code units.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Byte index in `s` of the UTF-16 offset `units`, if it falls on a character boundary.
pub fn byte_index(s: &str, units: usize) -> Option<usize> {
    let mut seen = 0;
    for (i, c) in s.char_indices() {
        if seen == units {
            return Some(i);
        }
        if seen > units {
            return None;
        }
        seen += c.len_utf16();
    }
    (seen == units).then_some(s.len())
}

/// The longest prefix of `s` that is at most `max_units` long.
pub fn prefix(s: &str, max_units: usize) -> &str {
    let mut seen = 0;
    for (i, c) in s.char_indices() {
        if seen + c.len_utf16() > max_units {
            return &s[..i];
        }
        seen += c.len_utf16();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_cuts_in_utf16_units() {
        let s = "a😀b"; // 😀 is two UTF-16 units
        assert_eq!(utf16_len(s), 4);
        assert_eq!(prefix(s, 2), "a", "never splits a surrogate pair");
        assert_eq!(prefix(s, 3), "a😀");
        assert_eq!(byte_index(s, 1), Some(1));
        assert_eq!(byte_index(s, 2), None, "inside the pair");
        assert_eq!(byte_index(s, 3), Some(5));
        assert_eq!(byte_index(s, 4), Some(6));
        assert_eq!(byte_index(s, 5), None);
    }
}
