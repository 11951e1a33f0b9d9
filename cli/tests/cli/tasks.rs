//! Tasks from the command line: `invoke --task` ends as `invoke` does,
//! `tasks list`, `get`, `wait` and `cancel` find, show, follow and stop
//! them, in text and in JSON, with `invoke`'s exit codes.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use toolmesh_test_support::server::listener_at;
use toolmesh_test_support::wait::eventually;

use crate::{Mesh, exits, json_of, stderr, stdout, toolmesh};

const TOOLS: &str = r#"
tools:
  - name: forecast
    description: Forecast of temperature and rain for a city over the next days
    arguments:
      - {name: city, type: string, description: City name, required: true}
      - {name: days, type: integer, description: How many days}
    backend: {command: [cat]}
  - name: broken
    description: Always fails
    backend: {command: [sh, -c, 'echo "it broke" >&2; exit 3']}
  - name: steps
    description: Reports that it is half way, then echoes its arguments
    backend: {command: [sh, -c, 'echo ''toolmesh-progress {"fraction": 0.5, "message": "half way"}'' >&2; sleep 2; cat']}
  - name: slow
    description: Sleeps half a minute
    timeout: 1m
    backend: {command: [sleep, "30"]}
"#;

/// Starts `tool` with `arguments` as a task and returns its id, at once.
async fn detached(mesh: &Mesh, tool: &str, arguments: &str) -> String {
    let started = mesh
        .run(&["invoke", tool, arguments, "--task", "-d", "-o", "json"])
        .await;
    exits(&started, 0);
    let task = json_of(&started);
    assert_eq!(task["tool"], tool, "{task}");
    // A quick tool's end may be in before the start is answered.
    assert!(
        task["state"] == "WORKING" || task["state"] == "COMPLETED",
        "{task}"
    );
    task["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_as_a_task_ends_as_invoke_does() {
    let mesh = Mesh::serving(TOOLS).await;
    let args = [
        "invoke",
        "forecast",
        "--arg",
        "city=Oslo",
        "--arg",
        "days=3",
    ];
    let plain = mesh.run(&args).await;
    exits(&plain, 0);
    let task = mesh.run(&[&args[..], &["--task"]].concat()).await;
    exits(&task, 0);
    assert_eq!(stdout(&task), stdout(&plain));
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&task)).unwrap(),
        json!({"city": "Oslo", "days": 3})
    );
    let task = json_of(
        &mesh
            .run(&[
                "invoke",
                "forecast",
                r#"{"city": "Rome"}"#,
                "--task",
                "-o",
                "json",
            ])
            .await,
    );
    assert_eq!(
        task,
        json!({"result": {"city": "Rome"}, "is_error": false, "instance_id": "cli-test", "attempts": 1})
    );

    // A tool error exits 4 with its message, as from invoke.
    let broken = mesh.run(&["invoke", "broken", "--task"]).await;
    exits(&broken, 4);
    assert!(stderr(&broken).contains("it broke"), "{}", stderr(&broken));
    // Refused at the start, as Invoke refuses: no task.
    let invalid = mesh
        .run(&["invoke", "forecast", r#"{"town": "Rome"}"#, "--task"])
        .await;
    exits(&invalid, 5);
    assert!(
        stderr(&invalid).contains("/town: unexpected property"),
        "{}",
        stderr(&invalid)
    );
    exits(&mesh.run(&["invoke", "nope", "--task"]).await, 6);
    exits(&mesh.run(&["invoke", "forecast", "--detach"]).await, 2);

    // Progress, when stderr is not a terminal: one line when it changes.
    let steps = mesh
        .run(&["invoke", "steps", r#"{"n": 1}"#, "--task"])
        .await;
    exits(&steps, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&steps)).unwrap(),
        json!({"n": 1})
    );
    let progress: Vec<String> = stderr(&steps).lines().map(str::to_owned).collect();
    assert!(
        progress.len() == 1 && progress[0].starts_with("working  50% half way ("),
        "{progress:?}"
    );
    let quiet = mesh
        .run(&["invoke", "steps", "{}", "--task", "-o", "json"])
        .await;
    exits(&quiet, 0);
    assert_eq!(stderr(&quiet), "", "no progress line with --output json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_listed_shown_and_waited_for() {
    let mesh = Mesh::serving(TOOLS).await;
    let id = detached(&mesh, "forecast", r#"{"city": "Oslo"}"#).await;
    let waited = mesh.run(&["tasks", "wait", &id]).await;
    exits(&waited, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&waited)).unwrap(),
        json!({"city": "Oslo"})
    );
    let waited = json_of(&mesh.run(&["tasks", "wait", &id, "-o", "json"]).await);
    assert_eq!(waited["result"], json!({"city": "Oslo"}));

    let got = json_of(&mesh.run(&["tasks", "get", &id, "-o", "json"]).await);
    assert_eq!(got["id"], id.as_str());
    assert_eq!(got["tool"], "forecast");
    assert_eq!(got["state"], "COMPLETED");
    assert_eq!(got["response"]["result"], json!({"city": "Oslo"}));
    assert_eq!(got["response"]["instance_id"], "cli-test");
    assert_eq!(got["error"], Value::Null);
    assert!(got["revision"].as_u64().unwrap() > 0, "{got}");
    for time in ["created_at", "updated_at", "expires_at"] {
        assert!(
            got[time].as_str().is_some_and(|t| t.ends_with('Z')),
            "{time}: {got}"
        );
    }
    let text = stdout(&mesh.run(&["tasks", "get", &id]).await);
    assert!(
        text.contains(&format!("id:        {id}"))
            && text.contains("state:     COMPLETED")
            && text.contains("\"city\": \"Oslo\""),
        "{text}"
    );

    let broken = detached(&mesh, "broken", "{}").await;
    let list = mesh.run(&["tasks", "list"]).await;
    exits(&list, 0);
    let text = stdout(&list);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "TOOL", "STATE", "PROGRESS", "CREATED", "UPDATED"],
        "{text}"
    );
    // Newest first.
    assert!(lines[1].starts_with(&broken), "{text}");
    assert!(
        lines[2].starts_with(&id)
            && lines[2].contains("forecast")
            && lines[2].contains("COMPLETED"),
        "{text}"
    );
    assert!(lines[2].contains(" ago"), "{text}");

    let listed = json_of(&mesh.run(&["tasks", "list", "-o", "json"]).await);
    assert_eq!(listed["tasks"][0]["id"], broken.as_str(), "{listed}");
    assert_eq!(listed["tasks"][1]["id"], id.as_str(), "{listed}");
    assert_eq!(listed["next_page_token"], "");

    // Pages.
    detached(&mesh, "forecast", r#"{"city": "Rome"}"#).await;
    let page = json_of(
        &mesh
            .run(&["tasks", "list", "--page-size", "2", "-o", "json"])
            .await,
    );
    assert_eq!(page["tasks"].as_array().unwrap().len(), 2, "{page}");
    let token = page["next_page_token"].as_str().unwrap();
    assert!(!token.is_empty(), "{page}");
    let next = json_of(
        &mesh
            .run(&["tasks", "list", "--page-token", token, "-o", "json"])
            .await,
    );
    assert_eq!(next["tasks"][0]["id"], id.as_str(), "{next}");
    let all = json_of(
        &mesh
            .run(&[
                "tasks",
                "list",
                "--page-size",
                "1",
                "--all-pages",
                "-o",
                "json",
            ])
            .await,
    );
    assert_eq!(all["tasks"].as_array().unwrap().len(), 3, "{all}");
    let paged = mesh.run(&["tasks", "list", "--page-size", "1"]).await;
    assert!(
        stderr(&paged).contains("more tasks: --all-pages"),
        "{}",
        stderr(&paged)
    );
    exits(&mesh.run(&["tasks", "list", "--page-size", "0"]).await, 2);

    // The waited-for broken task ends as invoke would: exit 4.
    exits(&mesh.run(&["tasks", "wait", &broken]).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_task_is_not_found() {
    let mesh = Mesh::serving(TOOLS).await;
    for command in ["get", "wait", "cancel"] {
        let missing = mesh.run(&["tasks", command, "no-such-task"]).await;
        exits(&missing, 6);
        assert!(
            stderr(&missing).contains("NOT_FOUND"),
            "{command}: {}",
            stderr(&missing)
        );
        let missing = json_of(
            &mesh
                .run(&["tasks", command, "no-such-task", "-o", "json"])
                .await,
        );
        assert_eq!(
            missing["error"]["code"], "NOT_FOUND",
            "{command}: {missing}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_cancelled_and_a_wait_can_time_out() {
    let mesh = Mesh::serving(TOOLS).await;
    let id = detached(&mesh, "slow", "{}").await;

    // Its own time limit ends a wait; the task goes on.
    let timed_out = mesh.run(&["tasks", "wait", &id, "--timeout", "1s"]).await;
    exits(&timed_out, 7);
    let text = stderr(&timed_out);
    assert!(
        text.contains("did not end within 1s")
            && text.contains(&format!("toolmesh tasks wait {id}")),
        "{text}"
    );
    let timed_out = json_of(
        &mesh
            .run(&["tasks", "wait", &id, "--timeout", "500ms", "-o", "json"])
            .await,
    );
    assert_eq!(timed_out["error"]["code"], "DEADLINE_EXCEEDED");
    assert_eq!(timed_out["error"]["task_id"], id.as_str());
    let got = json_of(&mesh.run(&["tasks", "get", &id, "-o", "json"]).await);
    assert_eq!(got["state"], "WORKING", "{got}");

    // A wait that is under way ends when the task is cancelled.
    let waiting = toolmesh(&mesh.registry.url())
        .args(["tasks", "wait", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let cancelled = mesh.run(&["tasks", "cancel", &id]).await;
    exits(&cancelled, 0);
    assert_eq!(stdout(&cancelled), format!("{id} CANCELLED\n"));
    let waited = tokio::time::timeout(Duration::from_secs(20), waiting.wait_with_output())
        .await
        .expect("the wait ends with the task")
        .unwrap();
    exits(&waited, 1);
    assert!(
        stderr(&waited).contains("error: CANCELLED"),
        "{}",
        stderr(&waited)
    );
    assert_eq!(stdout(&waited), "");

    let got = json_of(&mesh.run(&["tasks", "get", &id, "-o", "json"]).await);
    assert_eq!(got["state"], "CANCELLED", "{got}");
    assert_eq!(got["error"]["code"], "CANCELLED", "{got}");
    assert_eq!(got["response"], Value::Null);
    // Cancelling again leaves it as it is.
    let again = json_of(&mesh.run(&["tasks", "cancel", &id, "-o", "json"]).await);
    assert_eq!(again["state"], "CANCELLED");
    assert_eq!(again["revision"], got["revision"]);

    // A task already over is not changed by a cancel.
    let done = detached(&mesh, "forecast", r#"{"city": "Oslo"}"#).await;
    exits(&mesh.run(&["tasks", "wait", &done]).await, 0);
    let late = mesh.run(&["tasks", "cancel", &done]).await;
    exits(&late, 0);
    assert_eq!(stdout(&late), format!("{done} COMPLETED\n"));
    assert!(stderr(&late).contains("already over"), "{}", stderr(&late));
}

/// The replica a wait follows its task on stops, and another takes its
/// address (the registries share one Redis): the wait reconnects and ends
/// with the task's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_follows_its_task_to_another_replica() {
    let Some(redis) = toolmesh_test_support::redis::RedisServer::start() else {
        return;
    };
    let config = || toolmesh_registry::Config {
        redis: Some(redis.url()),
        redis_prefix: "cli-tasks-failover".into(),
        shutdown_grace: Duration::from_millis(200),
        ..toolmesh_registry::Config::default()
    };
    let addr = std::net::SocketAddr::from((
        [127, 0, 0, 1],
        toolmesh_test_support::ports::reserved_port(),
    ));
    let url = format!("http://{addr}");
    let first = toolmesh_test_support::server::registry(listener_at(addr).await, config());
    let tools = toolmesh_sidecar::config::SidecarConfig::from_yaml_str(
        "tools:\n  - name: later\n    description: Echoes its arguments after four seconds\n    backend: {command: [sh, -c, 'sleep 4; cat']}\n",
    )
    .unwrap()
    .build_tools(std::path::Path::new("."))
    .unwrap();
    let _sidecar = toolmesh_test_support::server::sidecar(&url, "cli-failover", tools).await;
    let run = async |args: &[&str]| toolmesh(&url).args(args).output().await.unwrap();
    eventually(Duration::from_secs(20), "the tool is live", || async {
        json_of(&run(&["tools", "list", "-o", "json"]).await)
            .as_array()
            .is_some_and(|a| a.len() == 1)
    })
    .await;
    let started = run(&[
        "invoke",
        "later",
        r#"{"n": 7}"#,
        "--task",
        "-d",
        "-o",
        "json",
    ])
    .await;
    exits(&started, 0);
    let id = json_of(&started)["id"].as_str().unwrap().to_owned();
    let mut waiting = toolmesh(&url)
        .args(["tasks", "wait", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The wait is under way on the first replica; it stops, and a second
    // comes up where it was.
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.stop().await;
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "the wait outlives the replica it began on"
    );
    let _second = toolmesh_test_support::server::registry(listener_at(addr).await, config());
    let waited = tokio::time::timeout(Duration::from_secs(30), waiting.wait_with_output())
        .await
        .expect("the wait ends with the task")
        .unwrap();
    exits(&waited, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&waited)).unwrap(),
        json!({"n": 7})
    );
}
