//! The approval rules' webhooks: a JSON POST per held call (and per
//! decision) to the URL its rule names, e.g. a chat channel's incoming
//! hook. A post is retried with exponential backoff while it fails, each
//! try within [`TRY_TIMEOUT`], until [`TRIES`] or its approval's expiry; a
//! hook that fails or hangs never holds up, or loses, the call: the call is
//! in the task store, and approvers find it there (`ListApprovals`).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use backon::BackoffBuilder as _;
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{approval::Approval, model::Task};

/// Posts waiting for a worker; past it, new ones are dropped (and counted).
const QUEUE: usize = 1024;
/// Posts in flight at once.
const CONCURRENT: usize = 8;
/// Most tries of one post.
const TRIES: usize = 6;
/// Longest one try may take, connection included.
const TRY_TIMEOUT: Duration = Duration::from_secs(5);

/// One post.
struct Post {
    url: url::Url,
    body: Vec<u8>,
    /// When trying stops (the approval's expiry).
    until: tokio::time::Instant,
}

/// The sender of every rule's posts.
#[derive(Clone)]
pub(crate) struct Webhooks {
    tx: mpsc::Sender<Post>,
    dropped: Arc<AtomicU64>,
}

impl Webhooks {
    /// Starts the workers (inside a tokio runtime); they stop when the last
    /// clone is dropped.
    pub(crate) fn start() -> Self {
        Self::with_backoff(Duration::from_secs(1))
    }

    fn with_backoff(first: Duration) -> Self {
        let (tx, rx) = mpsc::channel::<Post>(QUEUE);
        let client = reqwest::Client::builder()
            .timeout(TRY_TIMEOUT)
            .connect_timeout(TRY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("toolmesh-registry/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        tokio::spawn(
            tokio_stream::wrappers::ReceiverStream::new(rx).for_each_concurrent(
                CONCURRENT,
                move |post| {
                    let client = client.clone();
                    async move { deliver(&client, post, first).await }
                },
            ),
        );
        Self {
            tx,
            dropped: Arc::default(),
        }
    }

    /// Queues `body` for `url`, tried until `until` at the latest.
    pub(crate) fn post(&self, url: &str, body: &serde_json::Value, until: tokio::time::Instant) {
        let Ok(url) = url::Url::parse(url) else {
            return;
        };
        let post = Post {
            url,
            body: body.to_string().into_bytes(),
            until,
        };
        if self.tx.try_send(post).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                dropped,
                "an approval webhook was dropped: {QUEUE} posts are queued already; the call waits in the task store (ListApprovals)"
            );
        }
    }
}

/// Tries `post` until it is taken (a 2xx), its tries or its time run out.
async fn deliver(client: &reqwest::Client, post: Post, first: Duration) {
    let mut delays = backon::ExponentialBuilder::new()
        .with_min_delay(first)
        .with_max_delay(first * 30)
        .with_jitter()
        .with_max_times(TRIES - 1)
        .build();
    let host = post.url.host_str().unwrap_or_default().to_owned();
    for attempt in 1..=TRIES {
        let sent = tokio::time::timeout_at(
            post.until,
            client
                .post(post.url.clone())
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(post.body.clone())
                .send(),
        )
        .await;
        let failure = match sent {
            Ok(Ok(answer)) if answer.status().is_success() => return,
            Ok(Ok(answer)) => format!("answered {}", answer.status()),
            Ok(Err(error)) => toolmesh_telemetry::causes(&error),
            Err(_) => "the approval expired before it was taken".to_owned(),
        };
        let next = delays
            .next()
            .filter(|delay| tokio::time::Instant::now() + *delay < post.until && attempt < TRIES);
        let Some(delay) = next else {
            tracing::warn!(%host, attempt, %failure, "an approval webhook gave up; the call waits in the task store (ListApprovals)");
            return;
        };
        tracing::debug!(%host, attempt, %failure, ?delay, "an approval webhook failed; trying again");
        tokio::time::sleep(delay).await;
    }
}

/// What a webhook posts.
pub(super) fn body(task: &Task, approval: &Approval, event: &str) -> Value {
    let decision = approval.decision.as_ref();
    let text = match decision {
        None => format!(
            "{} asks to call {} (rule {}); {}. Decide with `toolmesh approvals approve {}` or `toolmesh approvals deny {} --comment ...`",
            display(&task.caller),
            task.tool,
            approval.rule,
            super::approve::awaiting(approval),
            task.id,
            task.id
        ),
        Some(d) => format!(
            "The call of {} by {} is {}{}",
            task.tool,
            display(&task.caller),
            d.verdict.name(),
            if d.by.is_empty() {
                String::new()
            } else {
                format!(" by {}", d.by)
            }
        ),
    };
    json!({
        "event": format!("approval.{event}"),
        "text": text,
        "task_id": task.id,
        "tool": task.tool,
        "caller": task.caller,
        "rule": approval.rule,
        "reason": approval.reason,
        "approvers": approval.approvers,
        "arguments": serde_json::from_str::<Value>(&approval.shown_arguments).unwrap_or(Value::Null),
        "arguments_redacted": approval.redacted,
        "expires_at": humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(approval.until_ms)).to_string(),
        "digest": approval.digest,
        "decided_by": decision.map(|d| d.by.clone()),
        "comment": decision.map(|d| d.comment.clone()),
    })
}

fn display(caller: &str) -> &str {
    if caller.is_empty() {
        "an anonymous caller"
    } else {
        caller
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use axum::{Router, http::StatusCode, routing::post};

    use super::*;

    /// A hook that fails its first `failures` posts, then takes them: the
    /// bodies it took.
    async fn hook(
        failures: usize,
    ) -> (String, Arc<std::sync::Mutex<Vec<String>>>, Arc<AtomicUsize>) {
        let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
        let tries = Arc::new(AtomicUsize::new(0));
        let app = Router::new().route(
            "/hook",
            post({
                let (taken, tries) = (taken.clone(), tries.clone());
                move |body: String| async move {
                    if tries.fetch_add(1, Ordering::SeqCst) < failures {
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                    taken.lock().expect("not poisoned").push(body);
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, taken, tries)
    }

    async fn eventually(check: impl Fn() -> bool) -> bool {
        for _ in 0..200 {
            if check() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    #[tokio::test]
    async fn a_failing_hook_is_tried_again_until_it_takes_the_post() {
        let (url, taken, tries) = hook(2).await;
        let hooks = Webhooks::with_backoff(Duration::from_millis(10));
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        hooks.post(&url, &serde_json::json!({"task_id": "t1"}), until);
        assert!(eventually(|| !taken.lock().expect("not poisoned").is_empty()).await);
        assert_eq!(tries.load(Ordering::SeqCst), 3);
        assert_eq!(
            taken.lock().expect("not poisoned").as_slice(),
            [r#"{"task_id":"t1"}"#]
        );
    }

    #[tokio::test]
    async fn a_hook_that_never_takes_it_is_given_up_on_after_the_tries() {
        let (url, taken, tries) = hook(usize::MAX).await;
        let hooks = Webhooks::with_backoff(Duration::from_millis(5));
        hooks.post(
            &url,
            &serde_json::json!({}),
            tokio::time::Instant::now() + Duration::from_secs(60),
        );
        assert!(eventually(|| tries.load(Ordering::SeqCst) == TRIES).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(tries.load(Ordering::SeqCst), TRIES, "bounded");
        assert!(taken.lock().expect("not poisoned").is_empty());
    }

    #[tokio::test]
    async fn a_hanging_hook_holds_nothing_up() {
        // Accepts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let hooks = Webhooks::with_backoff(Duration::from_millis(5));
        let started = std::time::Instant::now();
        for _ in 0..QUEUE + 100 {
            hooks.post(
                &url,
                &serde_json::json!({}),
                tokio::time::Instant::now() + Duration::from_millis(200),
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "posting never waits on the hook"
        );
        assert!(
            hooks.dropped.load(Ordering::Relaxed) >= 50,
            "the queue is bounded"
        );
        held.abort();
    }
}
