//! Reading a config file key by key, so that every mistake is reported at once, each with
//! its line and column and, for a misspelt name, the closest known one (learnt from the
//! typed config's serde fields, not from a list kept by hand).

use std::ops::Range;

use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use super::*;

pub(super) type Value<'t> = toml::Spanned<DeValue<'t>>;
pub(super) type Key<'t> = toml::Spanned<toml::de::DeString<'t>>;

/// Reads a config's sections key by key, gathering every problem.
pub(super) struct Reader<'t> {
    pub(super) text: &'t str,
    pub(super) problems: Vec<String>,
}

impl<'t> Reader<'t> {
    /// Reads the section at `path` into `slot`. Its valid keys are set even when others are
    /// not, so that [`Config::validate`] checks their values too.
    pub(super) fn section<T: Deserialize<'t> + Default>(
        &mut self,
        path: &str,
        value: Value<'t>,
        slot: &mut T,
    ) {
        if let Some(table) = self.table(path, value, "a table") {
            (*slot, _) = self.keys(path, table);
        }
    }

    /// Reads `[profiles.NAME]` tables. A profile with a bad or missing key is left out: the
    /// rules across its keys (a command per executor, one default) would only report
    /// knock-on mistakes.
    pub(super) fn profiles(&mut self, value: Value<'t>, profiles: &mut BTreeMap<String, ProfileConfig>) {
        let Some(table) = self.table("profiles", value, "a table of profiles") else { return };
        for (name, value) in in_file_order(table.into_inner()) {
            let name_span = name.span();
            let name = name.into_inner().into_owned();
            let path = format!("profiles.{name}");
            let Some(table) = self.table(&path, value, "a table") else { continue };
            // `executor` is required, but its serde default (there so that each key can be
            // checked on its own) would hide its absence.
            let has_executor = table.get_ref().contains_key("executor");
            if !has_executor {
                self.problems.push(format!("{path}.executor: {}required", place(self.text, Some(name_span))));
            }
            let (profile, all_valid) = self.keys::<ProfileConfig>(&path, table);
            if all_valid && has_executor {
                profiles.insert(name, profile);
            } else {
                // Left out of `Config::validate`, whose check of the name this would miss.
                self.problems.extend(profile_name_problem(&name));
            }
        }
    }

    /// The table at `path`; none if it is something else (the problem is noted, with its line).
    fn table(&mut self, path: &str, value: Value<'t>, expected: &str) -> Option<toml::Spanned<DeTable<'t>>> {
        let span = value.span();
        match value.into_inner() {
            DeValue::Table(table) => Some(toml::Spanned::new(span, table)),
            _ => {
                self.problems.push(format!("{path}: {}must be {expected}", place(self.text, Some(span))));
                None
            }
        }
    }

    /// Builds a `T` (a `#[serde(default)]` struct) from the keys of `table` at `path`, each
    /// checked on its own against `T`'s fields, and whether all of them were valid. Unknown
    /// keys and wrongly typed values are noted; the valid keys make the `T`.
    fn keys<T: Deserialize<'t> + Default>(
        &mut self,
        path: &str,
        table: toml::Spanned<DeTable<'t>>,
    ) -> (T, bool) {
        let known = field_names::<T>();
        let span = table.span();
        let mut valid = DeTable::new();
        let mut all_valid = true;
        for (key, value) in in_file_order(table.into_inner()) {
            let name: &str = key.get_ref();
            let key_path = format!("{path}.{name}");
            if !known.contains(&name) {
                self.unknown(&key_path, name, key.span(), "key", known, &[]);
                all_valid = false;
                continue;
            }
            let alone = DeTable::from_iter([(key.clone(), value.clone())]);
            match from_table::<T>(span.clone(), alone) {
                Ok(_) => {
                    valid.insert(key, value);
                }
                Err(e) => {
                    self.problems.push(format!("{key_path}: {}", located(self.text, &e)));
                    all_valid = false;
                }
            }
        }
        // Keys valid one by one are valid together: no struct here has rules across keys
        // in serde (those are `Config::validate`'s), so this is only a safety net.
        match from_table::<T>(span, valid) {
            Ok(section) => (section, all_valid),
            Err(e) => {
                self.problems.push(format!("{path}: {}", located(self.text, &e)));
                (T::default(), false)
            }
        }
    }

    /// Notes the unknown section or key `name` at `path`: not supported yet when it is one of
    /// kiki's config, else with the known name it most likely misspells, or all of them.
    pub(super) fn unknown(
        &mut self,
        path: &str,
        name: &str,
        span: Range<usize>,
        what: &str,
        known: &[&str],
        not_yet: &[&str],
    ) {
        let said = if not_yet.contains(&name) {
            format!(
                "not supported by this version of kikid yet (a {what} of kiki's config, not a typo); remove it"
            )
        } else if let Some(meant) = closest(name, known) {
            format!("unknown {what}; did you mean `{meant}`?")
        } else {
            let all: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
            format!("unknown {what}; the known ones are {}", all.join(", "))
        };
        self.problems.push(format!("{path}: {}{said}", place(self.text, Some(span))));
    }
}

pub(super) fn from_table<'t, T: Deserialize<'t>>(
    span: Range<usize>,
    table: DeTable<'t>,
) -> Result<T, toml::de::Error> {
    T::deserialize(ValueDeserializer::from(toml::Spanned::new(span, DeValue::Table(table))))
}

/// A table's entries in the order they are written (the table itself sorts them by name),
/// so problems are listed as one reads the file.
pub(super) fn in_file_order(table: DeTable<'_>) -> Vec<(Key<'_>, Value<'_>)> {
    let mut entries: Vec<_> = table.into_iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    entries
}

/// The field names of the struct `T`, learned from serde: its derived `Deserialize` hands
/// them to `deserialize_struct`, where this recorder keeps them (and refuses to go on). So
/// the known keys are never a list kept by hand beside the structs.
pub(super) fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct FieldRecorder<'r>(&'r mut &'static [&'static str]);

    impl<'de> serde::Deserializer<'de> for FieldRecorder<'_> {
        type Error = serde::de::value::Error;

        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(serde::de::Error::custom("only the field names were wanted"))
        }

        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not a struct"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    // Always an error: the recorder never builds a value, only the names matter.
    let _refused = T::deserialize(FieldRecorder(&mut fields));
    fields
}

/// The name in `known` that `name` most likely misspells: the nearest by edit distance
/// (letter case aside), if at most a third of its letters (1 to 3) are off, so a short
/// word is not "corrected" into an unrelated one.
pub(super) fn closest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    let name = name.to_lowercase();
    let length = name.chars().count();
    known
        .iter()
        .filter_map(|&candidate| {
            let limit = (candidate.chars().count() / 3).clamp(1, 3);
            // Lengths this far apart cannot be within the limit: spares a long key the work.
            if length.abs_diff(candidate.chars().count()) > limit {
                return None;
            }
            let distance = edit_distance(&name, candidate);
            (distance <= limit).then_some((distance, candidate))
        })
        .min()
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance: the fewest one-letter insertions, deletions and substitutions.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, from) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &to) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(from != to));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// "line L, column C: MESSAGE": one line per problem, so a list of them reads at a glance,
/// also in the tail of the log that `kiki up` shows.
pub(super) fn located(text: &str, e: &toml::de::Error) -> String {
    format!("{}{}", place(text, e.span()), e.message())
}

/// "line L, column C (`the line`): " for a byte range of the text, or nothing.
pub(super) fn place(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(at) = span.map(|s| s.start.min(text.len())) else { return String::new() };
    let (before, after) = text.split_at(text.floor_char_boundary(at));
    let line = before.matches('\n').count() + 1;
    let start = before.rsplit('\n').next().unwrap_or_default();
    let column = start.chars().count() + 1;
    let shown: String =
        format!("{start}{}", after.split('\n').next().unwrap_or_default()).trim().chars().take(60).collect();
    format!("line {line}, column {column} (`{shown}`): ")
}
