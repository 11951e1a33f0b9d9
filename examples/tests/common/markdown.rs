//! The fenced code blocks of the repository's Markdown, for the tests that
//! run them: each with its language, where it starts, and the HTML comment
//! on the line above its fence, which says how it is tested.
#![allow(dead_code, unreachable_pub)]

/// One fenced block.
#[derive(Debug, Clone)]
pub struct Block {
    /// The word after the opening fence (`sh`, `python`, ...), or empty.
    pub language: String,
    /// The lines between the fences, each ending in `\n`.
    pub body: String,
    /// The opening fence's line number, from 1.
    pub line: usize,
    /// The text of a `<!-- ... -->` comment on the line above the fence.
    pub marker: Option<String>,
}

/// Every fenced block of `text`, in order; an unclosed one runs to the end.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut lines = text.lines().enumerate();
    let mut above = "";
    while let Some((n, line)) = lines.next() {
        let Some(language) = line.strip_prefix("```") else {
            above = line;
            continue;
        };
        let mut body = String::new();
        for (_, inner) in lines.by_ref() {
            if inner.starts_with("```") {
                break;
            }
            body.push_str(inner);
            body.push('\n');
        }
        let marker = above
            .trim()
            .strip_prefix("<!--")
            .and_then(|m| m.strip_suffix("-->"))
            .map(|m| m.trim().to_owned());
        found.push(Block {
            language: language.trim().to_owned(),
            body,
            line: n + 1,
            marker,
        });
        above = "";
    }
    found
}

/// The bodies of `text`'s blocks in `language`.
pub fn bodies(text: &str, language: &str) -> Vec<String> {
    blocks(text)
        .into_iter()
        .filter(|block| block.language == language)
        .map(|block| block.body)
        .collect()
}
