//! `TodoList`: a thread's execution list and working notes, two domains updated apart. The
//! list is replaced whole; the notes change section by section. Limits: a section 1,500
//! characters, all notes 7,500 (a call over either changes nothing). Kept in the store as
//! one document with a revision; a write answers with a receipt, `{}` reads both.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;

use super::{Output, ToolContext, ToolError};

pub const SECTION_MAX_CHARS: usize = 1_500;
pub const NOTES_MAX_CHARS: usize = 7_500;
/// The sections notes may have.
pub const SECTIONS: &[&str] =
    &["goal", "directives", "decided", "rejected", "evidence", "files", "next", "open"];
/// Beyond the product's limits, so a list stays a list: items, and one item's title.
pub const TODOS_MAX: usize = 100;
pub const TITLE_MAX_CHARS: usize = 500;

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoArgs {
    /// The whole new list (omitted: unchanged; `[]` clears it).
    pub todos: Option<Vec<Todo>>,
    /// The sections to change (a string replaces one, "" deletes it); `null` clears all notes;
    /// omitted or `{}`: unchanged.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub notes: Option<Option<BTreeMap<String, String>>>,
    /// Acknowledges that the handoff and human input were checked against the notes.
    #[serde(default)]
    pub review_handoff: bool,
}

/// A field given as `null` (`Some(None)`) apart from one left out (`None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    pub title: String,
    pub status: TodoStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Done,
}

/// What a thread keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Notebook {
    #[serde(default)]
    pub todos: Vec<Todo>,
    #[serde(default)]
    pub notes: BTreeMap<String, String>,
}

/// What a write changed, for its receipt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    pub changed: Vec<String>,
    pub cleared: Vec<String>,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.cleared.is_empty()
    }
}

/// The notebook after `args`, and what changed; an error (changing nothing) if any part
/// breaks a rule.
pub fn apply(current: &Notebook, args: &TodoArgs) -> Result<(Notebook, Change), ToolError> {
    let mut next = current.clone();
    let mut change = Change::default();
    if let Some(todos) = &args.todos {
        if todos.len() > TODOS_MAX {
            return Err(ToolError::invalid(
                "todos",
                format!("at most {TODOS_MAX} items, got {}", todos.len()),
            ));
        }
        for (i, todo) in todos.iter().enumerate() {
            let chars = todo.title.chars().count();
            if todo.title.trim().is_empty() || chars > TITLE_MAX_CHARS {
                return Err(ToolError::invalid(
                    format!("todos[{i}].title"),
                    format!("1-{TITLE_MAX_CHARS} characters, got {chars}"),
                ));
            }
        }
        if *todos != current.todos {
            change.changed.push("todos".into());
        }
        next.todos = todos.clone();
    }
    match &args.notes {
        None => {}
        Some(None) => {
            for section in current.notes.keys() {
                change.cleared.push(format!("notes.{section}"));
            }
            next.notes.clear();
        }
        Some(Some(sections)) => {
            for (section, text) in sections {
                if !SECTIONS.contains(&section.as_str()) {
                    return Err(ToolError::invalid(
                        format!("notes.{section}"),
                        format!("no such section; the sections are {}", SECTIONS.join(", ")),
                    ));
                }
                let chars = text.chars().count();
                if chars > SECTION_MAX_CHARS {
                    return Err(ToolError::invalid(
                        format!("notes.{section}"),
                        format!("at most {SECTION_MAX_CHARS} characters, got {chars}"),
                    ));
                }
                if text.is_empty() {
                    if next.notes.remove(section).is_some() {
                        change.cleared.push(format!("notes.{section}"));
                    }
                } else if next.notes.insert(section.clone(), text.clone()).as_deref() != Some(text) {
                    change.changed.push(format!("notes.{section}"));
                }
            }
        }
    }
    let total: usize = next.notes.values().map(|t| t.chars().count()).sum();
    if total > NOTES_MAX_CHARS {
        return Err(ToolError::invalid(
            "notes",
            format!("at most {NOTES_MAX_CHARS} characters in all, would be {total}"),
        ));
    }
    Ok((next, change))
}

/// `TodoList`.
pub async fn todo_list(context: &ToolContext, args: TodoArgs) -> Result<Output, ToolError> {
    let thread = &context.thread.id;
    // A write that raced another is made again on what that one left.
    for _ in 0..5 {
        let stored = context.store.todo(thread).await?;
        let (revision, current) = match &stored {
            Some(r) => (r.revision, serde_json::from_str(&r.body).unwrap_or_default()),
            None => (0, Notebook::default()),
        };
        let (next, change) = apply(&current, &args)?;
        let reading = args.todos.is_none() && args.notes.is_none();
        if reading || change.is_empty() {
            return Ok(contents(&next, revision, reading));
        }
        let body = serde_json::to_string(&next).unwrap_or_default();
        if context.store.put_todo(thread, revision, &body).await? {
            return Ok(receipt(&next, revision + 1, &change, args.review_handoff));
        }
    }
    Err(ToolError::Failed("the todo list kept changing under this write; read it and try again".into()))
}

fn counts(notebook: &Notebook) -> serde_json::Value {
    let count = |status| notebook.todos.iter().filter(|t| t.status == status).count();
    json!({
        "pending": count(TodoStatus::Pending),
        "in_progress": count(TodoStatus::InProgress),
        "done": count(TodoStatus::Done),
    })
}

fn characters(notebook: &Notebook) -> serde_json::Value {
    let mut sections: serde_json::Map<String, serde_json::Value> =
        notebook.notes.iter().map(|(s, t)| (s.clone(), json!(t.chars().count()))).collect();
    sections.insert("total".into(), json!(notebook.notes.values().map(|t| t.chars().count()).sum::<usize>()));
    serde_json::Value::Object(sections)
}

fn contents(notebook: &Notebook, revision: i64, reading: bool) -> Output {
    let mut result = json!({
        "revision": revision,
        "todos": notebook.todos,
        "notes": notebook.notes,
        "counts": counts(notebook),
    });
    if !reading {
        result["changed"] = json!([]);
    }
    Output::json(&result)
}

fn receipt(notebook: &Notebook, revision: i64, change: &Change, review_handoff: bool) -> Output {
    Output::json(&json!({
        "revision": revision,
        "changed": change.changed,
        "cleared": change.cleared,
        "characters": characters(notebook),
        "counts": counts(notebook),
        "review_handoff": review_handoff,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: serde_json::Value) -> TodoArgs {
        serde_json::from_value(value).expect("todo test")
    }

    #[test]
    fn notes_change_by_section_and_null_clears_them_all() {
        let (one, change) =
            apply(&Notebook::default(), &args(json!({"notes": {"goal": "ship", "next": "test"}})))
                .expect("todo test");
        assert_eq!(change.changed, ["notes.goal", "notes.next"]);
        let (two, change) = apply(&one, &args(json!({"notes": {"next": ""}}))).expect("todo test");
        assert_eq!(change.cleared, ["notes.next"]);
        assert_eq!(two.notes.keys().collect::<Vec<_>>(), ["goal"]);
        let (same, change) = apply(&two, &args(json!({"notes": {}}))).expect("todo test");
        assert!(change.is_empty());
        assert_eq!(same, two);
        let (empty, change) = apply(&two, &args(json!({"notes": null}))).expect("todo test");
        assert!(empty.notes.is_empty());
        assert_eq!(change.cleared, ["notes.goal"]);
    }

    #[test]
    fn todos_are_replaced_whole_and_the_notes_stay() {
        let (one, _) =
            apply(&Notebook::default(), &args(json!({"notes": {"goal": "g"}}))).expect("todo test");
        let (two, change) = apply(
            &one,
            &args(json!({"todos": [{"title": "a", "status": "pending"}, {"title": "b", "status": "in_progress"}]})),
        )
        .expect("todo test");
        assert_eq!(change.changed, ["todos"]);
        assert_eq!(two.notes, one.notes);
        let (three, _) = apply(&two, &args(json!({"todos": []}))).expect("todo test");
        assert!(three.todos.is_empty());
        assert_eq!(three.notes, one.notes);
    }

    #[test]
    fn a_call_over_a_limit_changes_neither_domain() {
        let over = "x".repeat(SECTION_MAX_CHARS + 1);
        let e = apply(
            &Notebook::default(),
            &args(json!({"todos": [{"title": "a", "status": "done"}], "notes": {"goal": over}})),
        )
        .expect_err("refused");
        assert_eq!(e, ToolError::invalid("notes.goal", "at most 1500 characters, got 1501"));
        let full = "y".repeat(SECTION_MAX_CHARS);
        let five: serde_json::Map<_, _> = ["goal", "directives", "decided", "rejected", "evidence"]
            .iter()
            .map(|s| (s.to_string(), json!(full)))
            .collect();
        let (at_limit, _) = apply(&Notebook::default(), &args(json!({"notes": five}))).expect("todo test");
        let e = apply(&at_limit, &args(json!({"notes": {"next": "z"}}))).expect_err("refused");
        assert_eq!(e, ToolError::invalid("notes", "at most 7500 characters in all, would be 7501"));
        let e = apply(&Notebook::default(), &args(json!({"notes": {"mood": "ok"}}))).expect_err("refused");
        assert!(matches!(e, ToolError::Invalid { field, .. } if field == "notes.mood"));
        assert!(
            serde_json::from_value::<TodoArgs>(json!({"todos": [{"title": "a", "status": "later"}]}))
                .is_err()
        );
    }
}
