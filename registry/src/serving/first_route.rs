//! One gRPC service routed ahead of tonic's router: the agents' API, whose
//! `Invoke` is the registry's hot path. tonic routes by an axum router,
//! which for each call parses the path into URL parameters, records the
//! matched route and boxes the request's body twice more; a call to the
//! first service skips all of it (about 2 % of a call's instructions,
//! docs/benchmarks.md). The service answers exactly as it would behind the
//! router: the router hands every path under `/<service>/` to it
//! unchanged, and so does this layer.

use std::{
    convert::Infallible,
    task::{Context, Poll},
};

use futures::future::Either;
use tonic::{
    body::Body,
    codegen::http::{Request, Response},
};
use toolmesh_proto::pb::tool_registry_server::ToolRegistryServer;
use tower::{Layer, Service};

use super::api::ToolRegistryApi;

/// tonic's router for the registry's services, with the agents' API first.
pub(crate) type Router = tonic::transport::server::Router<
    tower::layer::util::Stack<
        FirstRoute<ToolRegistryServer<ToolRegistryApi>>,
        tower::layer::util::Identity,
    >,
>;

/// Sends calls to the service `first` (named `name`, as gRPC paths name
/// it) before the router it wraps sees them.
#[derive(Debug, Clone)]
pub(crate) struct FirstRoute<F> {
    name: &'static str,
    first: F,
}

impl<F> FirstRoute<F> {
    /// Calls to `/<name>/<method>` go to `first`.
    pub(crate) fn new(name: &'static str, first: F) -> Self {
        Self { name, first }
    }
}

impl<F: Clone, R> Layer<R> for FirstRoute<F> {
    type Service = Routed<F, R>;

    fn layer(&self, rest: R) -> Self::Service {
        Routed {
            name: self.name,
            first: self.first.clone(),
            rest,
        }
    }
}

/// A [`FirstRoute`] in front of the router `rest`.
#[derive(Debug, Clone)]
pub(crate) struct Routed<F, R> {
    name: &'static str,
    first: F,
    rest: R,
}

impl<F, R> Routed<F, R> {
    /// Whether `path` is `/<name>/<method>`, a method being one segment.
    fn is_first(&self, path: &str) -> bool {
        path.strip_prefix('/')
            .and_then(|path| path.strip_prefix(self.name))
            .and_then(|path| path.strip_prefix('/'))
            .is_some_and(|method| !method.is_empty() && !method.contains('/'))
    }
}

impl<F, R> Service<Request<Body>> for Routed<F, R>
where
    F: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
    R: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<F::Future, R::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Either may take the next call: ready when both are (tonic's
        // generated servers and its router always are).
        match (self.first.poll_ready(cx), self.rest.poll_ready(cx)) {
            (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if self.is_first(request.uri().path()) {
            Either::Left(self.first.call(request))
        } else {
            Either::Right(self.rest.call(request))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{ServiceExt as _, service_fn};

    fn answering(
        with: &'static str,
    ) -> impl Service<
        Request<Body>,
        Response = Response<Body>,
        Error = Infallible,
        Future = impl Send,
    > + Clone {
        service_fn(move |_: Request<Body>| async move {
            Ok::<_, Infallible>(
                Response::builder()
                    .header("by", with)
                    .body(Body::empty())
                    .unwrap_or_default(),
            )
        })
    }

    async fn answered_by(path: &str) -> String {
        let routed = FirstRoute::new("toolmesh.v1.ToolRegistry", answering("first"))
            .layer(answering("router"));
        let request = Request::builder()
            .uri(path)
            .body(Body::empty())
            .expect("a request");
        let response = routed.oneshot(request).await.expect("infallible");
        response.headers()["by"].to_str().expect("ascii").to_owned()
    }

    #[tokio::test]
    async fn the_services_methods_go_first_and_the_rest_to_the_router() {
        for path in [
            "/toolmesh.v1.ToolRegistry/Invoke",
            "/toolmesh.v1.ToolRegistry/ListTools",
            "/toolmesh.v1.ToolRegistry/NoSuchMethod",
        ] {
            assert_eq!(answered_by(path).await, "first", "{path}");
        }
        for path in [
            "/toolmesh.v1.Registration/Announce",
            "/toolmesh.v1.ToolRegistryX/Invoke",
            "/toolmesh.v1.ToolRegistry",
            "/toolmesh.v1.ToolRegistry/",
            "/toolmesh.v1.ToolRegistry/Invoke/more",
            "/grpc.health.v1.Health/Check",
            "/",
        ] {
            assert_eq!(answered_by(path).await, "router", "{path}");
        }
    }
}
