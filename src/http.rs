//! The operator HTTP port: `/metrics` (Prometheus text), `/healthz` (process up),
//! `/readyz` (ZooKeeper session connected; its body also says when the gateway does not
//! authenticate to ZooKeeper, without changing the status, so that a probe keeps its meaning
//! and a person or an audit script reading it sees the open ACLs) and `/ui` (the live page,
//! [`crate::ui`]: `/ui`, its event stream `/ui/events?prefix=P` and one state
//! `/ui/state?prefix=P`).

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use crate::auth::Auth;
use crate::coord::Coordinator;

/// Serves the operator endpoints until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    coord: Arc<Coordinator>,
    metrics: PrometheusHandle,
    auth: Arc<Auth>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let coord = coord.clone();
        let metrics = metrics.clone();
        let auth = auth.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                respond(req, coord.clone(), metrics.clone(), auth.clone())
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// The `prefix` query parameter, percent-decoded ("" when absent).
fn prefix_of(query: Option<&str>) -> String {
    let Some(v) = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("prefix="))
    else {
        return String::new();
    };
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or(""), 16) {
                    Ok(c) => {
                        out.push(c);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn with_type(
    mut resp: Response<Body>,
    status: StatusCode,
    content_type: &'static str,
) -> Response<Body> {
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}

async fn respond(
    req: Request<Incoming>,
    coord: Arc<Coordinator>,
    metrics: PrometheusHandle,
    auth: Arc<Auth>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path();
    if path == "/ui/events" {
        let prefix = prefix_of(req.uri().query());
        let visible = crate::ui::visible_to(req.headers(), &auth);
        let (tx, rx) = tokio::sync::mpsc::channel::<String>(4);
        tokio::spawn(crate::ui::events(
            coord,
            prefix,
            visible,
            Some(auth.changes()),
            tx,
        ));
        let frames = tokio_stream::wrappers::ReceiverStream::new(rx)
            .map(|s| Ok::<_, Infallible>(hyper::body::Frame::data(Bytes::from(s))));
        let mut resp = with_type(
            Response::new(StreamBody::new(frames).boxed()),
            StatusCode::OK,
            "text/event-stream",
        );
        resp.headers_mut().insert(
            hyper::header::CACHE_CONTROL,
            hyper::header::HeaderValue::from_static("no-store"),
        );
        return Ok(resp);
    }
    if path == "/ui/state" {
        // The page's first state (fleet-wide, like the page's): for scripts.
        let prefix = prefix_of(req.uri().query());
        let visible = crate::ui::visible_to(req.headers(), &auth);
        let (status, body) = match crate::ui::one_state(coord, prefix, visible).await {
            Some(body) => (StatusCode::OK, body),
            None => (
                StatusCode::SERVICE_UNAVAILABLE,
                "{\"note\": \"the gateway is draining\"}".to_owned(),
            ),
        };
        return Ok(with_type(
            Response::new(Full::new(Bytes::from(body)).boxed()),
            status,
            "application/json",
        ));
    }
    let (status, content_type, body) = match path {
        "/ui" | "/ui/" => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            crate::ui::PAGE.to_owned(),
        ),
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" if coord.is_serving() && !coord.draining().is_cancelled() => (
            StatusCode::OK,
            "text/plain",
            format!(
                "ready: ZooKeeper session connected\n{}",
                zk_auth_note(&coord)
            ),
        ),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            format!(
                "not ready: {}\n{}",
                if coord.is_connected() && !coord.draining().is_cancelled() {
                    "every ZooKeeper session is on a server that diverged from its quorum"
                } else {
                    "no ZooKeeper session"
                },
                zk_auth_note(&coord)
            ),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found; try /metrics, /healthz, /readyz or /ui\n".to_owned(),
        ),
    };
    Ok(with_type(
        Response::new(Full::new(Bytes::from(body)).boxed()),
        status,
        content_type,
    ))
}

/// The `/readyz` line about the link's identity: empty when the gateway authenticates to
/// ZooKeeper, a warning when it does not (its znodes are then open to every ZooKeeper client).
fn zk_auth_note(coord: &Coordinator) -> &'static str {
    match crate::coord::zk::ZkIdentity::of(&coord.cfg) {
        crate::coord::zk::ZkIdentity::Authenticated => "",
        crate::coord::zk::ZkIdentity::Anonymous => crate::coord::zk::ANONYMOUS_WARNING_LINE,
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_of;

    #[test]
    fn the_prefix_parameter() {
        for (query, prefix) in [
            (None, ""),
            (Some(""), ""),
            (Some("prefix=billing."), "billing."),
            (Some("x=1&prefix=a%2Eb"), "a.b"),
            (Some("prefix=a%2"), "a%2"),
            (Some("prefix=%zz"), "%zz"),
        ] {
            assert_eq!(prefix_of(query), prefix, "{query:?}");
        }
    }
}
