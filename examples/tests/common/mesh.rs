//! What the example-tool suites share: the real registry and sidecar
//! binaries run together as one mesh, the example folders, process-group
//! checks, and the Node HTTP server.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::Channel;
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_test_support::catalog;
use toolmesh_test_support::process::{SidecarProcess, binary, is_dead};
use toolmesh_test_support::registry_process::RegistryProcess;
use toolmesh_test_support::wait::{eventually, wait_until};

/// How long processes may take to start and tools to appear.
pub const STARTUP: Duration = Duration::from_secs(20);

/// Every tool's timeout in the tests ([`TIMEOUT`]). The shipped files say
/// 2 s, which a Node or Python tool's first call took on a starved
/// machine (beside two busy neighbours): long enough for any call to run
/// and for [`Mesh::times_out`] to see the tool's processes start, short
/// enough for a test to wait out.
pub const TOOL_TIMEOUT: &str = "8s";
/// [`TOOL_TIMEOUT`].
pub const TIMEOUT: Duration = Duration::from_secs(8);

/// The URL the shipped Node YAML gives `slugify_http`; the test's server
/// listens elsewhere.
pub const SHIPPED_HTTP_URL: &str = "http://127.0.0.1:8091";

pub fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools")
}

/// A `toolmesh-registry` on a loopback port of its choosing, killed when
/// dropped.
pub struct Registry {
    pub _process: RegistryProcess,
    pub addr: SocketAddr,
}

impl Registry {
    pub async fn start(binary: &Path) -> Self {
        let (process, addr) =
            RegistryProcess::start(binary, &["--listen", "127.0.0.1:0"], &[("NO_COLOR", "1")])
                .await;
        Self {
            _process: process,
            addr,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The shipped `examples/tools/<language>/sidecar.yaml`, as the sidecar
/// would run it in place, for a sidecar whose config lives in a temp dir:
/// command programs with a `/` made absolute and every command run in the
/// example's folder (what relative paths mean in the shipped file), and
/// the HTTP URL pointed at `http_url`, and every timeout [`TOOL_TIMEOUT`].
pub fn effective_yaml(language: &str, http_url: Option<&str>) -> String {
    let dir = tools_dir().join(language);
    let text = std::fs::read_to_string(dir.join("sidecar.yaml")).expect("read the shipped YAML");
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
    let dir_value = serde_yaml_ng::Value::String(dir.display().to_string());
    for tool in config["tools"].as_sequence_mut().expect("tools") {
        tool["timeout"] = serde_yaml_ng::Value::String(TOOL_TIMEOUT.into());
        let backend = &mut tool["backend"];
        if let Some(command) = backend.get_mut("command") {
            let program = &mut command[0];
            let name = program.as_str().expect("program").to_owned();
            if name.contains('/') {
                *program = serde_yaml_ng::Value::String(dir.join(&name).display().to_string());
            }
            backend["cwd"] = dir_value.clone();
        }
        if let Some(url) = backend.get_mut("http").and_then(|http| http.get_mut("url")) {
            let shipped = url.as_str().expect("url").to_owned();
            let rest = shipped
                .strip_prefix(SHIPPED_HTTP_URL)
                .expect("the shipped HTTP tools point at 127.0.0.1:8091");
            let base = http_url.expect("this YAML has an HTTP tool: pass the server's URL");
            *url = serde_yaml_ng::Value::String(format!("{base}{rest}"));
        }
    }
    serde_yaml_ng::to_string(&config).expect("YAML")
}

/// A registry and a sidecar serving one example's tools, all live.
pub struct Mesh {
    pub client: ToolRegistryClient<Channel>,
    pub sidecar: SidecarProcess,
    pub _registry: Registry,
}

impl Mesh {
    /// The tools of `examples/tools/<language>/sidecar.yaml`; `None` (after
    /// saying why) when the binaries are not built.
    pub async fn start(language: &str, http_url: Option<&str>, tools: &[&str]) -> Option<Self> {
        Self::serve(language, &effective_yaml(language, http_url), tools).await
    }

    /// The tools of `yaml`, served by a sidecar whose config (and so whose
    /// commands' working directory) is in a temp dir.
    pub async fn serve(instance: &str, yaml: &str, tools: &[&str]) -> Option<Self> {
        let registry_binary = binary("toolmesh-registry")?;
        let sidecar_binary = binary("toolmesh-sidecar")?;
        let registry = Registry::start(&registry_binary).await;
        let sidecar = SidecarProcess::start(&sidecar_binary, &registry.url(), instance, yaml).await;
        let client = ToolRegistryClient::connect(registry.url())
            .await
            .expect("connect to the registry");
        for tool in tools {
            catalog::wait_for_instances(&client, tool, 1, STARTUP).await;
        }
        Some(Self {
            client,
            sidecar,
            _registry: registry,
        })
    }

    /// `Invoke` with `arguments_json` as given: `result_json` as sent, and
    /// `is_error`.
    pub async fn invoke_text(
        &self,
        tool: &str,
        arguments_json: &str,
    ) -> Result<(String, bool), tonic::Status> {
        let response = self
            .client
            .clone()
            .invoke(catalog::invoke(tool, arguments_json))
            .await?
            .into_inner();
        Ok((response.result_json, response.is_error))
    }

    /// `Invoke`: the result as JSON with `is_error`, or the status.
    pub async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
    ) -> Result<(Value, bool), tonic::Status> {
        let response = self
            .client
            .clone()
            .invoke(catalog::invoke(tool, &arguments.to_string()))
            .await?
            .into_inner();
        let result = serde_json::from_str(&response.result_json).unwrap_or_else(|e| {
            panic!(
                "{tool}: result_json is not JSON ({e}): {:?}",
                response.result_json
            )
        });
        Ok((result, response.is_error))
    }

    pub async fn succeeds(&self, tool: &str, arguments: Value) -> Value {
        match self.invoke(tool, arguments).await {
            Ok((result, false)) => result,
            other => panic!(
                "{tool}: expected a result, got {other:?}\n{}",
                self.sidecar.log()
            ),
        }
    }

    pub async fn fails(&self, tool: &str, arguments: Value) -> Value {
        match self.invoke(tool, arguments).await {
            Ok((result, true)) => result,
            other => panic!(
                "{tool}: expected an is_error result, got {other:?}\n{}",
                self.sidecar.log()
            ),
        }
    }

    /// Calls `tool` with `arguments` that outlast its timeout
    /// ([`TIMEOUT`]): the agent gets `DEADLINE_EXCEEDED` at about that
    /// time. With `group`, the process whose command line contains
    /// `group[0]` (the tool) must be seen running, with processes of its
    /// process group containing each other name (what the tool started),
    /// and all of them must be gone after the deadline.
    pub async fn times_out(&self, tool: &str, arguments: Value, group: &[&str]) {
        let started = Instant::now();
        let call = tokio::spawn({
            let mut client = self.client.clone();
            let request = catalog::invoke(tool, &arguments.to_string());
            async move { client.invoke(request).await }
        });
        let mut seen = Vec::new();
        if let Some((leader, members)) = group.split_first() {
            eventually(
                TIMEOUT - Duration::from_secs(1),
                &format!("{leader:?} running with {members:?} in its process group"),
                || {
                    seen = running_group(leader, members);
                    std::future::ready(!seen.is_empty())
                },
            )
            .await;
        }
        let outcome = call.await.expect("the call's task");
        let elapsed = started.elapsed();
        match outcome {
            Err(status) if status.code() == Code::DeadlineExceeded => {}
            other => panic!("{tool}: expected DEADLINE_EXCEEDED, got {other:?}"),
        }
        assert!(
            elapsed >= TIMEOUT - Duration::from_secs(1)
                && elapsed < TIMEOUT + Duration::from_secs(10),
            "{tool}: DEADLINE_EXCEEDED after {elapsed:?}, the timeout is {TIMEOUT:?}"
        );
        wait_until(
            Duration::from_secs(10),
            &format!("{tool}'s processes {seen:?} killed at the deadline"),
            || seen.iter().all(|pid| is_dead(*pid)),
        )
        .await;
    }
}

/// The live processes of the process group led by the one process whose
/// command line contains `leader`, if that group also has a process for
/// each of `members`; else empty.
pub fn running_group(leader: &str, members: &[&str]) -> Vec<u32> {
    let processes = live_processes();
    let leaders: Vec<u32> = processes
        .iter()
        .filter(|(_, _, cmdline)| cmdline.contains(leader))
        .map(|(pid, _, _)| *pid)
        .collect();
    let [leader] = leaders[..] else {
        return Vec::new();
    };
    let group: Vec<_> = processes
        .iter()
        .filter(|(_, pgid, _)| *pgid == leader)
        .collect();
    let complete = group.iter().any(|(pid, _, _)| *pid == leader)
        && members
            .iter()
            .all(|m| group.iter().any(|(_, _, cmdline)| cmdline.contains(m)));
    if complete {
        group.iter().map(|(pid, _, _)| *pid).collect()
    } else {
        Vec::new()
    }
}

/// (pid, process group, command line with spaces) of every live process.
pub fn live_processes() -> Vec<(u32, u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !is_dead(*pid))
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name: state, ppid, pgrp, ...
            let pgid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(2)?
                .parse()
                .ok()?;
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
            Some((pid, pgid, cmdline))
        })
        .collect()
}

/// `node server.mjs` on a port of its choosing; killed when dropped.
pub struct NodeServer {
    pub _child: Child,
    pub url: String,
}

impl NodeServer {
    pub async fn start() -> Option<Self> {
        let mut child = Command::new(node()?)
            .arg(tools_dir().join("node/server.mjs"))
            .env("PORT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start node server.mjs");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(STARTUP, lines.next_line())
            .await
            .expect("server.mjs did not say where it listens")
            .expect("read server.mjs's output")
            .expect("server.mjs exited before listening");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from server.mjs: {line:?}"))
            .to_owned();
        Some(Self { _child: child, url })
    }
}

/// The `node` on `PATH`, or `None` after saying the test needs it.
pub fn node() -> Option<PathBuf> {
    on_path("node", "install Node 20 or later")
}

/// `program` on `PATH`, or `None` after saying the test needs it and
/// `how` to get it.
pub fn on_path(program: &str, how: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|found| found.is_file())
    });
    toolmesh_test_support::suite::require(
        program,
        found.ok_or_else(|| format!("not on PATH; {how}")),
    )
}
