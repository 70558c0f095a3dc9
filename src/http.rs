//! The operator HTTP port: `/metrics` (Prometheus text), `/healthz` (process up) and
//! `/readyz` (ZooKeeper session connected).

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
            "ready: ZooKeeper session connected\n".to_owned(),
        ),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready: no ZooKeeper session\n".to_owned(),
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
