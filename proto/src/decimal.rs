//! Integers written as text on the call path, without `format!`'s
//! machinery: a grant's issue time, a `grpc-timeout`'s count.

/// Appends `n` in decimal, as `write!(text, "{n}")` would.
pub(crate) fn push(text: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in &digits[start..] {
        text.push(char::from(digit));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn it_writes_what_format_writes(n in any::<u64>(), prefix in "[a-z.]{0,4}") {
            let mut text = prefix.clone();
            super::push(&mut text, n);
            prop_assert_eq!(text, format!("{prefix}{n}"));
        }
    }

    #[test]
    fn the_ends_of_the_range() {
        for n in [0, 9, 10, 99_999_999, u64::MAX] {
            let mut text = String::new();
            super::push(&mut text, n);
            assert_eq!(text, n.to_string());
        }
    }
}
