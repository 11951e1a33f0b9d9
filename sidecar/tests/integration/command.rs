//! The command backend: real child processes.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;
use toolmesh_sidecar::config::SidecarConfig;
use toolmesh_sidecar::runtime::Runtime;

use crate::common::{process_is_dead, wait_until};

/// A runtime with one command tool `t` built from YAML backend lines, in `dir`.
fn runtime(dir: &Path, extra: &str) -> Runtime {
    let yaml = format!("tools:\n  - name: t\n    description: d\n{extra}");
    let tools = SidecarConfig::from_yaml_str(&yaml)
        .unwrap()
        .build_tools(dir)
        .unwrap();
    Runtime::new(tools).unwrap()
}

#[tokio::test]
async fn stdin_to_stdout_with_paths_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("count.sh"),
        "read line; echo \"{\\\"got\\\": $line}\"\n",
    )
    .unwrap();
    let rt = runtime(dir.path(), "    backend:\n      command: [sh, count.sh]\n");
    let response = rt.execute("t", r#"{"text":"a b"}"#, None).await.unwrap();
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
    let response = rt.execute("t", "{}", None).await.unwrap();
    assert_eq!(response.result_json, r#""hello world\n""#);
}

#[tokio::test]
async fn non_zero_exit_is_an_error_result_with_stderr_and_code() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        dir.path(),
        "    backend:\n      command: [sh, -c, 'echo out; echo oops >&2; exit 3']\n",
    );
    let response = rt.execute("t", "{}", None).await.unwrap();
    assert!(response.is_error);
    let message: String = serde_json::from_str(&response.result_json).unwrap();
    assert_eq!(message, "command failed (exit code 3): oops");
}

#[tokio::test]
async fn missing_program_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        dir.path(),
        "    backend:\n      command: [./no-such-program]\n",
    );
    let err = rt.execute("t", "{}", None).await.unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::Unavailable);
}

#[tokio::test]
async fn output_over_the_cap_is_an_error_result() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        dir.path(),
        "    max_output_bytes: 1000\n    backend:\n      command: [sh, -c, 'head -c 100000 /dev/zero | tr \"\\\\0\" x']\n",
    );
    let response = rt.execute("t", "{}", None).await.unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), &format!("    timeout: 1s\n{SLOW}"));
    let start = Instant::now();
    let err = rt.execute("t", "{}", None).await.unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::DeadlineExceeded);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    let pids = read_pids(&dir.path().join("pids")).await;
    wait_until(
        Duration::from_secs(10),
        "the shell and its sleep to die",
        || pids.iter().all(|&pid| process_is_dead(pid)),
    )
    .await;
}

#[tokio::test]
async fn dropping_the_call_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), SLOW);
    let pids_file = dir.path().join("pids");
    {
        let call = rt.execute("t", "{}", None);
        tokio::pin!(call);
        // Run the call until the command is up; leaving the block drops it.
        tokio::select! {
            _ = &mut call => panic!("the slow command finished"),
            pids = read_pids(&pids_file) => {
                assert!(pids.iter().all(|&pid| !process_is_dead(pid)));
            }
        }
    }
    let pids = read_pids(&pids_file).await;
    wait_until(
        Duration::from_secs(10),
        "the shell and its sleep to die",
        || pids.iter().all(|&pid| process_is_dead(pid)),
    )
    .await;
}
