//! kikid's log, as `[log]` says: its filter (`KIKI_LOG` wins), text or JSON lines, on
//! stderr or in a file under the home rotated daily. Built once the config is read, so that
//! the config decides it (`kikid` reads the config first; a config it cannot read is
//! reported on stderr, as before any log exists).

use std::path::Path;

use tracing::Level;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry, fmt};

use crate::config::{LogConfig, LogFormat, OtelConfig};
use crate::observe::traces;

/// Rotated files kept besides the one being written.
const KEPT_FILES: usize = 7;

/// Installs the process's log for the home at `home`, and its traces' recording when
/// `otel` names a collector (exported from [`traces::begin`] on). A log write that fails
/// (its disk is full) loses that line and nothing else: the layer would otherwise report it
/// with `eprintln!`, which panics when stderr — maybe the same full file — fails too, in
/// whichever task was logging.
pub fn init(home: &Path, config: &LogConfig, otel: &OtelConfig) -> std::io::Result<()> {
    let filter = EnvFilter::try_from_env("KIKI_LOG")
        .or_else(|_| EnvFilter::builder().parse(&config.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let log = match &config.file {
        // Colour only for a terminal: `kiki up` sends kikid's stderr to a file.
        None => formatted(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            config.format,
        ),
        Some(file) => {
            let path = home.join(file);
            let dir = path.parent().unwrap_or(home);
            std::fs::create_dir_all(dir)?;
            let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            let appender = tracing_appender::rolling::Builder::new()
                .rotation(tracing_appender::rolling::Rotation::DAILY)
                .filename_prefix(name)
                .max_log_files(KEPT_FILES + 1)
                .build(dir)
                .map_err(std::io::Error::other)?;
            formatted(fmt::layer().with_writer(appender).with_ansi(false), config.format)
        }
    };
    // Traces have a filter of their own, whatever the log shows: the spans a message's
    // trace is made of, and the warnings and errors met in them. Each span carries its
    // fields only (no source location, thread or timing attributes: half an export's bytes).
    let traces = otel.endpoint.as_deref().map(|endpoint| {
        tracing_opentelemetry::layer()
            .with_tracer(traces::tracer(endpoint))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            // kiki reads a span's context itself where it passes it on; attaching it to the
            // thread at every poll of every call would cost each call for nothing.
            .with_context_activation(false)
            .with_filter(filter_fn(|meta| match meta.is_span() {
                true => traces::SPANS.contains(&meta.name()) && meta.target().starts_with("kiki_daemon"),
                false => *meta.level() <= Level::WARN,
            }))
    });
    tracing_subscriber::registry().with(log.with_filter(filter)).with(traces).init();
    Ok(())
}

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// The log's lines, as text or JSON.
fn formatted<W>(
    layer: fmt::Layer<Registry, fmt::format::DefaultFields, fmt::format::Format, W>,
    format: LogFormat,
) -> BoxedLayer
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = layer.log_internal_errors(false);
    match format {
        LogFormat::Text => Box::new(layer),
        LogFormat::Json => Box::new(layer.json()),
    }
}
