//! `check CONFIG`: a sidecar YAML checked offline, with the very code the
//! sidecar runs at start (every key, every schema compiled as the registry
//! compiles it, every backend well formed, every command's program present).

use serde_json::json;
use toolmesh_sidecar::config::SidecarConfig;

use crate::failure::{Exit, Failure};
use crate::output::Output;

/// Checks the file at `path`.
pub(crate) fn check(path: &std::path::Path, output: Output) -> Result<(), Failure> {
    match SidecarConfig::load(path) {
        Ok(config) => {
            let names: Vec<&str> = config.tools.iter().map(|t| t.name.as_str()).collect();
            match output {
                Output::Json => println!(
                    "{}",
                    json!({"ok": true, "file": path.display().to_string(), "tools": names})
                ),
                Output::Text => println!(
                    "ok: {}: {} tool{} ({})",
                    path.display(),
                    names.len(),
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ),
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
