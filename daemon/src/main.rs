//! `kikid`: runs one kiki home in the foreground until SIGINT, SIGTERM or `kiki down`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kiki_daemon::Daemon;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser)]
#[command(name = "kikid", version, about = "Run a kiki home in the foreground")]
struct Args {
    /// The home directory (default: $KIKI_HOME, else ~/.kiki). Created on first start.
    #[arg(long, env = "KIKI_HOME")]
    home: Option<PathBuf>,
    /// Read this config file instead of HOME/config.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Give a home that lost its identity.key a new identity (every bridge must then be
    /// paired again); without it such a home refuses to start.
    #[arg(long)]
    new_identity: bool,
    /// Check the home without serving it (files, config, identity, the whole store, disk
    /// space) and print the findings as one JSON document; exit 0 when all is well, 1
    /// otherwise. `kiki doctor` runs this when no daemon answers, and shows it for people.
    #[arg(long)]
    check: bool,
    /// Copy the stopped home's store into the empty store at URL (`postgres://…`, or a
    /// SQLite file) and print the rows copied per table as JSON. `kiki store migrate` runs this.
    #[arg(long, value_name = "URL")]
    migrate_store_to: Option<String>,
    /// With --migrate-store-to a postgres:// URL: the password's owner-only file (else the
    /// URL's password or KIKI_STORE_PASSWORD).
    #[arg(long, requires = "migrate_store_to")]
    password_file: Option<PathBuf>,
}

/// jemalloc instead of glibc malloc: under concurrent calls glibc's arenas cost ~13% of
/// kikid's CPU (locking, trimming and regrowing heaps); see docs/benchmarks.md.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    match kiki_daemon::runtime::build() {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("kikid: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    // Everything kikid creates (socket, store, logs) is for its owner only.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let args = Args::parse();
    // The config first: its `[log]` decides the log. One that cannot be read stops a start
    // here, on stderr; `--check` reports it among its findings.
    let config = kiki_daemon::read_config(args.home.clone(), args.config.clone());
    let (home, log, otel) = match &config {
        Ok((home, config)) => (Some(home.root().to_path_buf()), config.log.clone(), config.otel.clone()),
        // `--check` and `--migrate-store-to` trace nothing.
        Err(_) => (None, Default::default(), Default::default()),
    };
    let otel = if args.check || args.migrate_store_to.is_some() { Default::default() } else { otel };
    if let Err(e) =
        kiki_daemon::logging::init(home.as_deref().unwrap_or(std::path::Path::new(".")), &log, &otel)
    {
        eprintln!("kikid: cannot open the log file: {e}");
        return ExitCode::FAILURE;
    }
    if !kiki_daemon::runtime::LIFO_SLOT_OFF {
        tracing::warn!(
            "built without --cfg tokio_unstable: tokio's LIFO slot stays on, and concurrent answers \
             are flushed one by one (see daemon/src/runtime.rs)"
        );
    }
    if args.check {
        return check(args).await;
    }
    if let Some(to) = args.migrate_store_to {
        return migrate(args.home, args.config, &to, args.password_file).await;
    }
    let config = match config {
        Ok((_, config)) => config,
        Err(e) => {
            eprintln!("kikid: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let mut builder = Daemon::builder().new_identity(args.new_identity).config(config);
    if let Some(home) = args.home {
        builder = builder.home(home);
    }
    if let Some(config) = args.config {
        builder = builder.config_file(config);
    }
    let handle = match builder.start().await {
        Ok(handle) => handle,
        Err(e) => {
            eprintln!("kikid: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let (Ok(mut interrupt), Ok(mut terminate)) =
        (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        eprintln!("kikid: cannot install signal handlers");
        handle.shutdown();
        handle.stopped().await;
        return ExitCode::FAILURE;
    };
    tokio::select! {
        _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
        _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
        () = handle.stopped() => {}
    }
    handle.shutdown();
    handle.stopped().await;
    // The last spans leave before the process does (the export needs the runtime).
    let _ = tokio::task::spawn_blocking(kiki_daemon::observe::traces::flush).await;
    ExitCode::SUCCESS
}

/// `kikid --migrate-store-to URL`: the stopped home's store copied; the rows per table as
/// JSON (`{"from": …, "to": …, "rows": {"threads": 3, …}}`).
async fn migrate(
    home: Option<PathBuf>,
    config: Option<PathBuf>,
    to: &str,
    password_file: Option<PathBuf>,
) -> ExitCode {
    match kiki_daemon::migrate::migrate_stopped(home, config, to, password_file).await {
        Ok(migrated) => {
            let rows: serde_json::Map<String, serde_json::Value> =
                migrated.rows.iter().map(|(table, n)| (table.to_string(), (*n).into())).collect();
            println!("{}", serde_json::json!({ "from": migrated.from, "to": migrated.to, "rows": rows }));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kikid: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `kikid --check`: the doctor's findings for a home no daemon answers for.
async fn check(args: Args) -> ExitCode {
    let findings = match kiki_daemon::doctor::examine_stopped(args.home, args.config).await {
        Ok(findings) => findings,
        Err(e) => {
            eprintln!("kikid: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sound = findings.iter().all(|f| f.ok);
    let findings = findings.into_iter().map(kiki_daemon::convert::finding_to_pb).collect();
    match serde_json::to_string_pretty(&kiki_proto::DoctorResponse { findings }) {
        Ok(json) => println!("{json}"),
        Err(e) => {
            eprintln!("kikid: cannot print the findings: {e}");
            return ExitCode::FAILURE;
        }
    }
    if sound { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
