//! The command backend: real child processes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;
use toolmesh_proto::deadline::Deadline;
use toolmesh_sidecar::CallContext;
use toolmesh_sidecar::config::SidecarConfig;
use toolmesh_sidecar::runtime::Runtime;

use crate::common::{is_dead, wait_until};

/// A runtime with one command tool `t` built from YAML backend lines, for a
/// config file in `dir`.
fn runtime(dir: &Path, extra: &str) -> Runtime {
    let yaml = format!("tools:\n  - name: t\n    description: d\n{extra}");
    let tools = SidecarConfig::from_yaml_str(&yaml)
        .unwrap()
        .build_tools(dir)
        .unwrap();
    Runtime::new(tools).unwrap()
}

/// Writes an executable script `dir/name`. A child process writes it, so
/// no descriptor of this (multi-threaded, forking) test process is open
/// for writing on it when it runs (which would fail with ETXTBSY).
fn script(dir: &Path, name: &str, body: &str) {
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"",
            "sh",
        ])
        .arg(body)
        .arg(dir.join(name))
        .status()
        .unwrap();
    assert!(status.success(), "cannot write {name}");
}

/// A temporary directory for a config, and its path relative to the
/// current directory: a relative config dir that a path joined to it means
/// something else from inside it, as `examples/demo` does when the sidecar
/// runs from the repository's root. Under the target dir's `tmp`, not the
/// system's: `..` from a dir one level below `/` lands on `/` again.
fn relative_config_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
    let target = dir.path().canonicalize().unwrap();
    let common = cwd
        .components()
        .zip(target.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut relative = PathBuf::new();
    for _ in cwd.components().skip(common) {
        relative.push("..");
    }
    relative.extend(target.components().skip(common));
    assert!(
        relative.is_relative() && relative.is_dir(),
        "{}",
        relative.display()
    );
    assert!(
        !target.join(&relative).exists(),
        "{} means the same from inside it",
        relative.display()
    );
    (dir, relative)
}

/// The result of a command tool that printed a path, as a path.
fn printed_path(response: &toolmesh_proto::pb::ExecuteResponse) -> PathBuf {
    assert!(!response.is_error, "{}", response.result_json);
    let text: String = serde_json::from_str(&response.result_json).unwrap();
    PathBuf::from(text.trim_end())
}

#[tokio::test]
async fn a_program_path_is_relative_to_a_relative_config_dir() {
    let (dir, config_dir) = relative_config_dir();
    script(dir.path(), "run.sh", "#!/bin/sh\necho '\"ran\"'\n");
    let rt = runtime(&config_dir, "    backend:\n      command: [./run.sh]\n");
    let response = rt
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert_eq!(
        (response.result_json.as_str(), response.is_error),
        ("\"ran\"", false)
    );
}

#[tokio::test]
async fn cwd_is_relative_to_the_config_dir_and_the_program_is_not_relative_to_cwd() {
    let (dir, config_dir) = relative_config_dir();
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    std::fs::create_dir(dir.path().join("work")).unwrap();
    script(&dir.path().join("bin"), "where.sh", "#!/bin/sh\npwd -P\n");

    let rt = runtime(
        &config_dir,
        "    backend:\n      command: [./bin/where.sh]\n      cwd: work\n",
    );
    let ran_in = printed_path(
        &rt.execute("t", "{}", CallContext::default(), Deadline::unbounded())
            .await
            .unwrap(),
    );
    assert_eq!(ran_in, dir.path().canonicalize().unwrap().join("work"));

    let rt = runtime(
        &config_dir,
        "    backend:\n      command: [./bin/where.sh]\n",
    );
    let ran_in = printed_path(
        &rt.execute("t", "{}", CallContext::default(), Deadline::unbounded())
            .await
            .unwrap(),
    );
    assert_eq!(ran_in, dir.path().canonicalize().unwrap());
}

#[tokio::test]
async fn a_bare_program_comes_from_path_and_its_arguments_resolve_in_the_config_dir() {
    let (dir, config_dir) = relative_config_dir();
    std::fs::write(
        dir.path().join("count.sh"),
        "read line; echo \"{\\\"got\\\": $line}\"\n",
    )
    .unwrap();
    // A decoy: a bare `sh` must not be taken from the config dir.
    script(dir.path(), "sh", "#!/bin/sh\necho decoy\n");
    let rt = runtime(&config_dir, "    backend:\n      command: [sh, count.sh]\n");
    let response = rt
        .execute(
            "t",
            r#"{"text":"a b"}"#,
            CallContext::default(),
            Deadline::unbounded(),
        )
        .await
        .unwrap();
    assert!(!response.is_error, "{}", response.result_json);
    assert_eq!(response.result_json, r#"{"got": {"text":"a b"}}"#);
}

#[tokio::test]
async fn env_and_plain_text_output() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        dir.path(),
        "    backend:\n      command: [sh, -c, 'echo \"hello $WHO\"']\n      env: {WHO: world}\n",
    );
    let response = rt
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert_eq!(response.result_json, r#""hello world\n""#);
}

#[tokio::test]
async fn non_zero_exit_is_an_error_result_with_stderr_and_code() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        dir.path(),
        "    backend:\n      command: [sh, -c, 'echo out; echo oops >&2; exit 3']\n",
    );
    let response = rt
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert!(response.is_error);
    let message: String = serde_json::from_str(&response.result_json).unwrap();
    assert_eq!(message, "command failed (exit code 3): oops");
}

#[tokio::test]
async fn a_program_gone_after_start_is_unavailable() {
    // A missing program stops the sidecar at start (see the config
    // tests); one removed while it runs fails the call, retryably.
    let dir = tempfile::tempdir().unwrap();
    script(dir.path(), "tool.sh", "#!/bin/sh\necho '{}'\n");
    let rt = runtime(dir.path(), "    backend:\n      command: [./tool.sh]\n");
    std::fs::remove_file(dir.path().join("tool.sh")).unwrap();
    let err = rt
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::Unavailable);
}

#[tokio::test]
async fn output_over_the_cap_is_an_error_result() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        dir.path(),
        "    max_output_bytes: 1000\n    backend:\n      command: [sh, -c, 'head -c 100000 /dev/zero | tr \"\\\\0\" x']\n",
    );
    let response = rt
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert!(response.is_error);
    assert!(
        response
            .result_json
            .contains("exceeds the limit of 1000 bytes"),
        "{}",
        response.result_json
    );
}

/// Reads the pids a script wrote (one per line), waiting for both.
async fn read_pids(file: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    wait_until(
        Duration::from_secs(10),
        "the command to write its pids",
        || {
            pids = std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            pids.len() == 2
        },
    )
    .await;
    pids
}

/// A script that starts a background `sleep 30` (same process group), writes
/// the shell's and the sleep's pids to `pids`, then waits.
const SLOW: &str = "    backend:\n      command: [sh, -c, 'sleep 30 & echo $! > pids.tmp; echo $$ >> pids.tmp; mv pids.tmp pids; wait']\n";

#[tokio::test]
async fn slow_command_is_killed_with_its_group_at_the_deadline() {
    let timeout = Duration::from_secs(3);
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        dir.path(),
        &format!("    timeout: {}s\n{SLOW}", timeout.as_secs()),
    );
    let pids_file = dir.path().join("pids");
    let start = Instant::now();
    // The pids are read while the call runs: they are written long before
    // the deadline, which then kills both processes.
    let (result, pids) = tokio::join!(
        rt.execute("t", "{}", CallContext::default(), Deadline::unbounded()),
        read_pids(&pids_file)
    );
    let elapsed = start.elapsed();
    assert_eq!(
        result.unwrap_err().to_status().code(),
        tonic::Code::DeadlineExceeded
    );
    // Not before the tool's timeout, and long before the 30 s sleep ends.
    assert!(
        elapsed >= timeout && elapsed < Duration::from_secs(15),
        "took {elapsed:?}"
    );
    wait_until(
        Duration::from_secs(10),
        "the shell and its sleep to die",
        || pids.iter().all(|&pid| is_dead(pid)),
    )
    .await;
}

#[tokio::test]
async fn dropping_the_call_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), SLOW);
    let pids_file = dir.path().join("pids");
    {
        let call = rt.execute("t", "{}", CallContext::default(), Deadline::unbounded());
        tokio::pin!(call);
        // Run the call until the command is up; leaving the block drops it.
        tokio::select! {
            _ = &mut call => panic!("the slow command finished"),
            pids = read_pids(&pids_file) => {
                assert!(pids.iter().all(|&pid| !is_dead(pid)));
            }
        }
    }
    let pids = read_pids(&pids_file).await;
    wait_until(
        Duration::from_secs(10),
        "the shell and its sleep to die",
        || pids.iter().all(|&pid| is_dead(pid)),
    )
    .await;
}
