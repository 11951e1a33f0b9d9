//! Agents' identity against the registry binary: API keys, JWTs, the call
//! policy, the caller in idempotency keys, rate limits and at the tool, and
//! the audit log. Each refused credential is an attack from the issue.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tonic::transport::Channel;
use tonic::{Code, Request};
use tonic_types::StatusExt;
use toolmesh_proto::pb::{self, tool_registry_client::ToolRegistryClient};
use toolmesh_sidecar::sdk::{self, CallContext};
use toolmesh_test_support::catalog::{invoke, keyed};
use toolmesh_test_support::process;
use toolmesh_test_support::registry_process::RegistryProcess;
use toolmesh_test_support::server::{LoopbackServer, loopback_listener, sidecar_on};
use toolmesh_test_support::wait::eventually;

const BILLING_KEY: &str = "billing-key-6f1d9e0a2c4b8d73";
const SUPPORT_KEY: &str = "support-key-1a2b3c4d5e6f7a8b";
const ISSUER: &str = "https://idp.test";
const AUDIENCE: &str = "toolmesh";

#[derive(Deserialize, JsonSchema)]
struct Empty {}

#[derive(Deserialize, JsonSchema)]
struct Charge {
    amount: u32,
    #[schemars(extend("writeOnly" = true))]
    card: String,
}

#[derive(Serialize, JsonSchema)]
struct Done {
    ok: bool,
}

/// The sidecar's tools: `lookup` answers with its caller, `counted` counts
/// its runs, `limited` allows each caller 2 calls, `billing.charge` lets
/// the audit log record its arguments.
fn tools(runs: Arc<AtomicUsize>) -> Vec<toolmesh_sidecar::Tool> {
    vec![
        sdk::tool_with_context(
            "lookup",
            "Who is asking",
            |_: Empty, ctx: CallContext| async move { Ok(ctx.caller) },
        )
        .build(),
        sdk::tool("counted", "Counts its runs", move |_: Empty| {
            let runs = runs.clone();
            async move { Ok(runs.fetch_add(1, Ordering::SeqCst) + 1) }
        })
        .build(),
        sdk::tool("limited", "Two calls per caller", |_: Empty| async {
            Ok(Done { ok: true })
        })
        .per_caller_rate_limit(0.001, 2)
        .build(),
        sdk::tool(
            "billing.charge",
            "Charges a card",
            |charge: Charge| async move {
                Ok(Done {
                    ok: charge.amount > 0 && !charge.card.is_empty(),
                })
            },
        )
        .audit_arguments(true)
        .build(),
    ]
}

struct Keys {
    /// PKCS#8 PEM of the issuer's ES256 key.
    private: String,
    /// Its public key, which the registry trusts.
    public: String,
}

fn es256() -> Keys {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    Keys {
        private: pair.serialize_pem(),
        public: pair.public_key_pem(),
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn claims(sub: &str, exp: u64, aud: &str, iss: &str) -> serde_json::Value {
    serde_json::json!({"sub": sub, "exp": exp, "aud": aud, "iss": iss})
}

fn sign(keys: &Keys, claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::ES256),
        claims,
        &EncodingKey::from_ec_pem(keys.private.as_bytes()).expect("ec key"),
    )
    .expect("sign")
}

fn unsigned(claims: &serde_json::Value) -> String {
    let part = |v: &serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    format!(
        "{}.{}.",
        part(&serde_json::json!({"alg": "none", "typ": "JWT"})),
        part(claims)
    )
}

fn hmac_with_public_key(keys: &Keys, claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(keys.public.as_bytes()),
    )
    .expect("sign")
}

struct Mesh {
    registry: RegistryProcess,
    addr: SocketAddr,
    /// The registry's admin port (metrics).
    admin: SocketAddr,
    _sidecar: LoopbackServer,
    dir: tempfile::TempDir,
    issuer: Keys,
    runs: Arc<AtomicUsize>,
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf-8").to_owned()
}

async fn mesh() -> Option<Mesh> {
    let binary = process::binary("toolmesh-registry")?;
    let dir = tempfile::tempdir().expect("temp dir");
    let issuer = es256();
    let keys = toolmesh_test_support::keys::api_keys_file(
        dir.path(),
        &[
            ("billing-agent", BILLING_KEY, &["billing"]),
            ("support-agent", SUPPORT_KEY, &["support"]),
        ],
    );
    let jwt_keys = write(dir.path(), "jwt.pem", &issuer.public);
    let policy = write(
        dir.path(),
        "policy.yaml",
        "rules:\n  - {groups: [billing], tools: [\"*\"]}\n  - {groups: [support], tools: [lookup, counted, limited]}\n  - {callers: [jwt-agent], tools: [lookup]}\n",
    );
    let audit = dir.path().join("audit.jsonl");
    let audit = audit.to_str().expect("utf-8").to_owned();
    let (registry, addr) = RegistryProcess::start(
        &binary,
        &[
            "--listen",
            "127.0.0.1:0",
            "--api-keys-file",
            keys.to_str().expect("utf-8"),
            "--jwt-keys-file",
            &jwt_keys,
            "--jwt-issuer",
            ISSUER,
            "--jwt-audience",
            AUDIENCE,
            "--policy-file",
            &policy,
            "--audit-log",
            &audit,
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &[],
    )
    .await;
    let admin = super::metrics::admin_address(&registry.log()).expect("the admin address");
    let runs = Arc::new(AtomicUsize::new(0));
    let sidecar = sidecar_on(
        loopback_listener().await,
        &format!("http://{addr}"),
        "s1",
        tools(runs.clone()),
    );
    let mesh = Mesh {
        registry,
        addr,
        admin,
        _sidecar: sidecar,
        dir,
        issuer,
        runs,
    };
    let agent = mesh.agent().await;
    let with_key = Authed {
        client: agent,
        credential: Some(BILLING_KEY.to_owned()),
    };
    eventually(Duration::from_secs(20), "the sidecar's tools", || {
        let mut with_key = with_key.clone();
        async move { with_key.list().await.map(|t| t.len() == 4).unwrap_or(false) }
    })
    .await;
    Some(mesh)
}

impl Mesh {
    async fn agent(&self) -> ToolRegistryClient<Channel> {
        ToolRegistryClient::connect(format!("http://{}", self.addr))
            .await
            .expect("connect")
    }

    async fn as_(&self, credential: Option<&str>) -> Authed {
        Authed {
            client: self.agent().await,
            credential: credential.map(str::to_owned),
        }
    }

    fn audit_lines(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

/// A client that presents `credential` on every call.
#[derive(Clone)]
struct Authed {
    client: ToolRegistryClient<Channel>,
    credential: Option<String>,
}

impl Authed {
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(credential) = &self.credential {
            request.metadata_mut().insert(
                "authorization",
                format!("Bearer {credential}").parse().expect("ascii"),
            );
        }
        request
    }

    async fn list(&mut self) -> Result<Vec<String>, tonic::Status> {
        let request = self.request(pb::ListToolsRequest::default());
        let tools = self.client.list_tools(request).await?.into_inner().tools;
        Ok(tools
            .into_iter()
            .filter_map(|t| t.descriptor.map(|d| d.name))
            .collect())
    }

    async fn invoke(
        &mut self,
        message: pb::InvokeRequest,
    ) -> Result<pb::InvokeResponse, tonic::Status> {
        let request = self.request(message);
        Ok(self.client.invoke(request).await?.into_inner())
    }

    async fn get(&mut self, name: &str) -> Result<pb::Tool, tonic::Status> {
        let request = self.request(pb::GetToolRequest {
            name: name.into(),
            ..Default::default()
        });
        Ok(self.client.get_tool(request).await?.into_inner())
    }

    /// The names `ExportTools` (MCP) exports, and the names it says it
    /// left out.
    async fn exported(
        &mut self,
        names: &[&str],
    ) -> Result<(Vec<String>, Vec<String>), tonic::Status> {
        let request = self.request(pb::ExportToolsRequest {
            format: pb::ExportFormat::Mcp.into(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            ..Default::default()
        });
        let answer = self.client.export_tools(request).await?.into_inner();
        let tools: Vec<serde_json::Value> = serde_json::from_str(&answer.tools_json).unwrap();
        Ok((
            tools
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect(),
            answer
                .issues
                .into_iter()
                .filter(|i| i.omitted)
                .map(|i| i.tool)
                .collect(),
        ))
    }

    /// The names `WatchTools` shows up to `SYNCED`.
    async fn watched(&mut self) -> Result<Vec<String>, tonic::Status> {
        let request = self.request(pb::WatchToolsRequest {
            ..Default::default()
        });
        let mut stream = self.client.watch_tools(request).await?.into_inner();
        let mut names = Vec::new();
        while let Some(event) = stream.message().await? {
            if event.kind() == pb::tool_event::Kind::Synced {
                break;
            }
            names.extend(event.tool.and_then(|t| t.descriptor).map(|d| d.name));
        }
        Ok(names)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_valid_credentials_get_in_and_the_caller_reaches_the_tool() {
    let Some(mesh) = mesh().await else {
        return;
    };
    let issuer = &mesh.issuer;
    let later = now() + 600;
    let other = es256();
    let good = claims("jwt-agent", later, AUDIENCE, ISSUER);
    for (attack, credential, says) in [
        ("no credential", None, "authorization"),
        (
            "an unknown API key",
            Some("not-a-key-0123456789".to_owned()),
            "key",
        ),
        (
            "an expired JWT",
            Some(sign(
                issuer,
                &claims("jwt-agent", now() - 3600, AUDIENCE, ISSUER),
            )),
            "expired",
        ),
        (
            "a JWT for another audience",
            Some(sign(
                issuer,
                &claims("jwt-agent", later, "other-service", ISSUER),
            )),
            "audience",
        ),
        (
            "a JWT from another issuer",
            Some(sign(
                issuer,
                &claims("jwt-agent", later, AUDIENCE, "https://evil.test"),
            )),
            "issuer",
        ),
        (
            "a JWT whose iss is a list holding ours",
            Some(sign(
                issuer,
                &serde_json::json!({"sub": "jwt-agent", "exp": later, "aud": AUDIENCE, "iss": ["https://evil.test", ISSUER]}),
            )),
            "`iss` must be one string",
        ),
        ("alg: none", Some(unsigned(&good)), "alg"),
        ("a JWT signed by another key", Some(sign(&other, &good)), ""),
        (
            "HS256 keyed with the public key",
            Some(hmac_with_public_key(issuer, &good)),
            "alg",
        ),
    ] {
        let mut agent = mesh.as_(credential.as_deref()).await;
        let status = agent
            .invoke(invoke("lookup", "{}"))
            .await
            .expect_err(attack);
        assert_eq!(status.code(), Code::Unauthenticated, "{attack}: {status:?}");
        assert!(
            status.message().to_lowercase().contains(says),
            "{attack}: {}",
            status.message()
        );
        if let Some(credential) = &credential {
            assert!(!status.message().contains(credential.as_str()), "{attack}");
        }
        let status = agent.list().await.expect_err(attack);
        assert_eq!(status.code(), Code::Unauthenticated, "{attack}");
    }

    let mut jwt = mesh.as_(Some(&sign(issuer, &good))).await;
    let answer = jwt
        .invoke(invoke("lookup", "{}"))
        .await
        .expect("a valid JWT");
    assert_eq!(
        answer.result_json, "\"jwt-agent\"",
        "the tool sees its caller"
    );
    assert_eq!(jwt.list().await.expect("list"), ["lookup"]);

    let mut support = mesh.as_(Some(SUPPORT_KEY)).await;
    assert_eq!(
        support.list().await.expect("list"),
        ["counted", "limited", "lookup"]
    );
    assert_eq!(
        support.watched().await.expect("watch"),
        ["counted", "limited", "lookup"]
    );
    assert_eq!(
        support.exported(&[]).await.expect("export"),
        (
            vec!["counted".into(), "limited".into(), "lookup".into()],
            vec![]
        )
    );
    assert_eq!(
        support
            .exported(&["billing.charge", "lookup"])
            .await
            .expect("export"),
        (vec!["lookup".into()], vec!["billing.charge".into()]),
        "a hidden tool is reported as if it did not exist"
    );
    let hidden = support.get("billing.charge").await.expect_err("hidden");
    let missing = support.get("no.such.tool").await.expect_err("missing");
    assert_eq!(hidden.code(), Code::NotFound);
    let status = support
        .invoke(invoke("billing.charge", r#"{"amount": 1, "card": "x"}"#))
        .await
        .expect_err("not allowed");
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(
        hidden.message().replace("billing.charge", "T"),
        missing.message().replace("no.such.tool", "T"),
        "a hidden tool reads exactly as a missing one"
    );

    let mut billing = mesh.as_(Some(BILLING_KEY)).await;
    assert_eq!(billing.list().await.expect("list").len(), 4);
    let answer = billing
        .invoke(invoke("lookup", "{}"))
        .await
        .expect("lookup");
    assert_eq!(answer.result_json, "\"billing-agent\"");
    assert!(!mesh.registry.log().contains(BILLING_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_and_rate_limits_belong_to_each_caller() {
    let Some(mesh) = mesh().await else {
        return;
    };
    let mut billing = mesh.as_(Some(BILLING_KEY)).await;
    let mut support = mesh.as_(Some(SUPPORT_KEY)).await;

    let first = billing
        .invoke(keyed("counted", "{}", "k"))
        .await
        .expect("first");
    let other = support
        .invoke(keyed("counted", "{}", "k"))
        .await
        .expect("other caller");
    let again = billing
        .invoke(keyed("counted", "{}", "k"))
        .await
        .expect("repeat");
    assert_eq!(first.result_json, "1");
    assert_eq!(other.result_json, "2", "another caller's key is its own");
    assert_eq!(
        again.result_json, "1",
        "a repeat by the same caller is replayed"
    );
    assert_eq!(mesh.runs.load(Ordering::SeqCst), 2);

    for _ in 0..2 {
        billing
            .invoke(invoke("limited", "{}"))
            .await
            .expect("within");
    }
    let status = billing
        .invoke(invoke("limited", "{}"))
        .await
        .expect_err("billing's third");
    assert_eq!(status.code(), Code::ResourceExhausted);
    let details = status.get_error_details();
    assert_eq!(
        details.quota_failure().expect("quota").violations[0].subject,
        "caller:billing-agent/tool:limited"
    );
    support
        .invoke(invoke("limited", "{}"))
        .await
        .expect("another caller's limit is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_says_who_did_what_and_hides_what_the_schema_marks() {
    let Some(mesh) = mesh().await else {
        return;
    };
    let mut billing = mesh.as_(Some(BILLING_KEY)).await;
    billing
        .invoke(invoke(
            "billing.charge",
            r#"{"amount": 5, "card": "4111-SECRET"}"#,
        ))
        .await
        .expect("charge");
    let mut nobody = mesh.as_(None).await;
    nobody
        .invoke(invoke(
            "billing.charge",
            r#"{"amount": 6, "card": "4222-SECRET"}"#,
        ))
        .await
        .expect_err("unauthenticated");
    eventually(Duration::from_secs(10), "both calls audited", || {
        let lines = mesh.audit_lines();
        async move {
            lines
                .iter()
                .filter(|l| l["tool"] == "billing.charge")
                .count()
                >= 2
        }
    })
    .await;
    let lines = mesh.audit_lines();
    let charge = lines
        .iter()
        .find(|l| {
            l["kind"] == "invoke" && l["caller"] == "billing-agent" && l["tool"] == "billing.charge"
        })
        .expect("the charge's record");
    assert_eq!(charge["outcome"], "ok");
    assert_eq!(charge["instance"], "s1");
    assert_eq!(charge["arguments"]["amount"], 5);
    assert_eq!(charge["arguments"]["card"], "[redacted]");
    assert!(charge["argument_bytes"].as_u64().is_some_and(|n| n > 0));
    let refused = lines
        .iter()
        .find(|l| l["kind"] == "invoke" && l["outcome"] == "unauthenticated")
        .expect("the refused call's record");
    assert_eq!(refused["caller"], "");
    assert!(refused.get("arguments").is_none());
    assert!(
        lines.iter().any(|l| l["kind"] == "registration"
            && l["action"] == "announce"
            && l["instance"] == "s1"),
        "{lines:?}"
    );
    let text = std::fs::read_to_string(mesh.dir.path().join("audit.jsonl")).expect("audit");
    assert!(!text.contains("SECRET"), "{text}");
}

/// The agent cannot tell a tool it may not call from one that does not
/// exist; the operator's records (audit, call line, metrics) can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_denial_reads_as_not_found_to_the_agent_and_as_permission_denied_to_the_operator()
{
    let Some(mesh) = mesh().await else {
        return;
    };
    let mut support = mesh.as_(Some(SUPPORT_KEY)).await;
    let denied = support
        .invoke(invoke("billing.charge", r#"{"amount": 1, "card": "x"}"#))
        .await
        .expect_err("not allowed");
    let missing = support
        .invoke(invoke("no.such.tool", "{}"))
        .await
        .expect_err("no such tool");
    assert_eq!(denied.code(), Code::NotFound);
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(
        denied.message().replace("billing.charge", "T"),
        missing.message().replace("no.such.tool", "T")
    );
    let resource = |status: &tonic::Status| {
        let info = status.get_error_details().resource_info().cloned();
        info.map(|i| i.resource_type)
    };
    assert_eq!(resource(&denied), resource(&missing));

    let mut billing = mesh.as_(Some(BILLING_KEY)).await;
    let unknown = billing
        .invoke(invoke("no.such.tool", "{}"))
        .await
        .expect_err("no such tool");
    assert_eq!(unknown.code(), Code::NotFound);

    eventually(Duration::from_secs(10), "the three calls audited", || {
        let lines = mesh.audit_lines();
        async move {
            lines
                .iter()
                .filter(|l| l["kind"] == "invoke" && l["tool"] != "lookup")
                .count()
                >= 3
        }
    })
    .await;
    let lines = mesh.audit_lines();
    let outcome = |caller: &str, tool: &str| {
        lines
            .iter()
            .find(|l| l["kind"] == "invoke" && l["caller"] == caller && l["tool"] == tool)
            .map(|l| l["outcome"].clone())
    };
    assert_eq!(
        outcome("support-agent", "billing.charge"),
        Some("permission_denied".into())
    );
    // The policy refuses before the catalog is read: a name no rule gives
    // the caller is a denial whether or not the tool exists.
    assert_eq!(
        outcome("support-agent", "no.such.tool"),
        Some("permission_denied".into())
    );
    assert_eq!(
        outcome("billing-agent", "no.such.tool"),
        Some("not_found".into())
    );

    let log = mesh.registry.log();
    let line = log
        .lines()
        .find(|l| l.contains(" call ") && l.contains(r#"tool="billing.charge""#))
        .unwrap_or_else(|| panic!("no call line for the denied call:\n{log}"));
    assert!(line.contains("outcome=permission_denied"), "{line}");

    let metrics = reqwest::Client::new()
        .get(format!("http://{}/metrics", mesh.admin))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("metrics text");
    let sample = |tool: &str, outcome: &str| {
        let head = format!(r#"toolmesh_invocations_total{{tool="{tool}",outcome="{outcome}"}} "#);
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(head.as_str()))
            .map(str::to_owned)
    };
    assert_eq!(
        sample("billing.charge", "permission_denied").as_deref(),
        Some("1"),
        "{metrics}"
    );
    assert_eq!(sample("billing.charge", "not_found"), None, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_policy_file_takes_effect_and_ends_watches_made_under_the_old_one() {
    let Some(mesh) = mesh().await else {
        return;
    };
    let mut support = mesh.as_(Some(SUPPORT_KEY)).await;
    let request = support.request(pb::WatchToolsRequest {
        ..Default::default()
    });
    let mut stream = support
        .client
        .watch_tools(request)
        .await
        .expect("watch")
        .into_inner();
    while let Some(event) = stream.message().await.expect("an event") {
        if event.kind() == pb::tool_event::Kind::Synced {
            break;
        }
    }
    write(
        mesh.dir.path(),
        "policy.yaml",
        "rules:\n  - {groups: [billing, support], tools: [\"*\"]}\n",
    );
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    })
    .await
    .expect("the watch ends within the reload interval");
    let status = ended.expect("ended with a status");
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.message().contains("policy changed"), "{status:?}");
    assert_eq!(support.list().await.expect("list").len(), 4);
    assert_eq!(support.watched().await.expect("watch again").len(), 4);
}
