#![allow(clippy::unwrap_used)]
use std::io::{self, Write};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use tokio::time::Instant;

use super::writer::DropReporter;
use super::*;

const GRACE: Duration = Duration::from_secs(5);

fn invoke(tool: &str) -> InvokeRecord {
    InvokeRecord {
        caller: String::new(),
        tool: tool.into(),
        instance: None,
        outcome: Outcome::Ok,
        latency: Duration::from_millis(1),
        argument_bytes: 2,
        attempts: 1,
        idempotency_replay: false,
        peer: None,
        arguments: None,
        task: None,
        version: None,
        digest: None,
    }
}

/// A sink that keeps what is written, reports each write, and may hold
/// the first write until released.
struct Gate {
    written: std_mpsc::Sender<Vec<u8>>,
    release: Option<std_mpsc::Receiver<()>>,
}

impl Write for Gate {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.written.send(buf.to_vec());
        if let Some(release) = self.release.take() {
            let _ = release.recv();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The next write to a [`Gate`], waited for off the runtime.
async fn next_write(written: &std::sync::Arc<Mutex<std_mpsc::Receiver<Vec<u8>>>>) -> Vec<u8> {
    let written = written.clone();
    tokio::task::spawn_blocking(move || {
        written
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(10))
            .unwrap()
    })
    .await
    .unwrap()
}

fn lines(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_instead_of_waiting() {
    let (written_tx, written_rx) = std_mpsc::channel();
    let written = std::sync::Arc::new(Mutex::new(written_rx));
    let (release_tx, release_rx) = std_mpsc::channel();
    let gate = Gate {
        written: written_tx,
        release: Some(release_rx),
    };
    let options = AuditOptions {
        capacity: 4,
        ..AuditOptions::default()
    };
    let log = AuditLog::start(Sink::custom(Box::new(gate)), options).unwrap();
    log.record(invoke("first"));
    // The writer is now stuck writing the first record.
    assert_eq!(lines(&next_write(&written).await).len(), 1);
    let started = std::time::Instant::now();
    for n in 0..14 {
        log.record(invoke(&format!("t{n}")));
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(log.dropped(), 10);
    release_tx.send(()).unwrap();
    log.close(GRACE).await.unwrap();
    let rest = lines(&next_write(&written).await);
    let tools: Vec<_> = rest.iter().map(|l| l["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["t0", "t1", "t2", "t3"]);
    log.record(invoke("after close"));
    assert_eq!(log.dropped(), 11);
}

#[tokio::test]
async fn the_writer_flushes_when_the_queue_runs_empty() {
    let (written_tx, written_rx) = std_mpsc::channel();
    let written = std::sync::Arc::new(Mutex::new(written_rx));
    let gate = Gate {
        written: written_tx,
        release: None,
    };
    let log = AuditLog::start(Sink::custom(Box::new(gate)), AuditOptions::default()).unwrap();
    log.record(invoke("add"));
    let first = lines(&next_write(&written).await);
    assert_eq!(first[0]["tool"], "add");
    assert_eq!(first[0]["kind"], "invoke");
    log.close(GRACE).await.unwrap();
}

#[tokio::test]
async fn a_file_is_created_private_and_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let target: AuditTarget = path.to_str().unwrap().parse().unwrap();
    for round in 0..2 {
        let log = AuditLog::open(&target, AuditOptions::default()).unwrap();
        for n in 0..100 {
            log.record(invoke(&format!("r{round}-{n}")));
        }
        log.close(GRACE).await.unwrap();
    }
    let all = lines(&std::fs::read(&path).unwrap());
    assert_eq!(all.len(), 200);
    assert_eq!(all[0]["tool"], "r0-0");
    assert_eq!(all[199]["tool"], "r1-99");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn dropping_every_handle_writes_what_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&AuditTarget::File(path.clone()), AuditOptions::default()).unwrap();
    let task = log
        .inner
        .as_ref()
        .unwrap()
        .shared
        .task
        .lock()
        .unwrap()
        .take()
        .unwrap();
    for n in 0..50 {
        log.record(invoke(&format!("t{n}")));
    }
    drop(log);
    tokio::time::timeout(GRACE, task).await.unwrap().unwrap();
    assert_eq!(lines(&std::fs::read(&path).unwrap()).len(), 50);
}

#[tokio::test]
async fn reopen_moves_to_a_new_file_after_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let rotated = dir.path().join("audit.jsonl.1");
    let options = AuditOptions {
        reopen_on_sighup: false,
        ..AuditOptions::default()
    };
    let log = AuditLog::open(&AuditTarget::File(path.clone()), options).unwrap();
    log.record(invoke("before"));
    wait_for_lines(&path, 1).await;
    std::fs::rename(&path, &rotated).unwrap();
    log.reopen();
    wait_for(|| path.exists()).await;
    log.record(invoke("after"));
    log.close(GRACE).await.unwrap();
    assert_eq!(
        lines(&std::fs::read(&rotated).unwrap())[0]["tool"],
        "before"
    );
    let fresh = lines(&std::fs::read(&path).unwrap());
    assert_eq!(fresh.len(), 1);
    assert_eq!(fresh[0]["tool"], "after");
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reopens_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let rotated = dir.path().join("audit.jsonl.1");
    let log = AuditLog::open(&AuditTarget::File(path.clone()), AuditOptions::default()).unwrap();
    log.record(invoke("before"));
    // Once the first line is written the writer has its SIGHUP handler, so
    // the signal cannot end the test process.
    wait_for_lines(&path, 1).await;
    std::fs::rename(&path, &rotated).unwrap();
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).unwrap();
    wait_for(|| path.exists()).await;
    log.record(invoke("after"));
    log.close(GRACE).await.unwrap();
    assert_eq!(lines(&std::fs::read(&path).unwrap())[0]["tool"], "after");
}

async fn wait_for_lines(path: &std::path::Path, count: usize) {
    wait_for(|| std::fs::read(path).is_ok_and(|bytes| lines(&bytes).len() >= count)).await;
}

async fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + GRACE;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn drops_are_reported_at_most_once_per_interval() {
    let mut reporter = DropReporter::new(Duration::from_secs(10));
    let start = Instant::now();
    assert_eq!(reporter.due(start, 0), None);
    assert_eq!(reporter.due(start, 3), Some(3));
    assert_eq!(reporter.due(start + Duration::from_secs(1), 10), None);
    assert_eq!(reporter.due(start + Duration::from_secs(9), 12), None);
    assert_eq!(reporter.due(start + Duration::from_secs(10), 12), Some(9));
    assert_eq!(reporter.due(start + Duration::from_secs(60), 12), None);
    assert_eq!(reporter.due(start + Duration::from_secs(61), 13), Some(1));
}

#[tokio::test]
async fn a_disabled_log_takes_records_and_does_nothing() {
    let log = AuditLog::disabled();
    assert!(!log.is_enabled());
    log.record(invoke("add"));
    assert_eq!(log.dropped(), 0);
    log.close(GRACE).await.unwrap();
}

#[test]
fn targets_parse() {
    assert_eq!("-".parse::<AuditTarget>().unwrap(), AuditTarget::Stdout);
    assert_eq!(
        "/var/log/audit.jsonl".parse::<AuditTarget>().unwrap(),
        AuditTarget::File("/var/log/audit.jsonl".into())
    );
    assert!(matches!(
        "".parse::<AuditTarget>(),
        Err(AuditError::EmptyTarget)
    ));
}

#[test]
fn opening_outside_a_runtime_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let target = AuditTarget::File(dir.path().join("a"));
    assert!(matches!(
        AuditLog::open(&target, AuditOptions::default()),
        Err(AuditError::NoRuntime)
    ));
    let missing = AuditTarget::File(dir.path().join("no/such/dir/a"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    assert!(matches!(
        AuditLog::open(&missing, AuditOptions::default()),
        Err(AuditError::Open { .. })
    ));
}
