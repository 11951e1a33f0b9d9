//! Decimal and hex digits written on hot paths without `format!`'s
//! machinery, and a whole run of ASCII at a time rather than a `char` at a
//! time: a grant's issue time and nonce, a `grpc-timeout`'s count, the call
//! line's latency (`toolmesh_telemetry`), a catalog digest.

/// `n` in decimal, written on the stack: as `n.to_string()`, without the
/// formatter or an allocation.
#[derive(Debug, Clone, Copy)]
pub struct Digits {
    text: [u8; 20],
    start: usize,
}

impl Digits {
    /// The digits of `n`.
    pub fn of(mut n: u64) -> Self {
        let mut text = [b'0'; 20];
        let mut start = text.len();
        loop {
            start -= 1;
            text[start] = b'0' + u8::try_from(n % 10).unwrap_or(0);
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Self { text, start }
    }
}

impl std::ops::Deref for Digits {
    type Target = str;

    fn deref(&self) -> &str {
        std::str::from_utf8(&self.text[self.start..]).unwrap_or_default()
    }
}

/// Appends `n` in decimal, as `write!(text, "{n}")` would.
pub(crate) fn push(text: &mut String, n: u64) {
    text.push_str(&Digits::of(n));
}

/// Appends `bytes` in lowercase hex, two digits a byte, as
/// `write!(text, "{byte:02x}")` for each would.
pub fn push_hex(text: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    text.reserve(bytes.len() * 2);
    let mut run = [0u8; 64];
    for chunk in bytes.chunks(run.len() / 2) {
        for (byte, pair) in chunk.iter().zip(run.chunks_exact_mut(2)) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0xf)];
        }
        text.push_str(std::str::from_utf8(&run[..chunk.len() * 2]).unwrap_or_default());
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

    proptest! {
        #[test]
        fn hex_is_what_format_writes(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut text = String::new();
            super::push_hex(&mut text, &bytes);
            let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(text, formatted);
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
