//! A tower layer that counts gRPC calls by method and final status code
//! (`zkgate_grpc_requests_total{method,code}`) and open calls by method
//! (`zkgate_grpc_streams_active{method}`).
//!
//! The final code of a streaming call is only known when its body ends, so the response body is
//! wrapped: the status comes from the trailers (or from the headers of a trailers-only
//! response), and a body dropped before it finished — the client went away — counts as
//! `CANCELLED`. The gauge guard lives in the body, so it falls however the call ends.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame};
use tower::{Layer, Service};

use crate::metrics as m;

/// Methods get their own label; anything else (unknown paths) is `unknown`, so a scanner
/// cannot blow up the label set.
const METHODS: &[&str] = &[
    "zkgate.v1.Election/Campaign",
    "zkgate.v1.Election/Proclaim",
    "zkgate.v1.Election/Resign",
    "zkgate.v1.Election/Leader",
    "zkgate.v1.Election/Observe",
    "zkgate.v1.Election/Candidates",
    "zkgate.v1.Election/Validate",
    "zkgate.v1.Lock/Acquire",
    "zkgate.v1.Lock/Release",
    "zkgate.v1.Lock/Holders",
    "zkgate.v1.Lock/Validate",
    "grpc.health.v1.Health/Check",
    "grpc.health.v1.Health/Watch",
    "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

fn method_label(path: &str) -> &'static str {
    let path = path.trim_start_matches('/');
    METHODS
        .iter()
        .copied()
        .find(|m| *m == path)
        .unwrap_or("unknown")
}

/// gRPC status code names as the gRPC spec spells them.
pub fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

fn status_of(headers: &http::HeaderMap) -> Option<i32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

#[derive(Debug, Clone, Default)]
pub struct GrpcMetricsLayer;

impl<S> Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics { inner }
    }
}

#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for GrpcMetrics<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<MeteredBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let method = method_label(req.uri().path());
        let call = CallRecord::start(method);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            let mut call = call;
            // A trailers-only response (an immediate error) carries its status in the headers.
            call.code = status_of(resp.headers());
            Ok(resp.map(|inner| MeteredBody {
                inner,
                call: Some(call),
            }))
        })
    }
}

/// One call in flight: raises the gauge, and records the final code exactly once.
#[derive(Debug)]
struct CallRecord {
    method: &'static str,
    code: Option<i32>,
}

impl CallRecord {
    fn start(method: &'static str) -> Self {
        m::grpc_streams_active(method, 1.0);
        Self { method, code: None }
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        m::grpc_streams_active(self.method, -1.0);
        // No status seen: the body was dropped before its trailers, i.e. the client left.
        m::grpc_request(self.method, code_name(self.code.unwrap_or(1)));
    }
}

pin_project_lite::pin_project! {
    /// The response body, watched for its trailers.
    #[derive(Debug)]
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        call: Option<CallRecord>,
    }
}

impl<B: Body> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(status_of) {
                    if let Some(call) = this.call.as_mut() {
                        call.code = Some(code);
                    }
                }
            }
            Poll::Ready(None) => {
                // Finished: an unset code here means a plain OK body without trailers.
                if let Some(mut call) = this.call.take() {
                    call.code.get_or_insert(0);
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(call) = this.call.as_mut() {
                    call.code.get_or_insert(2);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        assert_eq!(
            method_label("/zkgate.v1.Election/Campaign"),
            "zkgate.v1.Election/Campaign"
        );
        assert_eq!(method_label("/evil/../x"), "unknown");
        assert_eq!(code_name(14), "UNAVAILABLE");
        assert_eq!(code_name(99), "UNKNOWN");
    }
}
