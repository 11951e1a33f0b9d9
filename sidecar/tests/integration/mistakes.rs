//! Twenty mistakes a newcomer makes in the first hour, each run through the
//! real `toolmesh-sidecar` binary, and the exact line it prints before it
//! exits with code 1. The expected lines are the table of
//! `docs/troubleshooting.md`, read by this test: the doc and the binary
//! cannot disagree.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::common::{TestRegistry, binary, sidecar, tools_from_yaml};

/// How long one run may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// The folder the doc shows the config in.
const DOC_DIR: &str = "/home/me/tools";
/// The registry address the doc shows.
const DOC_REGISTRY: &str = "http://127.0.0.1:50051";
/// `PATH` for every run, so the doc can show it.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What the config's folder holds besides `sidecar.yaml`, and what runs
/// beside it.
#[derive(Clone, Copy)]
enum Setup {
    Nothing,
    /// A file `word_count.py` without the executable bit.
    NotExecutable,
    /// A live instance of `lookup` whose description differs.
    LiveLookup,
}

struct Mistake {
    /// The doc's "mistake" cell, word for word.
    mistake: &'static str,
    /// The config file.
    yaml: &'static str,
    /// Flags after `--config sidecar.yaml`; `{registry}` is the test's.
    args: &'static [&'static str],
    setup: Setup,
}

const DEFAULT_ARGS: &[&str] = &["--registry", "{registry}", "--listen", "127.0.0.1:0"];

fn mistakes() -> Vec<Mistake> {
    let m = |mistake, yaml, args, setup| Mistake {
        mistake,
        yaml,
        args,
        setup,
    };
    use Setup::{LiveLookup, NotExecutable, Nothing};
    vec![
        m(
            "A misspelt key: `regsitry: 127.0.0.1:50051`",
            "regsitry: 127.0.0.1:50051\ntools:\n  - name: echo\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "The dash before a tool forgotten: `tools:` then `name: echo`",
            "tools:\n  name: echo\n  description: Echo the arguments\n  backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "No `backend:` in a tool",
            "tools:\n  - name: echo\n    description: Echo the arguments\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A timeout without a unit: `timeout: 2`",
            "tools:\n  - name: echo\n    timeout: 2\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A zero timeout meant as no limit: `timeout: 0s`",
            "tools:\n  - name: echo\n    timeout: 0s\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A rate limit as text: `rate_limit: 5/s`",
            "tools:\n  - name: echo\n    rate_limit: 5/s\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A YAML 1.1 boolean: `idempotent: yes`",
            "tools:\n  - name: echo\n    idempotent: yes\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A command as one string: `command: python3 word_count.py`",
            "tools:\n  - name: word_count\n    description: Count words\n    backend: {command: python3 word_count.py}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "An HTTP URL without its scheme: `url: localhost:8080/lookup`",
            "tools:\n  - name: lookup\n    description: Look a key up\n    backend: {http: {url: 'localhost:8080/lookup'}}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A program that is not there: `command: [./word_count.py]`",
            "tools:\n  - name: word_count\n    description: Count words\n    backend: {command: [./word_count.py]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A script without the executable bit: `command: [./word_count.py]`",
            "tools:\n  - name: word_count\n    description: Count words\n    backend: {command: [./word_count.py]}\n",
            DEFAULT_ARGS,
            NotExecutable,
        ),
        m(
            "A misspelt program name: `command: [pyhton3, word_count.py]`",
            "tools:\n  - name: word_count\n    description: Count words\n    backend: {command: [pyhton3, word_count.py]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A JSON Schema type that does not exist: `input_schema: {type: objekt}`",
            "tools:\n  - name: echo\n    input_schema: {type: objekt}\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "An argument type that does not exist: `{name: text, type: str}`",
            "tools:\n  - name: echo\n    arguments: [{name: text, type: str}]\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A space in a tool name: `name: word count`",
            "tools:\n  - name: word count\n    description: Count words\n    backend: {command: [wc, -w]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "Two tools with one name",
            "tools:\n  - name: echo\n    description: Echo the arguments\n    backend: {command: [cat]}\n  - name: echo\n    description: Echo them again\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
        m(
            "A registry address with an unknown scheme: `--registry grpc://127.0.0.1:50051`",
            "tools:\n  - name: echo\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            &[
                "--registry",
                "grpc://127.0.0.1:50051",
                "--listen",
                "127.0.0.1:0",
            ],
            Nothing,
        ),
        m(
            "A listen address without a port: `--listen localhost`",
            "tools:\n  - name: echo\n    description: Echo the arguments\n    backend: {command: [cat]}\n",
            &["--registry", "{registry}", "--listen", "localhost"],
            Nothing,
        ),
        m(
            "A tool changed while its old version still runs",
            "tools:\n  - name: lookup\n    description: Look a key up, faster\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            LiveLookup,
        ),
        m(
            "A rate the registry does not accept: `rate_limit: {rate: 0.000001}`",
            "tools:\n  - name: digest\n    description: Weekly digest\n    rate_limit: {rate: 0.000001}\n    backend: {command: [cat]}\n",
            DEFAULT_ARGS,
            Nothing,
        ),
    ]
}

/// The rows of the doc's table: (mistake, message), in order.
fn doc_rows() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/troubleshooting.md");
    let doc = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    doc.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // | # | mistake | message | fix |
            if cells.len() != 6 || cells[1].parse::<usize>().is_err() {
                return None;
            }
            let message = cells[3].trim_start_matches('`').trim_end_matches('`');
            Some((cells[2].to_owned(), message.to_owned()))
        })
        .collect()
}

/// Runs the binary in a fresh folder holding `mistake`'s config, and
/// returns what it printed on stderr, with the folder and registry written
/// as the doc shows them.
async fn run(bin: &Path, registry: &str, mistake: &Mistake) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sidecar.yaml"), mistake.yaml).unwrap();
    if let Setup::NotExecutable = mistake.setup {
        std::fs::write(dir.path().join("word_count.py"), "print(3)\n").unwrap();
    }
    let args: Vec<String> = mistake
        .args
        .iter()
        .map(|a| a.replace("{registry}", registry))
        .collect();
    let output = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new(bin)
            .current_dir(dir.path())
            .args(["--config", "sidecar.yaml"])
            .args(&args)
            .env_clear()
            .env("PATH", PATH)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{:?} did not exit within {PATIENCE:?}", mistake.mistake))
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{:?}: {}\n{stderr}\n{}",
        mistake.mistake,
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    let real_dir = dir.path().canonicalize().unwrap();
    stderr
        .trim_end()
        .replace(&real_dir.display().to_string(), DOC_DIR)
        .replace(&dir.path().display().to_string(), DOC_DIR)
        .replace(registry, DOC_REGISTRY)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_mistakes_get_the_messages_the_troubleshooting_doc_shows() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let config_dir = tempfile::tempdir().unwrap();
    let live = sidecar(
        &registry.url(),
        "lookup-v1",
        tools_from_yaml(
            "tools:\n  - name: lookup\n    description: Look a key up\n    backend: {command: [cat]}\n",
            config_dir.path(),
        ),
    )
    .await;
    registry.wait_for_instances("lookup", 1, PATIENCE).await;

    let mistakes = mistakes();
    let rows = doc_rows();
    assert_eq!(mistakes.len(), 20, "twenty mistakes");
    let mut wrong = Vec::new();
    for (index, mistake) in mistakes.iter().enumerate() {
        let message = run(&bin, &registry.url(), mistake).await;
        assert!(
            !message.contains('\n'),
            "{:?} printed more than one line:\n{message}",
            mistake.mistake
        );
        assert!(
            !message.contains('`') && !message.contains('|'),
            "{message} cannot go in a table cell"
        );
        let expected = rows.get(index);
        if expected != Some(&(mistake.mistake.to_owned(), message.clone())) {
            wrong.push(format!(
                "row {}: the doc has\n  {expected:?}\nthe binary says\n  | {} | {} | `{message}` | ... |",
                index + 1,
                index + 1,
                mistake.mistake
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/troubleshooting.md and the binary disagree:\n{}",
        wrong.join("\n")
    );
    assert_eq!(
        rows.len(),
        mistakes.len(),
        "the doc has rows the test does not run"
    );
    // The refused sidecar left the live one alone.
    assert_eq!(registry.instances("lookup").await, 1);
    live.stop().await;
}
