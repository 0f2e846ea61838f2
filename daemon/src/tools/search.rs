//! Finding files and text for a thread, with ripgrep's own crates (no `rg` process):
//! `Glob` walks a directory with ripgrep's walker (the `ignore` crate: `.gitignore`,
//! `.ignore` and `.rgignore` respected unless `include_ignored`), matches paths relative to
//! it against a glob (braces allowed) and pages the matches newest first; `Grep` searches
//! the files of the same walk (or one file) with ripgrep's searcher and regex engine, as
//! files, lines with their context, or counts, paged. Sensitive files (`.env` files,
//! private keys) are never listed or searched, ignored or not.

use std::path::Path;
use std::time::SystemTime;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::files::{FileToolError, resolve};

/// `Glob`'s page size unless asked otherwise.
pub const GLOB_DEFAULT_LIMIT: u64 = 100;

/// `Glob`'s arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// A glob over paths relative to `path` (`**/*.rs`, `src/*.{ts,tsx}`).
    pub pattern: String,
    /// The directory to search (default: the workspace).
    pub path: Option<String>,
    /// Also files that `.gitignore`, `.ignore` or `.rgignore` leave out.
    #[serde(default)]
    pub include_ignored: bool,
    /// Matches to skip (default 0), from a previous page's `next_offset`.
    pub offset: Option<u64>,
    /// The most matches to return (default 100; 0: no limit).
    pub head_limit: Option<u64>,
}

/// `Glob`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlobResult {
    /// The matching files, newest first.
    pub paths: Vec<String>,
    /// How many files matched in all.
    pub total: u64,
    /// The `offset` of the next page, if there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// What may have left the search incomplete (an unreadable directory).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `Glob`: the files under the directory matching the pattern, newest first, a page of them.
pub fn glob(cwd: &Path, args: &GlobArgs) -> Result<GlobResult, FileToolError> {
    let invalid = |field, message: String| FileToolError::Invalid { field, message };
    if args.pattern.is_empty() {
        return Err(invalid("pattern", "required".into()));
    }
    let matcher = globset::GlobBuilder::new(&args.pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| invalid("pattern", format!("not a glob: {}", e.kind())))?
        .compile_matcher();
    let root = match &args.path {
        Some(path) => resolve(cwd, path)?,
        None => cwd.to_path_buf(),
    };
    if !root.is_dir() {
        return Err(FileToolError::File {
            path: root.display().to_string(),
            message: "not a directory".into(),
        });
    }
    let (files, warnings) = files(walker(&root, args.include_ignored));
    let mut found: Vec<(SystemTime, String)> = files
        .iter()
        .filter(|entry| matcher.is_match(entry.path().strip_prefix(&root).unwrap_or(entry.path())))
        .map(|entry| {
            let modified =
                entry.metadata().ok().and_then(|m| m.modified().ok()).unwrap_or(SystemTime::UNIX_EPOCH);
            (modified, entry.path().display().to_string())
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let found = found.into_iter().map(|(_, path)| path).collect();
    let (paths, total, next_offset) = page(found, args.offset, args.head_limit, GLOB_DEFAULT_LIMIT);
    Ok(GlobResult { paths, total, next_offset, warnings })
}

/// ripgrep's walk of `root`: hidden files too (but not `.git`), ignore files respected
/// unless `include_ignored` (also outside a git repository).
fn walker(root: &Path, include_ignored: bool) -> ignore::WalkBuilder {
    let respect = !include_ignored;
    let mut walker = ignore::WalkBuilder::new(root);
    walker
        .hidden(false)
        .git_ignore(respect)
        .git_exclude(respect)
        .git_global(respect)
        .ignore(respect)
        .require_git(false)
        .add_custom_ignore_filename(".rgignore")
        .filter_entry(|entry| entry.file_name() != ".git");
    walker
}

/// The files of `walk` that may be listed or searched, and what went wrong on the way.
fn files(walk: ignore::WalkBuilder) -> (Vec<ignore::DirEntry>, Vec<String>) {
    // Walked on every core, as ripgrep walks (the order is the caller's to set).
    let found = std::sync::Mutex::new((Vec::new(), Vec::new()));
    walk.build_parallel().run(|| {
        let found = &found;
        Box::new(move |entry| {
            let mut found = found.lock().unwrap_or_else(|p| p.into_inner());
            match entry {
                Ok(entry)
                    if entry.file_type().is_some_and(|t| t.is_file()) && !is_sensitive(entry.path()) =>
                {
                    found.0.push(entry)
                }
                Ok(_) => {}
                Err(e) => found.1.push(e.to_string()),
            }
            ignore::WalkState::Continue
        })
    });
    found.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// The page of `items` from `offset` (default 0), at most `head_limit` (default `default`;
/// 0: no limit) long, with how many there are in all and the next page's offset.
fn page<T>(
    items: Vec<T>,
    offset: Option<u64>,
    head_limit: Option<u64>,
    default: u64,
) -> (Vec<T>, u64, Option<u64>) {
    let (total, offset) = (items.len() as u64, offset.unwrap_or(0));
    let limit = match head_limit.unwrap_or(default) {
        0 => usize::MAX,
        limit => usize::try_from(limit).unwrap_or(usize::MAX),
    };
    let items: Vec<T> =
        items.into_iter().skip(usize::try_from(offset).unwrap_or(usize::MAX)).take(limit).collect();
    let next = offset + items.len() as u64;
    (items, total, (next < total).then_some(next))
}

/// Files never listed or searched, whatever the ignore files say: environment files and
/// private keys.
pub fn is_sensitive(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return false };
    let name = name.to_ascii_lowercase();
    name == ".env"
        || (name.starts_with(".env.") && !name.ends_with(".example") && !name.ends_with(".sample"))
        || ["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"].contains(&name.as_str())
        || [".pem", ".key", ".p12", ".pfx"].iter().any(|suffix| name.ends_with(suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("dir");
        for (path, age) in
            [("src/a.rs", 30), ("src/b.rs", 10), ("src/c.ts", 20), ("src/d.tsx", 5), ("target/out.rs", 1)]
        {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
            std::fs::write(&path, "x").expect("write");
            let when = SystemTime::now() - std::time::Duration::from_secs(age * 60);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open")
                .set_modified(when)
                .expect("mtime");
        }
        std::fs::write(dir.path().join(".gitignore"), "target/\n").expect("gitignore");
        std::fs::write(dir.path().join(".env"), "SECRET=1").expect("env");
        std::fs::write(dir.path().join("server.key"), "key").expect("key");
        dir
    }

    fn names(result: &GlobResult, root: &Path) -> Vec<String> {
        let root = root.display().to_string();
        result
            .paths
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap_or(p).trim_start_matches('/').to_string())
            .collect()
    }

    fn args(pattern: &str) -> GlobArgs {
        GlobArgs { pattern: pattern.into(), ..Default::default() }
    }

    #[test]
    fn matches_are_newest_first_ignored_files_left_out_unless_asked() {
        let dir = tree();
        let found = glob(dir.path(), &args("**/*.rs")).expect("glob");
        assert_eq!(names(&found, dir.path()), ["src/b.rs", "src/a.rs"]);
        let all = glob(dir.path(), &GlobArgs { include_ignored: true, ..args("**/*.rs") }).expect("glob");
        assert_eq!(names(&all, dir.path()), ["target/out.rs", "src/b.rs", "src/a.rs"]);
        let braces = glob(dir.path(), &args("src/*.{ts,tsx}")).expect("glob");
        assert_eq!(names(&braces, dir.path()), ["src/d.tsx", "src/c.ts"]);
        assert!(glob(dir.path(), &args("*.rs")).expect("glob").paths.is_empty(), "* stops at a separator");
    }

    #[test]
    fn pages_follow_the_offset_and_sensitive_files_never_show() {
        let dir = tree();
        let first = glob(dir.path(), &GlobArgs { head_limit: Some(2), ..args("**/*") }).expect("glob");
        assert_eq!((first.paths.len(), first.next_offset), (2, Some(2)));
        let rest = glob(dir.path(), &GlobArgs { offset: Some(2), head_limit: Some(0), ..args("**/*") })
            .expect("glob");
        assert_eq!(rest.next_offset, None);
        let every: Vec<String> = [names(&first, dir.path()), names(&rest, dir.path())].concat();
        assert_eq!(every.len() as u64, first.total);
        assert!(every.iter().all(|p| p != ".env" && p != "server.key"), "{every:?}");
        let ignored_too =
            glob(dir.path(), &GlobArgs { include_ignored: true, ..args("**/*") }).expect("glob");
        assert!(names(&ignored_too, dir.path()).iter().all(|p| p != ".env" && p != "server.key"));
        let refused = glob(dir.path(), &args("src/[a.rs"));
        assert!(matches!(refused, Err(FileToolError::Invalid { field: "pattern", .. })), "{refused:?}");
    }
}

/// `Grep`'s page size unless asked otherwise.
pub const GREP_DEFAULT_LIMIT: u64 = 250;

/// `Grep`'s arguments (ripgrep's flags by their names).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// A regular expression (Rust's syntax, as ripgrep's).
    pub pattern: String,
    /// A file or directory to search (default: the workspace).
    pub path: Option<String>,
    /// Only files of this type (`rs`, `py`, `ts`…: ripgrep's type names).
    #[serde(rename = "type")]
    pub file_type: Option<String>,
    /// Only files matching this glob (`*.rs`, `!*.min.js`).
    pub glob: Option<String>,
    /// `files_with_matches` (default), `content` or `count_matches`.
    pub output_mode: Option<String>,
    /// Content mode: lines of context after, before, and both.
    #[serde(rename = "-A")]
    pub after: Option<u64>,
    #[serde(rename = "-B")]
    pub before: Option<u64>,
    #[serde(rename = "-C")]
    pub context: Option<u64>,
    #[serde(rename = "-i", default)]
    pub case_insensitive: bool,
    /// Content mode: line numbers (default true).
    #[serde(rename = "-n")]
    pub line_numbers: Option<bool>,
    /// Matches may span lines (`.` matches a newline too).
    #[serde(default)]
    pub multiline: bool,
    #[serde(default)]
    pub include_ignored: bool,
    /// Entries to skip (default 0), from a previous page's `next_offset`.
    pub offset: Option<u64>,
    /// The most entries to return (default 250; 0: no limit).
    pub head_limit: Option<u64>,
}

/// `Grep`'s answer: entries of its mode — paths, `path:line:text` lines (context lines as
/// `path-line-text`, `--` between separate groups), or `path:count`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrepResult {
    pub mode: &'static str,
    pub entries: Vec<String>,
    pub total: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `Grep`: the files (or lines, or counts) under the path that match the pattern, a page.
pub fn grep(cwd: &Path, args: &GrepArgs) -> Result<GrepResult, FileToolError> {
    use grep_searcher::{BinaryDetection, SearcherBuilder};
    let invalid = |field, message: String| FileToolError::Invalid { field, message };
    if args.pattern.is_empty() {
        return Err(invalid("pattern", "required".into()));
    }
    let mode = match args.output_mode.as_deref() {
        None | Some("files_with_matches") => "files_with_matches",
        Some("content") => "content",
        Some("count_matches") => "count_matches",
        Some(other) => {
            return Err(invalid(
                "output_mode",
                format!("files_with_matches, content or count_matches, got {other:?}"),
            ));
        }
    };
    let matcher = grep_regex::RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .multi_line(true)
        .dot_matches_new_line(args.multiline)
        .build(&args.pattern)
        .map_err(|e| invalid("pattern", format!("not a regular expression: {e}")))?;
    let root = match &args.path {
        Some(path) => resolve(cwd, path)?,
        None => cwd.to_path_buf(),
    };
    let mut walk = walker(&root, args.include_ignored);
    if let Some(file_type) = &args.file_type {
        let mut types = ignore::types::TypesBuilder::new();
        types.add_defaults();
        types.select(file_type);
        let types = types.build().map_err(|e| invalid("type", e.to_string()))?;
        walk.types(types);
    }
    if let Some(glob) = &args.glob {
        let mut overrides = ignore::overrides::OverrideBuilder::new(&root);
        overrides.add(glob).map_err(|e| invalid("glob", e.to_string()))?;
        walk.overrides(overrides.build().map_err(|e| invalid("glob", e.to_string()))?);
    }
    let content = mode == "content";
    let (before, after) = match args.context {
        Some(both) => (both, both),
        None => (args.before.unwrap_or(0), args.after.unwrap_or(0)),
    };
    let searcher = SearcherBuilder::new()
        .line_number(true)
        .multi_line(args.multiline)
        .before_context(if content { before as usize } else { 0 })
        .after_context(if content { after as usize } else { 0 })
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let numbered = args.line_numbers.unwrap_or(true);
    let (searched, mut warnings) = files(walk);
    // The files are searched on every core, as ripgrep does; each thread takes every n-th.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(searched.len().max(1));
    let found: Vec<(Vec<Matched>, Vec<String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let (searched, matcher, mut searcher) = (&searched, &matcher, searcher.clone());
                scope.spawn(move || {
                    let (mut files, mut warnings) = (Vec::new(), Vec::new());
                    for entry in searched.iter().skip(worker).step_by(threads) {
                        let shown = entry.path().display().to_string();
                        let mut sink =
                            Lines { path: &shown, numbered, lines: Vec::new(), matches: 0, last: None };
                        if let Err(e) = searcher.search_path(matcher, entry.path(), &mut sink) {
                            warnings.push(format!("{shown}: {e}"));
                            continue;
                        }
                        if sink.matches > 0 {
                            let (lines, matches) = (sink.lines, sink.matches);
                            files.push((shown, lines, matches));
                        }
                    }
                    (files, warnings)
                })
            })
            .collect();
        workers.into_iter().filter_map(|w| w.join().ok()).collect()
    });
    let mut files: Vec<Matched> = Vec::new();
    for (some, problems) in found {
        files.extend(some);
        warnings.extend(problems);
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let entries: Vec<String> = match mode {
        "files_with_matches" => files.into_iter().map(|(path, ..)| path).collect(),
        "count_matches" => files.into_iter().map(|(path, _, n)| format!("{path}:{n}")).collect(),
        _ => files.into_iter().flat_map(|(_, lines, _)| lines).collect(),
    };
    let (entries, total, next_offset) = page(entries, args.offset, args.head_limit, GREP_DEFAULT_LIMIT);
    Ok(GrepResult { mode, entries, total, next_offset, warnings })
}

/// A file that matched: its path as shown, its lines (content mode), its match count.
type Matched = (String, Vec<String>, u64);

/// One file's matching lines with their context, as ripgrep prints them.
struct Lines<'p> {
    path: &'p str,
    numbered: bool,
    lines: Vec<String>,
    matches: u64,
    /// The last line number printed, to mark a gap with `--`.
    last: Option<u64>,
}

impl Lines<'_> {
    fn push(&mut self, number: Option<u64>, separator: char, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        for (i, line) in text.trim_end_matches('\n').split('\n').enumerate() {
            let number = number.map(|n| n + i as u64);
            if let (Some(last), Some(n)) = (self.last, number)
                && n > last + 1
            {
                self.lines.push("--".into());
            }
            self.last = number.or(self.last);
            let line = line.strip_suffix('\r').unwrap_or(line);
            self.lines.push(match (self.numbered, number) {
                (true, Some(n)) => format!("{}{separator}{n}{separator}{line}", self.path),
                _ => format!("{}{separator}{line}", self.path),
            });
        }
    }
}

impl grep_searcher::Sink for Lines<'_> {
    type Error = std::io::Error;

    fn matched(
        &mut self,
        _: &grep_searcher::Searcher,
        found: &grep_searcher::SinkMatch<'_>,
    ) -> Result<bool, std::io::Error> {
        self.matches += 1;
        self.push(found.line_number(), ':', found.bytes());
        Ok(true)
    }

    fn context(
        &mut self,
        _: &grep_searcher::Searcher,
        context: &grep_searcher::SinkContext<'_>,
    ) -> Result<bool, std::io::Error> {
        self.push(context.line_number(), '-', context.bytes());
        Ok(true)
    }
}

#[cfg(test)]
mod grep_tests {
    use super::*;

    fn code() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("dir");
        let write = |path: &str, text: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
            std::fs::write(path, text).expect("write");
        };
        write("src/main.rs", "fn main() {\n    let answer = 42;\n    println!(\"{answer}\");\n}\n");
        write("src/lib.py", "ANSWER = 42\n");
        write("target/gen.rs", "let answer = 42;\n");
        write(".gitignore", "target/\n");
        write(".env", "ANSWER=42\n");
        write("blob.bin", "answer\0binary");
        dir
    }

    fn shown(result: &GrepResult, root: &Path) -> Vec<String> {
        let root = format!("{}/", root.display());
        result.entries.iter().map(|e| e.replace(&root, "")).collect()
    }

    fn args(pattern: &str) -> GrepArgs {
        GrepArgs { pattern: pattern.into(), ..Default::default() }
    }

    #[test]
    fn files_counts_and_lines_with_context_ignoring_what_is_ignored() {
        let dir = code();
        let files = grep(dir.path(), &args("answer")).expect("grep");
        assert_eq!(shown(&files, dir.path()), ["src/main.rs"], "case, ignore files, binary and .env");
        let any_case =
            grep(dir.path(), &GrepArgs { case_insensitive: true, ..args("answer") }).expect("grep");
        assert_eq!(shown(&any_case, dir.path()), ["src/lib.py", "src/main.rs"]);
        let counted =
            grep(dir.path(), &GrepArgs { output_mode: Some("count_matches".into()), ..args("answer") })
                .expect("grep");
        assert_eq!(shown(&counted, dir.path()), ["src/main.rs:2"]);
        let lines = GrepArgs { output_mode: Some("content".into()), before: Some(1), ..args("let answer") };
        assert_eq!(
            shown(&grep(dir.path(), &lines).expect("grep"), dir.path()),
            ["src/main.rs-1-fn main() {", "src/main.rs:2:    let answer = 42;"]
        );
        let ignored_too = GrepArgs { include_ignored: true, ..args("answer") };
        assert_eq!(
            shown(&grep(dir.path(), &ignored_too).expect("grep"), dir.path()),
            ["src/main.rs", "target/gen.rs"]
        );
    }

    #[test]
    fn types_globs_pages_and_bad_arguments() {
        let dir = code();
        let python = GrepArgs { file_type: Some("py".into()), case_insensitive: true, ..args("answer") };
        assert_eq!(shown(&grep(dir.path(), &python).expect("grep"), dir.path()), ["src/lib.py"]);
        let globbed = GrepArgs { glob: Some("*.rs".into()), case_insensitive: true, ..args("answer") };
        assert_eq!(shown(&grep(dir.path(), &globbed).expect("grep"), dir.path()), ["src/main.rs"]);
        let page = GrepArgs { case_insensitive: true, head_limit: Some(1), ..args("answer") };
        let first = grep(dir.path(), &page).expect("grep");
        assert_eq!((first.entries.len(), first.total, first.next_offset), (1, 2, Some(1)));
        let second = grep(dir.path(), &GrepArgs { offset: Some(1), ..page }).expect("grep");
        assert_eq!((second.entries.len(), second.next_offset), (1, None));
        assert!(matches!(grep(dir.path(), &args("(")), Err(FileToolError::Invalid { field: "pattern", .. })));
        let mode = GrepArgs { output_mode: Some("lines".into()), ..args("x") };
        assert!(matches!(grep(dir.path(), &mode), Err(FileToolError::Invalid { field: "output_mode", .. })));
        let multiline = GrepArgs {
            multiline: true,
            output_mode: Some("count_matches".into()),
            ..args("main\\(\\) \\{\n    let")
        };
        assert_eq!(shown(&grep(dir.path(), &multiline).expect("grep"), dir.path()), ["src/main.rs:1"]);
    }
}
