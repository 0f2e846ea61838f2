//! kikid's log, as `[log]` says: its filter (`KIKI_LOG` wins), text or JSON lines, on
//! stderr or in a file under the home rotated daily. Built once the config is read, so that
//! the config decides it (`kikid` reads the config first; a config it cannot read is
//! reported on stderr, as before any log exists).

use std::path::Path;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Rotated files kept besides the one being written.
const KEPT_FILES: usize = 7;

/// Installs the process's log for the home at `home`. A log write that fails (its disk is
/// full) loses that line and nothing else: the layer would otherwise report it with
/// `eprintln!`, which panics when stderr — maybe the same full file — fails too, in whichever
/// task was logging.
pub fn init(home: &Path, config: &LogConfig) -> std::io::Result<()> {
    let filter = EnvFilter::try_from_env("KIKI_LOG")
        .or_else(|_| EnvFilter::builder().parse(&config.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).log_internal_errors(false);
    match (&config.file, config.format) {
        (None, format) => {
            // Colour only for a terminal: `kiki up` sends kikid's stderr to a file.
            let builder = builder
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
            match format {
                LogFormat::Text => builder.init(),
                LogFormat::Json => builder.json().init(),
            }
        }
        (Some(file), format) => {
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
            let builder = builder.with_writer(appender).with_ansi(false);
            match format {
                LogFormat::Text => builder.init(),
                LogFormat::Json => builder.json().init(),
            }
        }
    }
    Ok(())
}
