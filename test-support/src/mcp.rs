//! The unmodified third-party MCP peers the interop tests run, installed
//! by `scripts/test.sh`: `@modelcontextprotocol/server-everything` from
//! npm (`scripts/mcp/package.json`) and the official Python `mcp` SDK
//! from PyPI (`scripts/requirements.txt`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::suite;

/// Overrides where `mcp-server-everything` is.
pub const EVERYTHING_ENV: &str = "TOOLMESH_MCP_EVERYTHING";

/// The `mcp-server-everything` launcher (a Node script), or `None` after
/// [`suite::skip`] when it or `node` is missing.
pub fn everything_server() -> Option<PathBuf> {
    let path = std::env::var_os(EVERYTHING_ENV).map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../scripts/mcp/node_modules/.bin/mcp-server-everything")
        },
        PathBuf::from,
    );
    let found = if !path.exists() {
        Err(format!("{} does not exist", path.display()))
    } else if !runs("node", &["--version"]) {
        Err("node is not on PATH".to_owned())
    } else {
        Ok(path)
    };
    suite::require(
        "@modelcontextprotocol/server-everything",
        found.map_err(|why| format!("{why}; run npm ci in scripts/mcp")),
    )
}

/// A Python interpreter (`$PYTHON`, default `python3`) that imports the
/// official `mcp` SDK, or `None` after [`suite::skip`].
pub fn python_with_sdk() -> Option<String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let found = if runs(&python, &["-c", "import mcp.client.streamable_http"]) {
        Ok(python)
    } else {
        Err(format!(
            "{python} cannot import mcp; run {python} -m pip install -r scripts/requirements.txt"
        ))
    };
    suite::require("the Python mcp SDK", found)
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
