//! The config reader: every problem at once, with lines and closest names.

use super::*;

/// The problems of a config that must be invalid.
fn problems(text: &str) -> Vec<String> {
    Config::parse(text).expect_err(text).problems
}

#[test]
fn empty_config_defaults_to_echo() {
    let config = Config::parse("").expect("valid");
    assert_eq!(config.store.lease, Duration::from_secs(10), "a team home's lease");
    assert_eq!(config.default_profile(), "echo");
    assert!(config.profile("echo").is_some());
    assert!(config.profile("nope").is_none());
}

#[test]
fn exec_profile_and_default() {
    let text = "[profiles.cat]\nexecutor = \"exec\"\ncommand = [\"cat\"]\ndefault = true\n";
    let config = Config::parse(text).expect("valid");
    assert_eq!(config.default_profile(), "cat");
    assert_eq!(config.profile_names(), vec!["cat".to_string(), "echo".to_string()]);
    let cat = config.profile("cat").expect("cat");
    assert_eq!((cat.executor, cat.command, cat.enabled), (ExecutorKind::Exec, vec!["cat".to_string()], true));
}

#[test]
fn every_section_and_key_is_read() {
    let text = "[store]\nurl = \"sqlite://x.db\"\nlease = \"4s\"\n[thread_communication]\nenabled = false\n\
                [turns]\nmax_output_bytes = 7\n[mailbox]\ndelivery_wait = \"1s\"\nkey_retention = \"2d\"\n\
                [bridge]\nlisten = \"127.0.0.1:4433\"\nretry_window = \"1m\"\nrequest_expiry = \"2h\"\n\
                connect_timeout = \"3s\"\n[rooms]\nmax_agent_wakes = 4\n\
                [profiles.a]\nexecutor = \"echo\"\nenabled = false\nthread_communication = true\n";
    let config = Config::parse(text).expect("valid");
    assert_eq!(config.store.url.as_deref(), Some("sqlite://x.db"));
    assert_eq!(config.store.lease, Duration::from_secs(4));
    assert_eq!(config.thread_communication.enabled, Some(false));
    assert_eq!(config.turns.max_output_bytes, 7);
    assert_eq!(config.mailbox.delivery_wait, Duration::from_secs(1));
    assert_eq!(config.mailbox.key_retention, Duration::from_secs(2 * 24 * 3600));
    assert_eq!(config.bridge.listen, std::net::SocketAddr::from(([127, 0, 0, 1], 4433)));
    assert_eq!(config.bridge.retry_window, Duration::from_secs(60));
    assert_eq!(config.bridge.request_expiry, Duration::from_secs(2 * 3600));
    assert_eq!(config.bridge.connect_timeout, Duration::from_secs(3));
    assert_eq!(config.rooms.max_agent_wakes, 4);
    let a = config.profile("a").expect("a");
    assert_eq!((a.executor, a.enabled, a.thread_communication), (ExecutorKind::Echo, false, Some(true)));
}

#[test]
fn known_keys_are_learned_from_serde() {
    assert_eq!(
        field_names::<BridgeConfig>(),
        ["listen", "retry_window", "request_expiry", "connect_timeout"]
    );
    assert_eq!(
        field_names::<ProfileConfig>(),
        [
            "executor",
            "command",
            "default",
            "enabled",
            "thread_communication",
            "allowed_tools",
            "max_cost_usd"
        ]
    );
    // Every section `Config` has is read, none is taken for an unknown one.
    let text: String = field_names::<Config>().iter().map(|section| format!("[{section}]\n")).collect();
    assert_eq!(field_names::<Config>().len(), 12);
    Config::parse(&text).expect("every section, empty");
}

#[test]
fn all_problems_reported_at_once() {
    let text = "[profiles.a]\nexecutor = \"exec\"\ndefault = true\n[profiles.B]\nexecutor = \"echo\"\ndefault = true\n";
    let err = Config::parse(text).expect_err("invalid");
    assert_eq!(err.problems.len(), 3, "{err}");
    assert!(err.to_string().contains("profiles.a.command"));
    assert!(err.to_string().contains("at most one profile"));
}

#[test]
fn wrong_types_in_several_sections_are_all_reported_with_their_lines() {
    let err = Config::parse("[bridge]\nretry_window = \"1s\"\n[turns\n").expect_err("not TOML");
    assert_eq!(err.problems.len(), 1, "{err}");
    assert!(err.problems[0].starts_with("line 3, column 7 (`[turns`): "), "{err}");
    assert_eq!(
        problems("profiles = 5\n"),
        ["profiles: line 1, column 12 (`profiles = 5`): must be a table of profiles"]
    );
    assert_eq!(problems("bridge = 5\n"), ["bridge: line 1, column 10 (`bridge = 5`): must be a table"]);
    let text = "[bridge]\nretry_window = 5\n[turns]\nmax_output_bytes = \"big\"\n\
                [mailbox]\ndelivery_wait = \"2m\"\n[profiles.a]\nexecutor = \"shell\"\n\
                [profiles.b]\nexecutor = \"exec\"\n";
    assert_eq!(
        problems(text),
        [
            "bridge.retry_window: line 2, column 16 (`retry_window = 5`): invalid type: integer `5`, expected a string",
            "turns.max_output_bytes: line 4, column 20 (`max_output_bytes = \"big\"`): invalid type: string \"big\", expected usize",
            "profiles.a.executor: line 8, column 12 (`executor = \"shell\"`): unknown variant `shell`, expected one of `echo`, `exec`, `claude`, `codex`, `acp`",
            "profiles.b.command: an exec profile needs a command",
            "mailbox.delivery_wait: must be at most 60s",
        ]
    );
}

#[test]
fn every_bad_key_of_one_section_is_reported() {
    let text = "[bridge]\nlisten = 5\nretry_window = true\nrequest_expiry = \"soon\"\n";
    assert_eq!(
        problems(text),
        [
            "bridge.listen: line 2, column 10 (`listen = 5`): invalid type: integer `5`, expected socket address",
            "bridge.retry_window: line 3, column 16 (`retry_window = true`): invalid type: boolean `true`, expected a string",
            "bridge.request_expiry: line 4, column 18 (`request_expiry = \"soon\"`): \"soon\": expected number at 0",
        ]
    );
    // The section's valid keys are still read, and their rules checked.
    let said = problems("[bridge]\nlisten = 5\nretry_window = \"25h\"\n");
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("bridge.listen: line 2"), "{said:?}");
    assert!(said[1].starts_with("bridge.retry_window: must be at most 24h"), "{said:?}");
}

#[test]
fn bad_keys_across_sections_and_profiles_are_all_reported_with_their_lines() {
    let text = "[thread_comunication]\nenabled = true\n\
                [bridge]\nretry_windw = \"1m\"\nlisten = 5\n\
                [profiles.a]\nexecutor = \"echo\"\nenable = false\ndefault = \"yes\"\n\
                [profiles.B]\ncommand = [\"cat\"]\n\
                [web]\nlisten = \"x\"\n";
    assert_eq!(
        problems(text),
        [
            "thread_comunication: line 1, column 2 (`[thread_comunication]`): unknown section; did you mean `thread_communication`?",
            "bridge.retry_windw: line 4, column 1 (`retry_windw = \"1m\"`): unknown key; did you mean `retry_window`?",
            "bridge.listen: line 5, column 10 (`listen = 5`): invalid type: integer `5`, expected socket address",
            "profiles.a.enable: line 8, column 1 (`enable = false`): unknown key; did you mean `enabled`?",
            "profiles.a.default: line 9, column 11 (`default = \"yes\"`): invalid type: string \"yes\", expected a boolean",
            "profiles.B.executor: line 10, column 11 (`[profiles.B]`): required",
            "profiles.B: a profile name is 1-64 characters of a-z, 0-9, '-' and '_'",
            "web: line 12, column 2 (`[web]`): not supported by this version of kikid yet (a section of kiki's config, not a typo); remove it",
        ]
    );
}

#[test]
fn unknown_keys_without_a_close_name_list_the_known_ones() {
    assert_eq!(
        problems("[turns]\ncolour = 1\n"),
        ["turns.colour: line 2, column 1 (`colour = 1`): unknown key; the known ones are `max_output_bytes`"]
    );
    let said = problems("[profiles.agent]\nexecutor = \"echo\"\nmodel = \"y\"\n");
    assert_eq!(
        said,
        ["profiles.agent.model: line 3, column 1 (`model = \"y\"`): unknown key; the known ones are \
             `executor`, `command`, `default`, `enabled`, `thread_communication`, `allowed_tools`, `max_cost_usd`"]
    );
    let said = problems("nonsense = 1\n");
    assert!(
        said[0].starts_with(
            "nonsense: line 1, column 1 (`nonsense = 1`): unknown section; the known ones are `store`, "
        ),
        "{said:?}"
    );
}

#[test]
fn config_sections_and_keys_not_implemented_yet_are_refused_as_such() {
    assert_eq!(
        problems("[web]\nx = 1\n"),
        ["web: line 1, column 2 (`[web]`): not supported by this version of kikid yet \
          (a section of kiki's config, not a typo); remove it"]
    );
}

#[test]
fn the_log_takes_a_filter_a_format_and_a_file_under_the_home() {
    let config = Config::parse(
        "[log]\nlevel = \"warn,kiki_daemon::bridges=debug\"\nformat = \"json\"\nfile = \"logs/kikid.log\"\n",
    )
    .expect("valid");
    assert_eq!(config.log.format, crate::config::LogFormat::Json);
    assert_eq!(config.log.file.as_deref(), Some(std::path::Path::new("logs/kikid.log")));
    assert_eq!(
        problems("[log]\nlevel = \"[oops\"\nfile = \"../kikid.log\"\n"),
        [
            "log.level: not a log filter (invalid filter directive); e.g. \"info\" or \"warn,kiki_daemon=debug\"",
            "log.file: a file under the home, like \"logs/kikid.log\" (no leading /, no ..), got ../kikid.log",
        ]
    );
    let said = problems("[log]\nformat = \"xml\"\n");
    assert!(said[0].starts_with("log.format:") && said[0].contains("expected `text` or `json`"), "{said:?}");
}

#[test]
fn traces_go_to_an_otlp_collector_url() {
    let config = Config::parse("[otel]\nendpoint = \"http://127.0.0.1:4317\"\n").expect("valid");
    assert_eq!(config.otel.endpoint.as_deref(), Some("http://127.0.0.1:4317"));
    assert_eq!(Config::parse("").expect("valid").otel.endpoint, None, "not exported by default");
    for bad in ["127.0.0.1:4317", "grpc://collector:4317", "http://"] {
        assert_eq!(
            problems(&format!("[otel]\nendpoint = \"{bad}\"\n")),
            [format!(
                "otel.endpoint: an OTLP/gRPC collector's URL, like \"http://127.0.0.1:4317\", got {bad:?}"
            )]
        );
    }
}

#[test]
fn a_budget_is_positive_and_any_profile_may_allow_session_tools() {
    assert_eq!(
        problems(
            "[profiles.a]\nexecutor = \"exec\"\ncommand = [\"x\"]\nmax_cost_usd = -1.0\nallowed_tools = [\"Bash\"]\n"
        ),
        ["profiles.a.max_cost_usd: must be a positive number of dollars, got -1"]
    );
    let config = Config::parse("[profiles.c]\nexecutor = \"claude\"\nmax_cost_usd = 2.5\n").expect("valid");
    let claude = config.profile("c").expect("c");
    assert_eq!((claude.program(), claude.max_cost_usd), (vec!["claude".to_string()], Some(2.5)));
    let sessions = "[profiles.x]\nexecutor = \"codex\"\nallowed_tools = [\"command\"]\n[profiles.y]\nexecutor = \"acp\"\n";
    assert_eq!(problems(sessions), ["profiles.y.command: an acp profile needs a command"]);
    let codex = Config::parse("[profiles.x]\nexecutor = \"codex\"\n").expect("valid");
    assert_eq!(codex.profile("x").expect("x").program(), ["codex"]);
    // Only in a profile: elsewhere it is just unknown.
    assert!(problems("[turns]\nmax_cost_usd = 5.0\n")[0].contains("unknown key"));
}

#[test]
fn only_close_names_are_suggested() {
    let known = field_names::<BridgeConfig>();
    assert_eq!(closest("lisen", known), Some("listen"));
    assert_eq!(closest("LISTEN", known), Some("listen"));
    assert_eq!(closest("retrywindow", known), Some("retry_window"));
    assert_eq!(closest("request_expiry_time", known), None);
    assert_eq!(closest("port", known), None);
    assert_eq!(closest("urn", &["url"]), Some("url"));
    assert_eq!(closest("tls", &["url"]), None);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "abc"), 3);
}

#[test]
fn empty_windows_programs_and_endless_retention_are_refused() {
    for (text, says) in [
        ("[bridge]\nretry_window = \"0s\"\n", "bridge.retry_window: must be more than 0"),
        ("[store]\nlease = \"500ms\"\n", "store.lease: must be between 1s and 10m"),
        ("[store]\nlease = \"1h\"\n", "store.lease: must be between 1s and 10m"),
        ("[profiles.a]\nexecutor = \"exec\"\ncommand = [\"\"]\n", "profiles.a.command"),
        ("[mailbox]\nkey_retention = \"18446744073709551615s\"\n", "mailbox.key_retention"),
    ] {
        let err = Config::parse(text).expect_err(text);
        assert!(err.to_string().contains(says), "{text}: {err}");
    }
}

#[test]
fn a_bridge_retry_window_outliving_the_targets_keys_is_refused() {
    let err = Config::parse("[bridge]\nretry_window = \"25h\"\n").expect_err("invalid");
    assert!(err.to_string().contains("bridge.retry_window: must be at most 24h"), "{err}");
    Config::parse("[bridge]\nretry_window = \"24h\"\n").expect("the limit itself is fine");
}

#[test]
fn pairing_requests_expire_after_a_day_unless_configured() {
    assert_eq!(Config::default().bridge.request_expiry, Duration::from_secs(24 * 3600));
    let set = Config::parse("[bridge]\nrequest_expiry = \"7d\"\n").expect("valid");
    assert_eq!(set.bridge.request_expiry, Duration::from_secs(7 * 24 * 3600));
    for bad in ["0s", "366d"] {
        let err = Config::parse(&format!("[bridge]\nrequest_expiry = \"{bad}\"\n")).expect_err("invalid");
        assert!(
            err.to_string().contains("bridge.request_expiry: must be more than 0 and at most 365d"),
            "{err}"
        );
    }
}

#[test]
fn a_config_file_is_read_up_to_1_mib() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("config.toml");
    // Spaces are an empty TOML document: only the size matters.
    std::fs::write(&file, " ".repeat(MAX_CONFIG_BYTES)).expect("write");
    Config::load(&file, true).expect("the limit itself is fine");
    std::fs::write(&file, " ".repeat(MAX_CONFIG_BYTES + 1)).expect("write");
    let err = Config::load(&file, true).expect_err("too large");
    assert_eq!(err.problems, ["larger than 1 MiB, the most a config file may hold"]);
    assert_eq!(err.source_name, Some(file.display().to_string()));
    // An endless file is refused too, instead of filling the memory.
    let err = Config::load(Path::new("/dev/zero"), true).expect_err("endless");
    assert_eq!(err.problems, ["larger than 1 MiB, the most a config file may hold"]);
}

#[test]
fn a_missing_file_is_an_error_only_when_named() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("absent.toml");
    Config::load(&file, false).expect("a missing default file is fine");
    let err = Config::load(&file, true).expect_err("a named file must exist");
    assert!(err.problems[0].starts_with("cannot read: "), "{err}");
    std::fs::write(&file, b"[store]\nurl = \"\xff\"\n").expect("write");
    let err = Config::load(&file, true).expect_err("not UTF-8");
    assert!(err.problems[0].starts_with("cannot read: not UTF-8"), "{err}");
    std::fs::write(&file, "[turns]\nmax_output_bytes = 0\n").expect("write");
    let err = Config::load(&file, true).expect_err("invalid");
    assert_eq!(
        err.to_string(),
        format!(
            "invalid configuration in {}:\n  - turns.max_output_bytes: must be at least 1",
            file.display()
        )
    );
}
