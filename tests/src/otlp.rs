//! A real OTLP/gRPC trace receiver for kikid to export to (`[otel] endpoint`): the trace
//! service of `opentelemetry-proto`, served by tonic on loopback, keeping every span it is
//! sent with its resource's `service.*` attributes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value::Value};

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    /// Lowercase hex, as in a `traceparent`.
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// Its own attributes (`tracing` fields), as text.
    pub attributes: Vec<(String, String)>,
    /// The spans it links to: (trace id, span id).
    pub links: Vec<(String, String)>,
    pub service_name: String,
    pub service_instance: String,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// The receiver; it serves until dropped with its runtime.
pub struct Receiver {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    count: Arc<AtomicU64>,
}

impl Receiver {
    /// Serves on a free loopback port, on the calling runtime, keeping every span.
    pub async fn start() -> Self {
        Self::serve(true).await
    }

    /// Serves, counting the spans only (for a bench's long runs).
    pub async fn counting() -> Self {
        Self::serve(false).await
    }

    async fn serve(keep: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (spans, count) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicU64::new(0)));
        let service = Collector { spans: spans.clone(), count: count.clone(), keep };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(service))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        Self { addr, spans, count }
    }

    /// The `[otel] endpoint` that reaches it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many spans it received.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Every span received so far (none when only counting).
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().expect("spans").clone()
    }
}

struct Collector {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    count: Arc<AtomicU64>,
    keep: bool,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        let spans =
            request.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum::<usize>();
        self.count.fetch_add(spans as u64, Ordering::Relaxed);
        if !self.keep {
            return Ok(tonic::Response::new(ExportTraceServiceResponse::default()));
        }
        let mut received = Vec::new();
        for resource_spans in request.resource_spans {
            let resource = resource_spans.resource.map(|r| texts(&r.attributes)).unwrap_or_default();
            let of_resource = |key: &str| {
                resource.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap_or_default()
            };
            for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                received.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: texts(&span.attributes),
                    links: span.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect(),
                    service_name: of_resource("service.name"),
                    service_instance: of_resource("service.instance.id"),
                });
            }
        }
        self.spans.lock().expect("spans").extend(received);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn texts(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(n)) => n.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DoubleValue(x)) => x.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
