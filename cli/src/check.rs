//! `check CONFIG`: a sidecar YAML checked offline, with the very code the
//! sidecar runs at start (every key, every schema compiled as the registry
//! compiles it, every backend well formed, every command's program present).

use serde_json::json;
use toolmesh_sidecar::config::SidecarConfig;

use crate::failure::{Exit, Failure};
use crate::output::{Output, print};

/// Checks the file at `path`.
pub(crate) fn check(path: &std::path::Path, output: Output) -> Result<(), Failure> {
    match SidecarConfig::load(path) {
        Ok(config) => {
            let names: Vec<&str> = config
                .tools
                .iter()
                .filter_map(|t| t.name.as_deref())
                .collect();
            let servers: Vec<String> = config
                .tools
                .iter()
                .filter_map(|t| t.backend.mcp.as_ref())
                .map(|mcp| match (&mcp.command, &mcp.url) {
                    (Some(command), _) => command.join(" "),
                    (None, url) => url.clone().unwrap_or_default(),
                })
                .collect();
            match output {
                Output::Json => print(
                    json!({"ok": true, "file": path.display().to_string(), "tools": names, "mcp_servers": servers}),
                )?,
                Output::Text => {
                    print(format_args!(
                        "ok: {}: {} tool{} ({})",
                        path.display(),
                        names.len(),
                        if names.len() == 1 { "" } else { "s" },
                        names.join(", ")
                    ))?;
                    for server in &servers {
                        print(format_args!(
                            "  and the tools of the MCP server {server} (listed when the sidecar runs)"
                        ))?;
                    }
                }
            }
            Ok(())
        }
        Err(error) => {
            let message = error.to_string();
            Err(Failure {
                exit: Exit::Invalid,
                json: json!({"ok": false, "file": path.display().to_string(), "error": {"message": message}}),
                message,
                details: Vec::new(),
            })
        }
    }
}
