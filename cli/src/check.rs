//! `check CONFIG`: a sidecar YAML checked offline, with the very code the
//! sidecar runs at start (every key, every schema compiled as the registry
//! compiles it, every backend well formed, every command's program present).
//! What is legal but probably a typo (a schema key one edit from a
//! keyword: `propertes`) is a warning, as the sidecar logs it at start:
//! the config still passes.

use std::path::Path;

use serde_json::json;
use toolmesh_sidecar::config::SidecarConfig;

use crate::failure::{Exit, Failure};
use crate::output::{Output, print};

/// What a config that passes holds, and what it should look at again.
#[derive(Debug)]
struct Checked {
    /// The tools it names.
    tools: Vec<String>,
    /// Its MCP servers: a command line or a URL.
    servers: Vec<String>,
    /// Each warning, with the file, line and column.
    warnings: Vec<String>,
}

/// Checks the file at `path`.
pub(crate) fn check(path: &Path, output: Output) -> Result<(), Failure> {
    let Checked {
        tools,
        servers,
        warnings,
    } = checked(path)?;
    match output {
        Output::Json => print(
            json!({"ok": true, "file": path.display().to_string(), "tools": tools, "mcp_servers": servers, "warnings": warnings}),
        )?,
        Output::Text => {
            for warning in &warnings {
                eprintln!("warning: {warning}");
            }
            print(format_args!(
                "ok: {}: {} tool{} ({})",
                path.display(),
                tools.len(),
                if tools.len() == 1 { "" } else { "s" },
                tools.join(", ")
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

fn checked(path: &Path) -> Result<Checked, Failure> {
    let config = SidecarConfig::load(path).map_err(|error| {
        let message = error.to_string();
        Failure {
            exit: Exit::Invalid,
            json: json!({"ok": false, "file": path.display().to_string(), "error": {"message": message}}),
            message,
            details: Vec::new(),
        }
    })?;
    Ok(Checked {
        tools: config.tools.iter().filter_map(|t| t.name.clone()).collect(),
        servers: config
            .tools
            .iter()
            .filter_map(|t| t.backend.mcp.as_ref())
            .map(|mcp| match (&mcp.command, &mcp.url) {
                (Some(command), _) => command.join(" "),
                (None, url) => url.clone().unwrap_or_default(),
            })
            .collect(),
        warnings: config
            .warnings(path)
            .iter()
            .map(ToString::to_string)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn checked_yaml(yaml: &str) -> Result<Checked, Failure> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tools.yaml");
        std::fs::write(&path, yaml).unwrap();
        checked(&path)
    }

    #[test]
    fn a_misspelt_schema_keyword_passes_with_a_warning_naming_the_keyword_meant() {
        let checked = checked_yaml(
            "tools:\n  - name: forecast\n    description: Weather\n    input_schema:\n      type: object\n      propertes: {city: {type: string}}\n    backend: {command: [cat]}\n",
        )
        .unwrap();
        assert_eq!(checked.tools, ["forecast"]);
        assert_eq!(checked.warnings.len(), 1, "{:?}", checked.warnings);
        let warning = &checked.warnings[0];
        assert!(
            warning.contains("tools.yaml:6:18: tools[0].input_schema.propertes: not a JSON Schema keyword, did you mean properties?"),
            "{warning}"
        );
    }

    #[test]
    fn a_correct_schema_has_no_warning_and_a_broken_config_still_fails() {
        let checked = checked_yaml(
            "tools:\n  - name: forecast\n    description: Weather\n    input_schema: {type: object, properties: {city: {type: string}}, required: [city]}\n    arguments_unused: 1\n    backend: {command: [cat]}\n",
        );
        let failure = checked.unwrap_err();
        assert_eq!(failure.exit, Exit::Invalid);
        let checked = checked_yaml(
            "tools:\n  - name: forecast\n    description: Weather\n    input_schema: {type: object, properties: {city: {type: string}}, required: [city]}\n    backend: {command: [cat]}\n",
        )
        .unwrap();
        assert!(checked.warnings.is_empty(), "{:?}", checked.warnings);
    }
}
