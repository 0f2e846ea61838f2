//! Finding files for a thread: `Glob` walks a directory with ripgrep's own walker (the
//! `ignore` crate: `.gitignore`, `.ignore` and `.rgignore` respected unless
//! `include_ignored`), matches paths relative to it against a glob (braces allowed), and
//! pages the matches newest first. Sensitive files (`.env` files, private keys) are never
//! listed, ignored or not.

use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::files::{FileToolError, resolve};

/// `Glob`'s page size unless asked otherwise.
pub const GLOB_DEFAULT_LIMIT: u64 = 100;

/// `Glob`'s arguments.
#[derive(Debug, Clone, Default, Deserialize)]
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
    let respect = !args.include_ignored;
    let walker = ignore::WalkBuilder::new(&root)
        .hidden(false)
        .git_ignore(respect)
        .git_exclude(respect)
        .git_global(respect)
        .ignore(respect)
        .require_git(false)
        .add_custom_ignore_filename(".rgignore")
        .filter_entry(|entry| entry.file_name() != ".git")
        .build();
    let mut found: Vec<(SystemTime, String)> = Vec::new();
    let mut warnings = Vec::new();
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                warnings.push(e.to_string());
                continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) || is_sensitive(entry.path()) {
            continue;
        }
        let relative = entry.path().strip_prefix(&root).unwrap_or(entry.path());
        if matcher.is_match(relative) {
            let modified =
                entry.metadata().ok().and_then(|m| m.modified().ok()).unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((modified, entry.path().display().to_string()));
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len() as u64;
    let offset = args.offset.unwrap_or(0);
    let limit = match args.head_limit.unwrap_or(GLOB_DEFAULT_LIMIT) {
        0 => u64::MAX,
        limit => limit,
    };
    let paths: Vec<String> = found
        .into_iter()
        .skip(offset as usize)
        .take(limit.min(usize::MAX as u64) as usize)
        .map(|(_, p)| p)
        .collect();
    let next = offset + paths.len() as u64;
    Ok(GlobResult { next_offset: (next < total).then_some(next), paths, total, warnings })
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
