//! kikid's traces (`[otel] endpoint`): its `tracing` spans exported over OTLP/gRPC, and the
//! W3C trace context (`traceparent`) that makes one send one trace across every home and
//! agent it reaches.
//!
//! The context comes in with a call (gRPC metadata from `kiki` and `kiki mcp`, a field of a
//! bridge call from a peer), is kept with a cross-home send in its outbox entry (its
//! attempts, retries included, are spans of the send's trace however late they run), goes
//! out with every bridge call, and reaches an agent as `TRACEPARENT` in its environment.
//!
//! Export never holds the home up: a span ends into a bounded queue that one thread of
//! its own sends in batches; when the queue is full (a collector down or slow) the span is
//! dropped and counted (`kiki_trace_spans_dropped_total`). The export starts once the
//! home's identity is known (`service.instance.id` is its id) and is flushed on shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kiki_proto::TRACE_METADATA_KEY as TRACEPARENT;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The spans traced: a call to the home (`rpc`, each MCP tool call's included), a turn, an
/// outbox attempt, a call to a peer and one served for a peer. The handlers' own spans
/// within a call, and each store write's (`store write`), are the log's only: a store
/// write's span would double what tracing a local send costs (see docs/benchmarks.md).
pub const SPANS: &[&str] = &["rpc", "turn", "outbox attempt", "bridge call", "bridge serve"];

/// Spans waiting for export at most; past it they are dropped and counted.
const QUEUE: usize = 4096;
/// The most one export call may take (an unreachable collector's cost, paid off the home's
/// path by the export thread).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long shutdown waits for the last spans to leave.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Spans dropped because the export queue was full, over the process's life.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// The export, once `[otel] endpoint` is set and the subscriber installed.
static EXPORT: OnceLock<Export> = OnceLock::new();

/// Spans dropped at a full export queue so far.
pub fn dropped_spans() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The tracer the `tracing` layer records spans with, for export to `endpoint` (an
/// `http://host:port` OTLP/gRPC collector). Nothing leaves before [`begin`].
pub fn tracer(endpoint: &str) -> opentelemetry_sdk::trace::Tracer {
    let export = EXPORT.get_or_init(|| {
        let processor = Arc::new(Deferred::default());
        let provider =
            SdkTracerProvider::builder().with_span_processor(DeferredHandle(processor.clone())).build();
        Export { endpoint: endpoint.to_string(), processor, provider }
    });
    export.provider.tracer("kikid")
}

/// Whether spans are recorded for export: without, a span has no trace context to read or
/// set, and the calls below return at once.
fn recording() -> bool {
    EXPORT.get().is_some()
}

/// Starts exporting, as the home whose id is `home_id` (its spans' `service.instance.id`).
/// Does nothing when traces are not exported. Runs inside the async runtime: the exporter's
/// gRPC channel lives there.
pub fn begin(home_id: &str) {
    let Some(export) = EXPORT.get() else { return };
    if export.processor.inner.get().is_some() {
        return;
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(&export.endpoint)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
    {
        Ok(exporter) => exporter,
        Err(e) => {
            tracing::warn!(error = %e, endpoint = %export.endpoint, "cannot export traces");
            return;
        }
    };
    let counted = Counted { inner: exporter, deferred: export.processor.clone() };
    let mut processor = BatchSpanProcessor::builder(counted)
        .with_batch_config(BatchConfigBuilder::default().with_max_queue_size(QUEUE).build())
        .build();
    processor.set_resource(
        &Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.name", "kikid"),
                KeyValue::new("service.instance.id", home_id.to_string()),
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            ])
            .build(),
    );
    let _ = export.processor.inner.set(processor);
    tracing::info!(endpoint = %export.endpoint, "exporting traces");
}

/// Sends what is still queued and stops exporting (kikid's shutdown). Blocks: call it off
/// the async runtime's threads, with the runtime still running.
pub fn flush() {
    if let Some(processor) = EXPORT.get().and_then(|e| e.processor.inner.get())
        && let Err(e) = processor.shutdown_with_timeout(FLUSH_TIMEOUT)
    {
        tracing::warn!(error = %e, "traces not all exported at shutdown");
    }
}

/// The trace context `span` continues, as a `traceparent` value; empty when traces are not
/// recorded.
pub fn traceparent(span: &tracing::Span) -> String {
    if !recording() {
        return String::new();
    }
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return String::new();
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT).unwrap_or_default()
}

/// Makes `span` part of the trace `traceparent` names (nothing when it names none).
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    if let Some(context) = context_of(traceparent) {
        let _ = span.set_parent(context);
    }
}

/// Makes `span`, an attempt at what the call `traceparent` names asked for (made after
/// `attempts` others), part of that call's trace and linked to the call: an attempt may
/// run long after the call ended, on another replica.
pub fn continue_attempt(span: &tracing::Span, traceparent: &str, attempts: i64) {
    if let Some(context) = context_of(traceparent) {
        let asked = context.span().span_context().clone();
        let _ = span.set_parent(context);
        span.add_link_with_attributes(asked, vec![KeyValue::new("kiki.attempts", attempts)]);
    }
}

/// Makes `span` a child of `cause` (a span of this process), which may have ended.
pub fn continue_span(span: &tracing::Span, cause: &tracing::Span) {
    if !recording() {
        return;
    }
    let context = cause.context();
    if context.span().span_context().is_valid() {
        let _ = span.set_parent(context);
    }
}

fn context_of(traceparent: &str) -> Option<Context> {
    recording().then(|| parse(traceparent)).flatten()
}

/// The context a `traceparent` from a caller or a peer names: none for anything but a
/// valid one, and nothing longer than a W3C one (55 characters) can be is even parsed.
fn parse(traceparent: &str) -> Option<Context> {
    if traceparent.is_empty() || traceparent.len() > MAX_TRACEPARENT {
        return None;
    }
    let carrier = HashMap::from([(TRACEPARENT.to_string(), traceparent.to_string())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    context.span().span_context().is_valid().then_some(context)
}

/// Longer than any `traceparent` of a version this build knows (55 characters), with room
/// for a later version's extra fields.
const MAX_TRACEPARENT: usize = 128;

/// The process's one export.
struct Export {
    endpoint: String,
    processor: Arc<Deferred>,
    provider: SdkTracerProvider,
}

/// The batch processor once the export began, and how many spans it holds: the queue's
/// bound is kept here, where a drop can be counted.
#[derive(Debug, Default)]
struct Deferred {
    inner: OnceLock<BatchSpanProcessor>,
    queued: AtomicUsize,
}

/// The provider's handle on the one [`Deferred`] (which [`begin`] fills in later).
#[derive(Debug)]
struct DeferredHandle(Arc<Deferred>);

impl SpanProcessor for DeferredHandle {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        if let Some(inner) = self.0.inner.get() {
            inner.on_start(span, cx);
        }
    }

    fn on_end(&self, span: SpanData) {
        let Some(inner) = self.0.inner.get() else { return };
        if self.0.queued.fetch_add(1, Ordering::Relaxed) >= QUEUE {
            self.0.queued.fetch_sub(1, Ordering::Relaxed);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.inner.get().map_or(Ok(()), |inner| inner.force_flush())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.inner.get().map_or(Ok(()), |inner| inner.shutdown_with_timeout(timeout))
    }
}

/// The OTLP exporter, telling [`Deferred`] the spans it took off the queue.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    deferred: Arc<Deferred>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.deferred.queued.fetch_sub(batch.len(), Ordering::Relaxed);
        self.inner.export(batch).await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_traceparent_names_a_context() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse(good).expect("valid");
        assert_eq!(context.span().span_context().trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in ["", "00-zzzz-garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"] {
            assert!(parse(bad).is_none(), "{bad}");
        }
        assert!(parse(&format!("{good}{}", "-0".repeat(100))).is_none(), "too long to be parsed");
    }
}
