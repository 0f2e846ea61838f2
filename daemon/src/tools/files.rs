//! The file tools a home runs for its threads: `Read`, `Write` and `Edit`, in a thread's
//! workspace (a relative path is taken from it), with the limits and rules of the product's
//! "File Tools": a read returns at most 1,000 lines or 100 KB with a notice of what is left,
//! numbered, its line endings reported (a pure CRLF file reads as LF, and an edit of that
//! view keeps its CRLF); UTF-16 text is converted; a write creates missing parents; an edit
//! replaces one unique match unless asked to replace all.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most lines one `Read` returns.
pub const READ_MAX_LINES: u64 = 1_000;
/// The most bytes of text one `Read` returns.
pub const READ_MAX_BYTES: usize = 100 * 1024;

/// Why a file tool did nothing: the argument at fault (or the file) and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileToolError {
    #[error("{field}: {message}")]
    Invalid { field: &'static str, message: String },
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

fn invalid(field: &'static str, message: impl Into<String>) -> FileToolError {
    FileToolError::Invalid { field, message: message.into() }
}

fn file_error(path: &Path, message: impl std::fmt::Display) -> FileToolError {
    FileToolError::File { path: path.display().to_string(), message: message.to_string() }
}

/// `path` as the tool acts on it: relative ones from the workspace `cwd`.
pub fn resolve(cwd: &Path, path: &str) -> Result<PathBuf, FileToolError> {
    if path.is_empty() {
        return Err(invalid("path", "required"));
    }
    Ok(cwd.join(path))
}

/// `Read`'s arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    pub path: String,
    /// The first line to return, from 1; negative counts from the end (-1: the last line).
    pub line_offset: Option<i64>,
    /// The most lines to return (1-1000; default 1000).
    pub n_lines: Option<u64>,
}

/// How a file's lines end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LineEndings {
    Lf,
    /// Every line ends with CRLF: shown as LF; an edit keeps the CRLF.
    Crlf,
    /// Both: the `\r`s are shown, and must be matched as they are.
    Mixed,
    /// A single line without an ending.
    None,
}

/// `Read`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadResult {
    pub path: String,
    /// The lines, each as `NUMBER\tTEXT` (the number right-aligned in six columns): the
    /// answer's text, not repeated in its structured result (which says where they are).
    #[serde(skip)]
    pub content: String,
    /// The first line returned (from 1) and how many were.
    pub start_line: u64,
    pub lines: u64,
    pub total_lines: u64,
    pub line_endings: LineEndings,
    /// `utf-8`, `utf-16le` or `utf-16be` (the file's, shown converted).
    pub encoding: &'static str,
    /// What was left out and how to read on; absent when the rest of the file was returned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
    /// The `line_offset` that reads on from here, if anything is left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_line_offset: Option<u64>,
}

/// Extensions read with `ReadMediaFile` instead.
const MEDIA: &[&str] =
    &["png", "jpg", "jpeg", "gif", "webp", "bmp", "ico", "tiff", "heic", "mp4", "mov", "webm", "mkv", "avi"];

/// `Read`: lines of a text file, numbered, within the per-call limits.
pub fn read(cwd: &Path, args: &ReadArgs) -> Result<ReadResult, FileToolError> {
    let n_lines = args.n_lines.unwrap_or(READ_MAX_LINES);
    if !(1..=READ_MAX_LINES).contains(&n_lines) {
        return Err(invalid("n_lines", format!("must be between 1 and {READ_MAX_LINES}, got {n_lines}")));
    }
    if args.line_offset == Some(0) {
        return Err(invalid("line_offset", "lines count from 1 (or from -1, the last); got 0"));
    }
    let path = resolve(cwd, &args.path)?;
    let extension = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    if extension.as_deref().is_some_and(|e| MEDIA.contains(&e)) {
        return Err(file_error(&path, "an image or video: read it with ReadMediaFile"));
    }
    let bytes = std::fs::read(&path).map_err(|e| file_error(&path, e))?;
    let (text, encoding) =
        decode(&bytes).ok_or_else(|| file_error(&path, "not a text file (UTF-8 or UTF-16)"))?;
    let line_endings = line_endings(&text);
    let shown = if line_endings == LineEndings::Crlf { text.replace("\r\n", "\n") } else { text };
    let lines: Vec<&str> = shown.split_inclusive('\n').collect();
    let total = lines.len() as u64;
    let first = match args.line_offset.unwrap_or(1) {
        from_end if from_end < 0 => total.saturating_sub(from_end.unsigned_abs()) + 1,
        from_start => from_start as u64,
    }
    .max(1);
    let mut content = String::new();
    let mut returned = 0u64;
    let mut over_bytes = false;
    for (index, line) in lines.iter().enumerate().skip((first - 1) as usize).take(n_lines as usize) {
        let numbered = format!("{:>6}\t{}", index + 1, line.strip_suffix('\n').unwrap_or(line));
        if content.len() + numbered.len() + 1 > READ_MAX_BYTES {
            over_bytes = true;
            break;
        }
        content.push_str(&numbered);
        content.push('\n');
        returned += 1;
    }
    let next = first + returned;
    let left = total.saturating_sub(next - 1);
    let truncated = (left > 0).then(|| {
        let why = if over_bytes {
            "the 100 KB limit"
        } else if returned == n_lines {
            "n_lines"
        } else {
            "the limit"
        };
        format!("{left} more lines after line {} (cut at {why}); read on with line_offset={next}", next - 1)
    });
    Ok(ReadResult {
        path: path.display().to_string(),
        content,
        start_line: first,
        lines: returned,
        total_lines: total,
        line_endings,
        encoding,
        next_line_offset: truncated.is_some().then_some(next),
        truncated,
    })
}

/// The text of `bytes`: UTF-8 (a BOM dropped), or UTF-16 with its BOM, or none.
fn decode(bytes: &[u8]) -> Option<(String, &'static str)> {
    let utf16 = |rest: &[u8], from: fn([u8; 2]) -> u16| {
        let units: Vec<u16> = rest.chunks_exact(2).map(|c| from([c[0], c[1]])).collect();
        String::from_utf16(&units).ok()
    };
    match bytes {
        [0xFF, 0xFE, rest @ ..] => Some((utf16(rest, u16::from_le_bytes)?, "utf-16le")),
        [0xFE, 0xFF, rest @ ..] => Some((utf16(rest, u16::from_be_bytes)?, "utf-16be")),
        [0xEF, 0xBB, 0xBF, rest @ ..] => Some((String::from_utf8(rest.to_vec()).ok()?, "utf-8")),
        _ if bytes.contains(&0) => None,
        _ => Some((String::from_utf8(bytes.to_vec()).ok()?, "utf-8")),
    }
}

fn line_endings(text: &str) -> LineEndings {
    let newlines = text.matches('\n').count();
    let crlfs = text.matches("\r\n").count();
    match (newlines, crlfs) {
        (0, _) => LineEndings::None,
        (n, c) if c == n => LineEndings::Crlf,
        (_, 0) => LineEndings::Lf,
        _ => LineEndings::Mixed,
    }
}

/// `Write`'s arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    pub path: String,
    pub content: String,
    /// `overwrite` (default) or `append` (no newline added).
    pub mode: Option<String>,
}

/// `Write`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriteResult {
    pub path: String,
    pub bytes_written: u64,
    pub appended: bool,
}

/// `Write`: creates or overwrites a file (or appends to it), creating missing parents.
pub fn write(cwd: &Path, args: &WriteArgs) -> Result<WriteResult, FileToolError> {
    let append = match args.mode.as_deref() {
        None | Some("overwrite") => false,
        Some("append") => true,
        Some(other) => return Err(invalid("mode", format!("overwrite or append, got {other:?}"))),
    };
    let path = resolve(cwd, &args.path)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| file_error(parent, e))?;
    }
    let written = if append {
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(args.content.as_bytes()))
    } else {
        std::fs::write(&path, &args.content)
    };
    written.map_err(|e| file_error(&path, e))?;
    Ok(WriteResult {
        path: path.display().to_string(),
        bytes_written: args.content.len() as u64,
        appended: append,
    })
}

/// `Edit`'s arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// `Edit`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EditResult {
    pub path: String,
    pub replacements: u64,
}

/// `Edit`: replaces `old_string` with `new_string` — its one match, or every match with
/// `replace_all` — in the file as `Read` shows it (a pure CRLF file as LF, written back
/// with its CRLF).
pub fn edit(cwd: &Path, args: &EditArgs) -> Result<EditResult, FileToolError> {
    if args.old_string.is_empty() {
        return Err(invalid("old_string", "required (the exact text to replace)"));
    }
    if args.old_string == args.new_string {
        return Err(invalid("new_string", "identical to old_string: nothing would change"));
    }
    let path = resolve(cwd, &args.path)?;
    let text = std::fs::read_to_string(&path).map_err(|e| file_error(&path, e))?;
    let crlf = line_endings(&text) == LineEndings::Crlf;
    let shown = if crlf { text.replace("\r\n", "\n") } else { text };
    let matches = shown.matches(&args.old_string).count() as u64;
    match matches {
        0 => return Err(invalid("old_string", format!("not found in {}", path.display()))),
        n if n > 1 && !args.replace_all => {
            return Err(invalid(
                "old_string",
                format!("found {n} times in {}: make it unique, or set replace_all: true", path.display()),
            ));
        }
        _ => {}
    }
    let edited = match args.replace_all {
        true => shown.replace(&args.old_string, &args.new_string),
        false => shown.replacen(&args.old_string, &args.new_string, 1),
    };
    let edited = if crlf { edited.replace('\n', "\r\n") } else { edited };
    std::fs::write(&path, edited).map_err(|e| file_error(&path, e))?;
    Ok(EditResult { path: path.display().to_string(), replacements: matches })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_of(dir: &Path, path: &str, line_offset: Option<i64>, n_lines: Option<u64>) -> ReadResult {
        read(dir, &ReadArgs { path: path.into(), line_offset, n_lines }).expect("read")
    }

    #[test]
    fn a_read_numbers_lines_and_pages_from_either_end() {
        let dir = tempfile::tempdir().expect("dir");
        let text: String = (1..=5).map(|n| format!("line {n}\n")).collect();
        std::fs::write(dir.path().join("five.txt"), text).expect("write");
        let whole = read_of(dir.path(), "five.txt", None, None);
        assert_eq!((whole.start_line, whole.lines, whole.total_lines), (1, 5, 5));
        assert!(whole.content.starts_with("     1\tline 1\n     2\tline 2\n"), "{}", whole.content);
        assert_eq!((whole.truncated, whole.line_endings, whole.encoding), (None, LineEndings::Lf, "utf-8"));
        let middle = read_of(dir.path(), "five.txt", Some(2), Some(2));
        assert_eq!(middle.content, "     2\tline 2\n     3\tline 3\n");
        assert_eq!(middle.next_line_offset, Some(4));
        assert!(
            middle
                .truncated
                .as_deref()
                .is_some_and(|t| t.contains("2 more lines") && t.contains("line_offset=4"))
        );
        let last_two = read_of(dir.path(), "five.txt", Some(-2), None);
        assert_eq!(last_two.content, "     4\tline 4\n     5\tline 5\n");
    }

    #[test]
    fn a_read_stops_at_a_thousand_lines_or_a_hundred_kilobytes() {
        let dir = tempfile::tempdir().expect("dir");
        let many: String = (1..=1_500).map(|n| format!("{n}\n")).collect();
        std::fs::write(dir.path().join("many.txt"), many).expect("write");
        let page = read_of(dir.path(), "many.txt", None, None);
        assert_eq!((page.lines, page.next_line_offset), (1_000, Some(1_001)));
        let wide: String = (0..400).map(|_| format!("{}\n", "x".repeat(999))).collect();
        std::fs::write(dir.path().join("wide.txt"), wide).expect("write");
        let page = read_of(dir.path(), "wide.txt", None, None);
        assert!(page.content.len() <= READ_MAX_BYTES && page.lines < 400, "{}", page.lines);
        assert!(page.truncated.as_deref().is_some_and(|t| t.contains("100 KB")), "{:?}", page.truncated);
        for (n_lines, offset) in [(Some(0), None), (Some(1_001), None), (None, Some(0))] {
            let refused =
                read(dir.path(), &ReadArgs { path: "many.txt".into(), line_offset: offset, n_lines });
            assert!(matches!(refused, Err(FileToolError::Invalid { .. })), "{refused:?}");
        }
    }

    #[test]
    fn crlf_reads_as_lf_utf16_is_converted_and_media_and_binary_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("dos.txt"), "a\r\nb\r\n").expect("write");
        let dos = read_of(dir.path(), "dos.txt", None, None);
        assert_eq!((dos.content.as_str(), dos.line_endings), ("     1\ta\n     2\tb\n", LineEndings::Crlf));
        std::fs::write(dir.path().join("mixed.txt"), "a\r\nb\n").expect("write");
        let mixed = read_of(dir.path(), "mixed.txt", None, None);
        assert_eq!(
            (mixed.content.as_str(), mixed.line_endings),
            ("     1\ta\r\n     2\tb\n", LineEndings::Mixed)
        );
        let mut utf16 = vec![0xFF, 0xFE];
        utf16.extend("héllo\n".encode_utf16().flat_map(u16::to_le_bytes));
        std::fs::write(dir.path().join("wide.txt"), utf16).expect("write");
        let wide = read_of(dir.path(), "wide.txt", None, None);
        assert_eq!((wide.content.as_str(), wide.encoding), ("     1\théllo\n", "utf-16le"));
        std::fs::write(dir.path().join("photo.PNG"), [0x89, b'P', b'N', b'G']).expect("write");
        let photo = read(dir.path(), &ReadArgs { path: "photo.PNG".into(), ..Default::default() });
        assert!(photo.is_err_and(|e| e.to_string().contains("ReadMediaFile")));
        std::fs::write(dir.path().join("blob.bin"), [0u8, 1, 2]).expect("write");
        let blob = read(dir.path(), &ReadArgs { path: "blob.bin".into(), ..Default::default() });
        assert!(blob.is_err_and(|e| e.to_string().contains("not a text file")));
    }

    #[test]
    fn write_creates_parents_and_appends_without_a_newline() {
        let dir = tempfile::tempdir().expect("dir");
        let args = |content: &str, mode: Option<&str>| WriteArgs {
            path: "deep/er/notes.txt".into(),
            content: content.into(),
            mode: mode.map(str::to_string),
        };
        write(dir.path(), &args("one", None)).expect("write");
        let appended = write(dir.path(), &args("two", Some("append"))).expect("append");
        assert!(appended.appended);
        assert_eq!(std::fs::read_to_string(dir.path().join("deep/er/notes.txt")).expect("read"), "onetwo");
        write(dir.path(), &args("three", Some("overwrite"))).expect("overwrite");
        assert_eq!(std::fs::read_to_string(dir.path().join("deep/er/notes.txt")).expect("read"), "three");
        let refused = write(dir.path(), &args("x", Some("prepend")));
        assert_eq!(refused.map(|_| ()), Err(invalid("mode", "overwrite or append, got \"prepend\"")));
    }

    #[test]
    fn edit_replaces_one_unique_match_or_all_and_keeps_crlf() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("code.rs");
        std::fs::write(&file, "let a = 1;\r\nlet b = 1;\r\n").expect("write");
        let args = |old: &str, new: &str, all: bool| EditArgs {
            path: "code.rs".into(),
            old_string: old.into(),
            new_string: new.into(),
            replace_all: all,
        };
        let twice = edit(dir.path(), &args("= 1;", "= 2;", false)).expect_err("ambiguous");
        assert!(twice.to_string().contains("found 2 times") && twice.to_string().contains("replace_all"));
        assert_eq!(
            edit(dir.path(), &args("x", "x", false)).map(|_| ()),
            Err(invalid("new_string", "identical to old_string: nothing would change"))
        );
        assert!(
            edit(dir.path(), &args("nowhere", "y", false))
                .is_err_and(|e| e.to_string().contains("not found"))
        );
        // The LF view of a CRLF file is what is matched; the CRLF stays.
        edit(dir.path(), &args("let a = 1;\nlet b", "let a = 3;\nlet c", false)).expect("edit");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "let a = 3;\r\nlet c = 1;\r\n");
        let all = edit(dir.path(), &args("let", "const", true)).expect("edit all");
        assert_eq!(all.replacements, 2);
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "const a = 3;\r\nconst c = 1;\r\n");
    }
}
