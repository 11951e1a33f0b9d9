//! An approval rule's condition on a call's arguments: a JSON Pointer, a
//! comparison and a JSON value, e.g. `/amount > 100`, `/env == "prod"`,
//! `/force == true`.
//!
//! `==` and `!=` compare JSON values (numbers by value: `100 == 100.0`); a
//! missing value equals nothing. `>`, `>=`, `<` and `<=` compare numbers,
//! and fail closed: a value that is missing or not a number holds the call
//! for approval, since a call the rule cannot read is not one it cleared.

use std::fmt;

use serde_json::Value;

/// How a condition compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Op {
    /// Longest first, so that `>=` is not read as `>`.
    const ALL: [(&'static str, Self); 6] = [
        ("==", Self::Eq),
        ("!=", Self::Ne),
        (">=", Self::Ge),
        ("<=", Self::Le),
        (">", Self::Gt),
        ("<", Self::Lt),
    ];

    fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, op)| *op == self)
            .map_or("?", |(text, _)| text)
    }
}

/// One condition of a rule's `when`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pointer: String,
    op: Op,
    value: Value,
}

/// Longest condition accepted, in bytes.
const MAX_LEN: usize = 1024;

impl Condition {
    /// Parses `<pointer> <op> <value>`: the pointer starts with `/` (or is
    /// empty, the whole arguments); the value is JSON (a bare word is a
    /// string); an ordering compares with a number only.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_LEN {
            return Err(format!("longer than {MAX_LEN} bytes"));
        }
        let text = text.trim();
        let Some((at, op, len)) = Op::ALL
            .iter()
            .filter_map(|(symbol, op)| text.find(symbol).map(|at| (at, *op, symbol.len())))
            .min_by_key(|(at, _, len)| (*at, usize::MAX - len))
        else {
            return Err(format!(
                "{text:?} has no comparison: write `<JSON pointer> <op> <value>` with one of == != > >= < <="
            ));
        };
        let pointer = text[..at].trim();
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err(format!(
                "{pointer:?} is not a JSON pointer: it starts with `/`, e.g. `/amount`"
            ));
        }
        let raw = text[at + len..].trim();
        if raw.is_empty() {
            return Err(format!("{text:?} has no value after `{}`", op.as_str()));
        }
        let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()));
        if !matches!(op, Op::Eq | Op::Ne) && !value.is_number() {
            return Err(format!(
                "`{}` compares numbers, and {raw} is not one",
                op.as_str()
            ));
        }
        Ok(Self {
            pointer: pointer.to_owned(),
            op,
            value,
        })
    }

    /// Whether `arguments` meet the condition.
    pub fn holds(&self, arguments: &Value) -> bool {
        let found = arguments.pointer(&self.pointer);
        match self.op {
            Op::Eq => found.is_some_and(|v| same(v, &self.value)),
            Op::Ne => !found.is_some_and(|v| same(v, &self.value)),
            ordering => {
                let (Some(found), Some(bound)) =
                    (found.and_then(Value::as_f64), self.value.as_f64())
                else {
                    return true;
                };
                match ordering {
                    Op::Gt => found > bound,
                    Op::Ge => found >= bound,
                    Op::Lt => found < bound,
                    _ => found <= bound,
                }
            }
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.pointer, self.op.as_str(), self.value)
    }
}

/// JSON equality, numbers by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn holds(condition: &str, arguments: Value) -> bool {
        Condition::parse(condition)
            .expect("a valid condition")
            .holds(&arguments)
    }

    #[test]
    fn bounds_compare_numbers() {
        assert!(holds("/amount > 100", json!({"amount": 150})));
        assert!(!holds("/amount > 100", json!({"amount": 100})));
        assert!(holds("/amount >= 100", json!({"amount": 100.0})));
        assert!(holds("/amount<=5", json!({"amount": -1})));
        assert!(!holds("/amount < 5", json!({"amount": 5})));
        assert!(holds(
            "/order/lines/0/qty > 9",
            json!({"order": {"lines": [{"qty": 10}]}})
        ));
    }

    #[test]
    fn a_bound_the_call_cannot_be_read_against_holds_it() {
        assert!(holds("/amount > 100", json!({})), "missing");
        assert!(
            holds("/amount > 100", json!({"amount": "5"})),
            "not a number"
        );
    }

    #[test]
    fn equality_compares_json_values() {
        assert!(holds("/env == \"prod\"", json!({"env": "prod"})));
        assert!(holds("/env == prod", json!({"env": "prod"})), "a bare word");
        assert!(!holds("/env == prod", json!({"env": "dev"})));
        assert!(holds("/force == true", json!({"force": true})));
        assert!(!holds("/force == true", json!({"force": "true"})));
        assert!(holds("/n == 100", json!({"n": 100.0})));
        assert!(!holds("/env == prod", json!({})), "missing equals nothing");
        assert!(holds("/env != prod", json!({})));
        assert!(holds("/a~1b == 1", json!({"a/b": 1})), "escaped pointer");
    }

    #[test]
    fn bad_conditions_say_what_is_wrong() {
        for (bad, says) in [
            ("amount > 100", "not a JSON pointer"),
            ("/amount 100", "no comparison"),
            ("/amount >", "no value"),
            ("/env > prod", "compares numbers"),
        ] {
            let error = Condition::parse(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
        assert!(Condition::parse(&format!("/a == {}", "x".repeat(MAX_LEN))).is_err());
    }

    #[test]
    fn it_reads_back_as_written() {
        let condition = Condition::parse("/amount >= 100").expect("valid");
        assert_eq!(condition.to_string(), "/amount >= 100");
    }

    proptest! {
        #[test]
        fn no_text_panics(text in ".{0,200}", amount in proptest::num::f64::ANY) {
            if let Ok(condition) = Condition::parse(&text) {
                let _ = condition.holds(&json!({"amount": amount}));
            }
        }
    }
}
