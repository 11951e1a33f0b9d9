//! A closed standard output ends every command quietly with status 141 (as
//! `ls | head` does in a shell), never with a panic.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::{Mesh, TOOLS, stderr, toolmesh};

/// 128 + SIGPIPE.
const BROKEN_PIPE: i32 = 141;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_into_a_closed_pipe_ends_quietly() {
    let mesh = Mesh::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sidecar.yaml");
    std::fs::write(&config, TOOLS).unwrap();
    let config = config.display().to_string();
    let commands: [&[&str]; 12] = [
        &["tools", "list"],
        &["tools", "list", "-o", "json"],
        &["tools", "get", "forecast"],
        &["search", "will it rain in Paris"],
        &["export", "--format", "anthropic"],
        &["invoke", "forecast", r#"{"city": "Oslo"}"#],
        &["invoke", "forecast", r#"{"city": "Oslo"}"#, "--task"],
        &["tasks", "list"],
        &["watch", "--once"],
        &["watch", "-o", "json"],
        &["completions", "bash"],
        &["check", &config],
    ];
    for args in commands {
        // `toolmesh ... | true`: the reader is gone before the first write.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        // Not `output()`, which pipes stdout whatever was set.
        let run = toolmesh(&mesh.registry.url())
            .args(args)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
            .wait_with_output();
        let output = tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .unwrap_or_else(|_| panic!("{args:?} still runs 20 s after its reader left"))
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(BROKEN_PIPE),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(stderr(&output), "", "{args:?} says nothing");
    }
}

/// `toolmesh watch | head -1`: the reader goes while the catalog does not
/// change, so no write tells; the watch notices anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_when_its_reader_goes() {
    let mesh = Mesh::start().await;
    let mut child = toolmesh(&mesh.registry.url())
        .arg("watch")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Everything it has to say so far, so that no write is left to find
    // the pipe closed.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("a line");
        if line == "SYNCED" {
            break;
        }
    }
    drop(lines);
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("the watch ends once nobody reads it")
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(BROKEN_PIPE),
        "{}",
        stderr(&output)
    );
    assert_eq!(stderr(&output), "");
}
