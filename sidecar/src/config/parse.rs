//! Serde's errors from reading the YAML, rewritten in the user's words: the
//! key path, what was found, what the key accepts; a typo gets the key it
//! was probably meant to be.

use super::allowed::allowed;
use super::key::{KeyPath, Segment};
use super::problem::{Position, Problem};

/// The problem a failed deserialization reports.
pub(super) fn problem(error: serde_path_to_error::Error<serde_yaml_ng::Error>) -> Problem {
    let path = key_path(error.path());
    let error = error.into_inner();
    let position = error.location().map(|l| Position {
        line: l.line(),
        column: l.column(),
    });
    let mut text = error.to_string();
    if let Some(Position { line, column }) = position {
        text = text.replace(&format!(" at line {line} column {column}"), "");
    }
    let mut problem = rewrite(&path, strip_path(&text, &path));
    problem.position = position;
    problem
}

fn key_path(path: &serde_path_to_error::Path) -> KeyPath {
    path.iter()
        .fold(KeyPath::root(), |key, segment| match segment {
            serde_path_to_error::Segment::Seq { index } => key.index(*index),
            serde_path_to_error::Segment::Map { key: name } => key.key(name.clone()),
            serde_path_to_error::Segment::Enum { variant } => key.key(variant.clone()),
            serde_path_to_error::Segment::Unknown => key.key("?"),
        })
}

/// `text` without the `KEY: ` serde_yaml_ng puts before it (the key, or
/// one above it).
fn strip_path<'a>(text: &'a str, path: &KeyPath) -> &'a str {
    path.ancestors()
        .find_map(|key| text.strip_prefix(&format!("{key}: ")))
        .unwrap_or(text)
}

fn rewrite(path: &KeyPath, text: &str) -> Problem {
    if let Some(rest) = text.strip_prefix("unknown field `") {
        let names = backticked(rest);
        let Some((given, allowed_keys)) = names.split_first() else {
            return Problem::new(path.clone(), "unknown key");
        };
        let key = match path.split_last() {
            Some((_, Segment::Key(last))) if last == given => path.clone(),
            _ => path.key(*given),
        };
        let hint = closest(given, allowed_keys)
            .map(|name| format!(", did you mean {name}?"))
            .unwrap_or_default();
        let list = if allowed_keys.is_empty() {
            "none".to_owned()
        } else {
            allowed_keys.join(", ")
        };
        return Problem::new(key, format!("unknown key{hint} (allowed here: {list})"));
    }
    if let Some(rest) = text.strip_prefix("missing field `") {
        let name = rest.trim_end_matches('`');
        let key = path.key(name);
        let expected = allowed(&key).unwrap_or("a value");
        return Problem::new(key, format!("missing, expected {expected}"));
    }
    if let Some(rest) = text.strip_prefix("duplicate field `") {
        let name = rest.trim_end_matches('`');
        return Problem::new(path.key(name), "given twice; keep one");
    }
    for head in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = text.strip_prefix(head)
            && let Some((unexpected, expected)) = rest.rsplit_once(", expected ")
        {
            let expected = allowed(path).map_or_else(|| plain(expected), str::to_owned);
            return Problem::new(
                path.clone(),
                format!("found {}, expected {expected}", found(unexpected)),
            );
        }
    }
    if let Some(rest) = text.strip_prefix("invalid length ")
        && let Some((length, expected)) = rest.split_once(", expected ")
    {
        return Problem::new(
            path.clone(),
            format!("found {length} items, expected {}", plain(expected)),
        );
    }
    if text.starts_with("found ") {
        // Ours (e.g. a duration without a unit): already in these words.
        return Problem::new(path.clone(), text);
    }
    Problem::new(KeyPath::root(), format!("not valid YAML: {text}"))
}

/// The names in `NAME`, expected one of `A`, `B`: every other piece
/// between backticks, from the first.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`')
        .step_by(2)
        .filter(|name| !name.is_empty())
        .collect()
}

/// Serde's description of a value found (`string "x"`, `integer `5``)
/// as the YAML showed it.
fn found(unexpected: &str) -> String {
    if let Some(text) = unexpected.strip_prefix("string ") {
        return text.to_owned();
    }
    for head in ["integer `", "floating point `", "boolean `", "character `"] {
        if let Some(value) = unexpected.strip_prefix(head) {
            return value.trim_end_matches('`').to_owned();
        }
    }
    match unexpected {
        "map" => "a mapping".to_owned(),
        "sequence" => "a list".to_owned(),
        "unit value" | "Option value" => "nothing".to_owned(),
        other => other.to_owned(),
    }
}

/// Serde's name of an expected type in plain words.
fn plain(expected: &str) -> String {
    match expected {
        "f32" | "f64" => "a number".to_owned(),
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number of 0 or more".to_owned(),
        "a boolean" => "true or false".to_owned(),
        "a sequence" => "a list".to_owned(),
        "a string" => "a text".to_owned(),
        "a map" => "a mapping".to_owned(),
        other if other.starts_with("struct ") => "a mapping".to_owned(),
        other => other.to_owned(),
    }
}

/// The name in `names` that `given` was most likely meant to be: the same
/// but for case, `_` and `-`, or at most a third of its letters away.
pub(super) fn closest<'a>(given: &str, names: &[&'a str]) -> Option<&'a str> {
    let fold = |s: &str| s.to_lowercase().replace(['_', '-'], "");
    if let Some(same) = names.iter().find(|name| fold(name) == fold(given)) {
        return Some(same);
    }
    let limit = (given.chars().count() / 3).max(1);
    names
        .iter()
        .map(|name| (edit_distance(given, name), *name))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// Levenshtein distance, with a swap of two neighbours counting once.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_the_key_meant() {
        let top = ["registry", "listen", "advertise", "instance_id", "tools"];
        assert_eq!(closest("regsitry", &top), Some("registry"));
        assert_eq!(closest("registy", &top), Some("registry"));
        assert_eq!(closest("instanceId", &top), Some("instance_id"));
        assert_eq!(closest("tool", &top), Some("tools"));
        assert_eq!(closest("colour", &top), None);
        let tool = ["rate_limit", "timeout", "idempotent"];
        assert_eq!(closest("timout", &tool), Some("timeout"));
        assert_eq!(closest("rate-limit", &tool), Some("rate_limit"));
        assert_eq!(closest("ratelimit", &tool), Some("rate_limit"));
    }

    #[test]
    fn found_values_read_as_written() {
        assert_eq!(found("string \"fast\""), "\"fast\"");
        assert_eq!(found("integer `5`"), "5");
        assert_eq!(found("floating point `2.5`"), "2.5");
        assert_eq!(found("boolean `true`"), "true");
        assert_eq!(found("map"), "a mapping");
        assert_eq!(found("sequence"), "a list");
        assert_eq!(found("unit value"), "nothing");
    }
}
