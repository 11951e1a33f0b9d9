//! The checks of a config against this machine, at start: every command's
//! (and stdio MCP server's) program exists and may be run, every command's `cwd` is a folder. Paths
//! resolve as the command backend will run them: a program containing `/`
//! against the config file's folder, a bare name through `PATH`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use nix::unistd::{AccessFlags, access};

use super::key::KeyPath;
use super::problem::Problem;
use super::{McpConfig, SidecarConfig};

/// Where a program is looked up when `PATH` is unset (as `execvp` does).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Checks every command backend of `config`; `base_dir` is the config
/// file's folder, absolute.
pub(super) fn check_commands(config: &SidecarConfig, base_dir: &Path) -> Result<(), Problem> {
    for (index, tool) in config.tools.iter().enumerate() {
        let backend = &tool.backend;
        let at = KeyPath::root().key("tools").index(index).key("backend");
        let (command, env, cwd, at) = match (&backend.command, &backend.mcp) {
            (Some(command), _) => (command, backend.env.as_ref(), backend.cwd.as_deref(), at),
            (
                None,
                Some(McpConfig {
                    command: Some(command),
                    env,
                    cwd,
                    ..
                }),
            ) => (command, Some(env), cwd.as_deref(), at.key("mcp")),
            _ => continue,
        };
        let Some(program) = command.first() else {
            continue;
        };
        check_program(program, env, cwd, base_dir)
            .map_err(|message| Problem::new(at.key("command"), message))?;
        if let Some(cwd) = cwd {
            let dir = super::build::resolve(base_dir, cwd);
            if !dir.is_dir() {
                let what = if dir.exists() {
                    "is not a folder"
                } else {
                    "does not exist"
                };
                return Err(Problem::new(
                    at.key("cwd"),
                    format!(
                        "folder {} {what} (relative paths are resolved against the config file's folder)",
                        dir.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_program(
    program: &str,
    env: Option<&BTreeMap<String, String>>,
    cwd: Option<&Path>,
    base_dir: &Path,
) -> Result<(), String> {
    if program.contains('/') {
        let path = super::build::resolve(base_dir, Path::new(program));
        if !path.exists() {
            return Err(if Path::new(program).is_absolute() {
                format!("program {program:?} not found")
            } else {
                format!(
                    "program {program:?} not found in {} (relative paths are resolved against the config file's folder)",
                    base_dir.display()
                )
            });
        }
        return runnable(&path).map_err(|why| format!("program {program:?} {why}"));
    }
    let search = search_path(env);
    // A relative entry (empty is ".") is relative to the command's folder.
    let work_dir = base_dir.join(cwd.unwrap_or(Path::new("")));
    let mut not_runnable = None;
    for dir in std::env::split_paths(&search) {
        let candidate = work_dir.join(dir).join(program);
        if !candidate.exists() {
            continue;
        }
        match runnable(&candidate) {
            Ok(()) => return Ok(()),
            Err(why) => {
                not_runnable.get_or_insert((candidate, why));
            }
        }
    }
    Err(match not_runnable {
        Some((path, why)) => format!("program {program:?} in PATH ({}) {why}", path.display()),
        None => format!(
            "program {program:?} not found in PATH ({})",
            search.to_string_lossy()
        ),
    })
}

/// The `PATH` the command will be looked up in: the tool's `env` may set it.
fn search_path(env: Option<&BTreeMap<String, String>>) -> OsString {
    env.and_then(|env| env.get("PATH"))
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_else(|| DEFAULT_PATH.into())
}

/// `Ok` if `path` is a file this process may execute; else why not.
fn runnable(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err("is a folder, not a program".into());
    }
    access(path, AccessFlags::X_OK)
        .map_err(|_| format!("is not executable; run chmod +x {}", path.display()))
}
