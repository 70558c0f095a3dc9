//! The operator HTTP port: `/metrics` (Prometheus text), `/healthz` (process up) and
//! `/readyz` (ZooKeeper session connected; its body also says when the gateway does not
//! authenticate to ZooKeeper, without changing the status, so that a probe keeps its meaning
//! and a person or an audit script reading it sees the open ACLs).

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::coord::Coordinator;

/// Serves the operator endpoints until the task is dropped.
pub async fn serve(listener: TcpListener, coord: Arc<Coordinator>, metrics: PrometheusHandle) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let coord = coord.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let svc =
                hyper::service::service_fn(move |req| respond(req, coord.clone(), metrics.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn respond(
    req: Request<Incoming>,
    coord: Arc<Coordinator>,
    metrics: PrometheusHandle,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" if coord.is_connected() && !coord.draining().is_cancelled() => (
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
            format!("not ready: no ZooKeeper session\n{}", zk_auth_note(&coord)),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found; try /metrics, /healthz or /readyz\n".to_owned(),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    Ok(resp)
}

/// The `/readyz` line about the link's identity: empty when the gateway authenticates to
/// ZooKeeper, a warning when it does not (its znodes are then open to every ZooKeeper client).
fn zk_auth_note(coord: &Coordinator) -> &'static str {
    match crate::coord::zk::ZkIdentity::of(&coord.cfg) {
        crate::coord::zk::ZkIdentity::Authenticated => "",
        crate::coord::zk::ZkIdentity::Anonymous => crate::coord::zk::ANONYMOUS_WARNING_LINE,
    }
}
