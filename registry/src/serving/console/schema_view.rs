//! A JSON Schema drawn for people: each property with its type, whether it
//! is required, its allowed values and description, nested objects and
//! array items indented under their property. `$ref`s are named, not
//! followed (a loop draws once); past [`MAX_DEPTH`] levels or
//! [`MAX_ROWS`] properties the rest is left to the raw schema shown below
//! the table.

use maud::{Markup, html};
use serde_json::Value;

/// Deepest nesting drawn.
const MAX_DEPTH: usize = 6;
/// Most properties drawn in all.
const MAX_ROWS: usize = 300;
/// Longest raw schema shown, in bytes.
const MAX_RAW: usize = 64 * 1024;

/// One property, flattened for the table.
struct Row {
    depth: usize,
    name: String,
    kind: String,
    required: bool,
    allowed: Vec<String>,
    description: String,
}

/// `schema_json` as a table of its properties, then the raw schema.
pub(crate) fn render(schema_json: &str) -> Markup {
    let parsed: Option<Value> = serde_json::from_str(schema_json).ok();
    let mut rows = Vec::new();
    let mut cut = false;
    if let Some(schema) = &parsed {
        properties(schema, 0, &mut rows, &mut cut);
    }
    let raw = match &parsed {
        Some(value) => serde_json::to_string_pretty(value).unwrap_or_default(),
        None => schema_json.to_owned(),
    };
    let (raw, raw_cut) = clip(&raw, MAX_RAW);
    html! {
        @if parsed.is_none() {
            p.error { "This schema is not JSON; shown as announced." }
        } @else if rows.is_empty() {
            p.empty { "No named properties." }
        } @else {
            table.schema {
                thead { tr { th { "Property" } th { "Type" } th { "Required" } th { "Allowed" } th { "Description" } } }
                tbody {
                    @for row in &rows {
                        tr {
                            td class=(format!("depth-{}", row.depth.min(MAX_DEPTH))) { code { (row.name) } }
                            td { (row.kind) }
                            td { (if row.required { "yes" } else { "" }) }
                            td { (row.allowed.join(", ")) }
                            td { (row.description) }
                        }
                    }
                }
            }
            @if cut { p.note { "Deeper or further properties are in the schema below." } }
        }
        details.raw {
            summary { "Schema (JSON)" }
            pre { code { (raw) } }
            @if raw_cut { p.note { "Cut at " (MAX_RAW / 1024) " KB." } }
        }
    }
}

fn properties(schema: &Value, depth: usize, rows: &mut Vec<Row>, cut: &mut bool) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        if rows.len() >= MAX_ROWS || depth >= MAX_DEPTH {
            *cut = true;
            return;
        }
        rows.push(Row {
            depth,
            name: name.clone(),
            kind: kind(property),
            required: required.contains(&name.as_str()),
            allowed: allowed(property),
            description: property
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        });
        properties_of(property, depth + 1, rows, cut);
    }
}

/// The properties nested in `property`: its own, or its array items'.
fn properties_of(property: &Value, depth: usize, rows: &mut Vec<Row>, cut: &mut bool) {
    if property.get("properties").is_some() {
        properties(property, depth, rows, cut);
    } else if let Some(items) = property.get("items") {
        properties(items, depth, rows, cut);
    }
}

fn kind(property: &Value) -> String {
    if let Some(reference) = property.get("$ref").and_then(Value::as_str) {
        return format!("see {reference}");
    }
    let base = match property.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ if property.get("anyOf").is_some() || property.get("oneOf").is_some() => {
            "one of several".to_owned()
        }
        _ => "any".to_owned(),
    };
    match property.get("items").map(kind) {
        Some(items) if base == "array" => format!("array of {items}"),
        _ => base,
    }
}

fn allowed(property: &Value) -> Vec<String> {
    if let Some(values) = property.get("enum").and_then(Value::as_array) {
        return values.iter().take(50).map(Value::to_string).collect();
    }
    if let Some(value) = property.get("const") {
        return vec![value.to_string()];
    }
    let mut bounds = Vec::new();
    for (key, label) in [
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("pattern", "matches"),
        ("format", "format"),
    ] {
        if let Some(value) = property.get(key) {
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            bounds.push(format!("{label} {value}"));
        }
    }
    bounds
}

fn clip(text: &str, bytes: usize) -> (&str, bool) {
    if text.len() <= bytes {
        return (text, false);
    }
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_show_type_required_allowed_and_description() {
        let page = render(
            r#"{"type":"object","required":["city"],"properties":{
                "city":{"type":"string","description":"City <b>name</b>"},
                "unit":{"type":"string","enum":["c","f"]},
                "days":{"type":"integer","minimum":1,"maximum":7},
                "stops":{"type":"array","items":{"type":"object","properties":{"at":{"type":"string"}}}}}}"#,
        )
        .into_string();
        assert!(
            page.contains("<code>city</code>") && page.contains(">yes<"),
            "{page}"
        );
        assert!(
            page.contains("City &lt;b&gt;name&lt;/b&gt;"),
            "escaped: {page}"
        );
        assert!(page.contains("\"c\", \"f\"") || page.contains("&quot;c&quot;, &quot;f&quot;"));
        assert!(page.contains("≥ 1, ≤ 7"));
        assert!(page.contains("array of object"));
        assert!(page.contains("depth-1"), "items' properties nested");
    }

    #[test]
    fn a_reference_loop_or_a_huge_schema_draws_bounded() {
        let looped = r##"{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},
            "type":"object","properties":{"head":{"$ref":"#/$defs/n"}}}"##;
        let page = render(looped).into_string();
        assert!(page.contains("see #/$defs/n"));
        let mut deep = String::from(r#"{"type":"string"}"#);
        for _ in 0..50 {
            deep = format!(r#"{{"type":"object","properties":{{"x":{deep}}}}}"#);
        }
        let page = render(&deep).into_string();
        assert!(page.contains("Deeper or further properties"));
        let wide: String = (0..1000)
            .map(|i| {
                format!(
                    r#""p{i}":{{"type":"string","description":"{}"}}"#,
                    "d".repeat(200)
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let page = render(&format!(r#"{{"type":"object","properties":{{{wide}}}}}"#)).into_string();
        assert!(page.matches("<tr>").count() <= MAX_ROWS + 1);
        assert!(page.contains("Cut at 64 KB"));
    }

    #[test]
    fn a_schema_that_is_not_json_is_shown_as_text() {
        let page = render("<not json>").into_string();
        assert!(page.contains("not JSON") && page.contains("&lt;not json&gt;"));
    }
}
