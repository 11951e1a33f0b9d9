//! What each key of the config accepts, in the user's words, with an
//! example: the second half of every "found X, expected Y" message.

use super::key::{KeyPath, Segment};

/// What a duration key accepts.
pub(crate) const DURATION: &str = "a duration above 0 with a unit, e.g. 2s or 500ms";

/// Key patterns (list positions written `[]`, any key of a free-form
/// mapping written `*`) and what they accept.
const ALLOWED: &[(&str, &str)] = &[
    (
        "registry",
        "a registry address, e.g. 127.0.0.1:50051 or http://127.0.0.1:50051",
    ),
    (
        "listen",
        "an IP address and port to listen on, e.g. 127.0.0.1:50061 or 0.0.0.0:50061",
    ),
    (
        "advertise",
        "the address the registry dials to reach this sidecar, e.g. 10.0.0.7:50061 or http://10.0.0.7:50061",
    ),
    ("instance_id", "a text that names this instance, e.g. pod-1"),
    (
        "tools",
        "a list of tools, each item starting with a dash, e.g. - name: word_count",
    ),
    (
        "tools[]",
        "a tool: a mapping with name, description and backend",
    ),
    (
        "tools[].name",
        "a tool name of 1 to 64 letters, digits, _, - or ., e.g. word_count",
    ),
    (
        "tools[].description",
        "a text that tells the LLM what the tool does",
    ),
    (
        "tools[].arguments",
        "a list of arguments, e.g. [{name: text, type: string, required: true}]",
    ),
    (
        "tools[].arguments[]",
        "an argument, e.g. {name: text, type: string, required: true}",
    ),
    ("tools[].arguments[].name", "the argument's name, e.g. text"),
    (
        "tools[].arguments[].type",
        "one of string, integer, number, boolean, array, object",
    ),
    (
        "tools[].arguments[].description",
        "a text that tells the LLM what the argument means",
    ),
    ("tools[].arguments[].required", "true or false"),
    (
        "tools[].arguments[].enum",
        "a list of the allowed values, e.g. [fast, exact]",
    ),
    (
        "tools[].arguments[].items",
        "the type of the items, e.g. string, or a JSON Schema",
    ),
    (
        "tools[].input_schema",
        "a JSON Schema written as a mapping, e.g. {type: object, properties: {key: {type: string}}}",
    ),
    (
        "tools[].output_schema",
        "a JSON Schema written as a mapping, e.g. {type: object}",
    ),
    ("tools[].version", "a text, e.g. \"1.2.0\""),
    ("tools[].tags", "a list of labels, e.g. [math, read-only]"),
    ("tools[].tags[]", "a label, e.g. math"),
    (
        "tools[].rate_limit",
        "a mapping with rate and burst, e.g. {rate: 5, burst: 10}",
    ),
    (
        "tools[].rate_limit.rate",
        "a number of calls per second above 0, e.g. 5 or 0.5",
    ),
    (
        "tools[].rate_limit.burst",
        "a whole number of calls at once, e.g. 10",
    ),
    (
        "tools[].per_caller_rate_limit",
        "a mapping with rate and burst for each caller, e.g. {rate: 1, burst: 5}",
    ),
    (
        "tools[].per_caller_rate_limit.rate",
        "a number of calls per second of each caller above 0, e.g. 1 or 0.5",
    ),
    (
        "tools[].per_caller_rate_limit.burst",
        "a whole number of calls of each caller at once, e.g. 5",
    ),
    ("tools[].timeout", DURATION),
    ("tools[].task_timeout", DURATION),
    ("tools[].idempotent", "true or false"),
    (
        "tools[].title",
        "a short name for people, on one line, e.g. Word count",
    ),
    ("tools[].read_only", "true or false"),
    ("tools[].destructive", "true or false"),
    ("tools[].open_world", "true or false"),
    (
        "tools[].config",
        "a mapping of settings for the backend, keys of letters, digits and _, e.g. {style: pun, max_words: 50}",
    ),
    ("tools[].config.*", "any YAML value, e.g. pun"),
    ("tools[].audit_arguments", "true or false"),
    (
        "tools[].max_output_bytes",
        "a whole number of bytes above 0, e.g. 1048576",
    ),
    (
        "tools[].backend",
        "a mapping with one of http, command or mcp, e.g. {command: [./tool.py]}, {http: {url: http://127.0.0.1:8080/lookup}} or {mcp: {command: [mcp-server-everything]}}",
    ),
    (
        "tools[].backend.http",
        "a mapping with url and optional headers, e.g. {url: http://127.0.0.1:8080/lookup}",
    ),
    (
        "tools[].backend.http.url",
        "an http:// or https:// URL, e.g. http://127.0.0.1:8080/lookup",
    ),
    (
        "tools[].backend.http.headers",
        "a mapping of header names to values, e.g. {Authorization: Bearer abc}",
    ),
    (
        "tools[].backend.http.headers.*",
        "a header value, e.g. Bearer abc",
    ),
    (
        "tools[].backend.command",
        "a list: the program, then its arguments, e.g. [python3, word_count.py]",
    ),
    ("tools[].backend.command[]", "a text, e.g. --verbose"),
    (
        "tools[].backend.env",
        "a mapping of variable names to values, e.g. {MODE: fast}",
    ),
    ("tools[].backend.env.*", "a text, e.g. fast"),
    (
        "tools[].backend.cwd",
        "a folder, relative to the config file's folder, e.g. work",
    ),
    (
        "tools[].backend.mcp",
        "an MCP server: a mapping with one of command or url, e.g. {command: [mcp-server-everything]} or {url: http://127.0.0.1:8000/mcp}",
    ),
    (
        "tools[].backend.mcp.command",
        "a list: the server's program, then its arguments, e.g. [npx, -y, some-mcp-server]",
    ),
    ("tools[].backend.mcp.command[]", "a text, e.g. --verbose"),
    (
        "tools[].backend.mcp.env",
        "a mapping of variable names to values, e.g. {API_KEY: abc}",
    ),
    ("tools[].backend.mcp.env.*", "a text, e.g. abc"),
    (
        "tools[].backend.mcp.env_pass",
        "a list of names of the sidecar's environment variables the server gets, e.g. [GITHUB_TOKEN]",
    ),
    (
        "tools[].backend.mcp.env_pass[]",
        "a variable name: letters, digits and _, not starting with a digit, e.g. GITHUB_TOKEN",
    ),
    (
        "tools[].backend.mcp.cwd",
        "a folder, relative to the config file's folder, e.g. work",
    ),
    (
        "tools[].backend.mcp.url",
        "the server's streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp",
    ),
    (
        "tools[].backend.mcp.headers",
        "a mapping of header names to values, e.g. {Authorization: Bearer abc}",
    ),
    (
        "tools[].backend.mcp.headers.*",
        "a header value, e.g. Bearer abc",
    ),
    (
        "tools[].backend.mcp.prefix",
        "a text put before each tool's name, e.g. everything.",
    ),
    (
        "tools[].backend.mcp.allow",
        "a list of tool-name patterns, * matching any run of characters, e.g. [echo, get-*]",
    ),
    (
        "tools[].backend.mcp.allow[]",
        "a tool-name pattern, e.g. get-*",
    ),
    (
        "tools[].backend.mcp.deny",
        "a list of tool-name patterns, * matching any run of characters, e.g. [delete-*]",
    ),
    (
        "tools[].backend.mcp.deny[]",
        "a tool-name pattern, e.g. delete-*",
    ),
    ("tools[].backend.mcp.relist_interval", DURATION),
];

/// What the key at `path` accepts, with an example; `None` for a key the
/// config does not have.
pub(crate) fn allowed(path: &KeyPath) -> Option<&'static str> {
    let exact = path.pattern();
    let any_key = match path.split_last() {
        Some((parent, Segment::Key(_))) => Some(format!("{}.*", parent.pattern())),
        _ => None,
    };
    ALLOWED
        .iter()
        .find(|(pattern, _)| *pattern == exact || Some(*pattern) == any_key.as_deref())
        .map(|(_, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_any_tool_and_free_form_maps_are_found() {
        let rate = KeyPath::root()
            .key("tools")
            .index(3)
            .key("rate_limit")
            .key("rate");
        assert_eq!(
            allowed(&rate),
            Some("a number of calls per second above 0, e.g. 5 or 0.5")
        );
        let header = KeyPath::root()
            .key("tools")
            .index(0)
            .key("backend")
            .key("env")
            .key("MODE");
        assert_eq!(allowed(&header), Some("a text, e.g. fast"));
        assert_eq!(allowed(&KeyPath::root().key("nothing")), None);
    }

    #[test]
    fn no_text_holds_a_backtick() {
        // The texts go into docs/troubleshooting.md's table as code spans.
        for (pattern, text) in ALLOWED {
            assert!(!text.contains('`') && !text.contains('|'), "{pattern}");
        }
    }
}
