//! The protobuf contract as older peers and clients rely on it, and the test that keeps it.
//!
//! `baseline/descriptors.txt` is the committed record of both packages (`kiki.v1`, the
//! local API; `kiki.bridge.v1`, the protocol between homes): every message's fields by
//! number (name, label, type, oneof), every enum's values, every service's methods. The
//! test reads the descriptors this build compiled and fails, naming each one, on what would
//! break a program built against the baseline: a package, message, enum, service or method
//! gone; a field or enum value gone, renamed or renumbered; a field's type, label or oneof
//! changed. What is added passes (and is listed on stderr, to record when it ships).
//!
//! A field whose message or enum type is renamed passes when the new type has the old one's
//! shape (the same fields or values, recursively): the bytes on the wire are unchanged.
//!
//! A break made on purpose (or additions to record) is written into the baseline with
//! `KIKI_UPDATE_PROTO_BASELINE=1 cargo test -p kiki-proto --lib compat`; the diff of
//! `baseline/descriptors.txt` then shows what changed, for review.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label as ProtoLabel, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};

const BASELINE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/baseline/descriptors.txt");
const UPDATE_VAR: &str = "KIKI_UPDATE_PROTO_BASELINE";

/// Everything of the packages a peer or client depends on, keyed by full name (no leading
/// dot).
#[derive(Debug, Default, PartialEq, Eq)]
struct Contract {
    packages: BTreeSet<String>,
    messages: BTreeMap<String, BTreeMap<i32, Field>>,
    enums: BTreeMap<String, BTreeMap<i32, String>>,
    services: BTreeMap<String, BTreeMap<String, Method>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Field {
    name: String,
    /// `singular`, `optional` (proto3 explicit presence) or `repeated`.
    label: String,
    /// A scalar's name (`string`, `uint64`…) or a message's or enum's full name with its
    /// leading dot.
    ty: String,
    /// The real oneof the field belongs to (not proto3 `optional`'s synthetic one).
    oneof: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Method {
    input: String,
    output: String,
    client_streaming: bool,
    server_streaming: bool,
}

impl Contract {
    fn from_descriptors(set: &FileDescriptorSet) -> Self {
        let mut contract = Contract::default();
        for file in &set.file {
            let package = file.package().to_string();
            contract.packages.insert(package.clone());
            for message in &file.message_type {
                contract.add_message(&package, message);
            }
            for e in &file.enum_type {
                contract.add_enum(&format!("{package}.{}", e.name()), e);
            }
            for service in &file.service {
                let methods = service
                    .method
                    .iter()
                    .map(|m| {
                        let method = Method {
                            input: m.input_type().to_string(),
                            output: m.output_type().to_string(),
                            client_streaming: m.client_streaming(),
                            server_streaming: m.server_streaming(),
                        };
                        (m.name().to_string(), method)
                    })
                    .collect();
                contract.services.insert(format!("{package}.{}", service.name()), methods);
            }
        }
        contract
    }

    fn add_message(&mut self, scope: &str, message: &DescriptorProto) {
        let name = format!("{scope}.{}", message.name());
        let fields = message
            .field
            .iter()
            .map(|f| {
                let label = match f.label() {
                    ProtoLabel::Repeated => "repeated",
                    _ if f.proto3_optional() => "optional",
                    _ => "singular",
                };
                let ty = match f.r#type() {
                    Type::Message | Type::Enum | Type::Group => f.type_name().to_string(),
                    scalar => scalar.as_str_name().trim_start_matches("TYPE_").to_ascii_lowercase(),
                };
                let oneof = f
                    .oneof_index
                    .filter(|_| !f.proto3_optional())
                    .and_then(|i| message.oneof_decl.get(i as usize))
                    .map(|o| o.name().to_string());
                (f.number(), Field { name: f.name().to_string(), label: label.into(), ty, oneof })
            })
            .collect();
        self.messages.insert(name.clone(), fields);
        for nested in &message.nested_type {
            self.add_message(&name, nested);
        }
        for e in &message.enum_type {
            self.add_enum(&format!("{name}.{}", e.name()), e);
        }
    }

    fn add_enum(&mut self, name: &str, e: &prost_types::EnumDescriptorProto) {
        let values = e.value.iter().map(|v| (v.number(), v.name().to_string())).collect();
        self.enums.insert(name.to_string(), values);
    }

    /// The baseline's text: one line per package, message, enum and service, each followed
    /// by its fields, values or methods, indented, in a stable order.
    fn render(&self) -> String {
        let mut out = String::from(
            "# The kiki.v1 and kiki.bridge.v1 contract that older peers and clients rely on.\n\
             # Checked by `cargo test -p kiki-proto` (src/compat.rs); rewritten, after a change\n\
             # made on purpose, with KIKI_UPDATE_PROTO_BASELINE=1 cargo test -p kiki-proto --lib compat\n",
        );
        for package in &self.packages {
            let _ = writeln!(out, "package {package}");
        }
        for (name, fields) in &self.messages {
            let _ = writeln!(out, "message {name}");
            for (number, f) in fields {
                let oneof = f.oneof.as_ref().map_or(String::new(), |o| format!(" oneof {o}"));
                let _ = writeln!(out, "  {number} {} {} {}{oneof}", f.name, f.label, f.ty);
            }
        }
        for (name, values) in &self.enums {
            let _ = writeln!(out, "enum {name}");
            for (number, value) in values {
                let _ = writeln!(out, "  {number} {value}");
            }
        }
        for (name, methods) in &self.services {
            let _ = writeln!(out, "service {name}");
            for (method, m) in methods {
                let stream = |s: bool| if s { "stream " } else { "" };
                let _ = writeln!(
                    out,
                    "  {method} {}{} {}{}",
                    stream(m.client_streaming),
                    m.input,
                    stream(m.server_streaming),
                    m.output
                );
            }
        }
        out
    }

    /// The contract a baseline's text records.
    fn parse(text: &str) -> Result<Self, String> {
        enum Section {
            None,
            Message(String),
            Enum(String),
            Service(String),
        }
        let mut contract = Contract::default();
        let mut section = Section::None;
        for (i, line) in text.lines().enumerate() {
            let bad = || format!("baseline line {}: {line:?}", i + 1);
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            if !line.starts_with(' ') {
                let [kind, name] = words[..] else { return Err(bad()) };
                section = match kind {
                    "package" => {
                        contract.packages.insert(name.to_string());
                        Section::None
                    }
                    "message" => {
                        contract.messages.insert(name.to_string(), BTreeMap::new());
                        Section::Message(name.to_string())
                    }
                    "enum" => {
                        contract.enums.insert(name.to_string(), BTreeMap::new());
                        Section::Enum(name.to_string())
                    }
                    "service" => {
                        contract.services.insert(name.to_string(), BTreeMap::new());
                        Section::Service(name.to_string())
                    }
                    _ => return Err(bad()),
                };
                continue;
            }
            match &section {
                Section::Message(message) => {
                    let (number, name, label, ty, oneof) = match words[..] {
                        [number, name, label, ty] => (number, name, label, ty, None),
                        [number, name, label, ty, "oneof", oneof] => {
                            (number, name, label, ty, Some(oneof.to_string()))
                        }
                        _ => return Err(bad()),
                    };
                    let number = number.parse().map_err(|_| bad())?;
                    let field = Field { name: name.into(), label: label.into(), ty: ty.into(), oneof };
                    contract.messages.entry(message.clone()).or_default().insert(number, field);
                }
                Section::Enum(e) => {
                    let [number, value] = words[..] else { return Err(bad()) };
                    let number = number.parse().map_err(|_| bad())?;
                    contract.enums.entry(e.clone()).or_default().insert(number, value.to_string());
                }
                Section::Service(service) => {
                    let (name, rest) = words.split_first().ok_or_else(bad)?;
                    let (client_streaming, rest) = match rest {
                        ["stream", rest @ ..] => (true, rest),
                        rest => (false, rest),
                    };
                    let (input, server_streaming, output) = match rest {
                        [input, "stream", output] => (input, true, output),
                        [input, output] => (input, false, output),
                        _ => return Err(bad()),
                    };
                    let method = Method {
                        input: input.to_string(),
                        output: output.to_string(),
                        client_streaming,
                        server_streaming,
                    };
                    contract.services.entry(service.clone()).or_default().insert(name.to_string(), method);
                }
                Section::None => return Err(bad()),
            }
        }
        Ok(contract)
    }
}

/// What `new` breaks of `old`, each named.
fn breaks(old: &Contract, new: &Contract) -> Vec<String> {
    let mut found = Vec::new();
    for package in old.packages.difference(&new.packages) {
        found.push(format!("package {package} is gone (removed or renamed)"));
    }
    for (name, fields) in &old.messages {
        match new.messages.get(name) {
            None => found.push(format!("message {name} is gone")),
            Some(now) => compare_fields(old, new, name, fields, now, &mut Vec::new(), &mut found),
        }
    }
    for (name, values) in &old.enums {
        match new.enums.get(name) {
            None => found.push(format!("enum {name} is gone")),
            Some(now) => compare_values(name, values, now, &mut found),
        }
    }
    for (name, methods) in &old.services {
        let Some(now) = new.services.get(name) else {
            found.push(format!("service {name} is gone"));
            continue;
        };
        for (method, was) in methods {
            let Some(is) = now.get(method) else {
                found.push(format!("method {name}.{method} is gone"));
                continue;
            };
            let at = format!("method {name}.{method}");
            if (was.client_streaming, was.server_streaming) != (is.client_streaming, is.server_streaming) {
                found.push(format!("{at}: streaming changed"));
            }
            for (what, was_ty, is_ty) in
                [("input", &was.input, &is.input), ("output", &was.output, &is.output)]
            {
                compare_types(old, new, &format!("{at} {what}"), was_ty, is_ty, &mut Vec::new(), &mut found);
            }
        }
    }
    found
}

/// The fields of message `name` as they were (`was`) against those of its counterpart now
/// (`is`). `seen` holds the pairs of types already being compared (types can nest).
fn compare_fields(
    old: &Contract,
    new: &Contract,
    name: &str,
    was: &BTreeMap<i32, Field>,
    is: &BTreeMap<i32, Field>,
    seen: &mut Vec<(String, String)>,
    found: &mut Vec<String>,
) {
    for (number, f) in was {
        let at = format!("{name}.{} (field {number})", f.name);
        let Some(now) = is.get(number) else {
            found.push(format!("{at} is gone"));
            continue;
        };
        if now.name != f.name {
            found.push(format!("{at} is renamed {}", now.name));
        }
        if now.label != f.label {
            found.push(format!("{at}: label {} is now {}", f.label, now.label));
        }
        if now.oneof != f.oneof {
            found.push(format!("{at}: oneof {:?} is now {:?}", f.oneof, now.oneof));
        }
        compare_types(old, new, &at, &f.ty, &now.ty, seen, found);
    }
}

/// A type as it was against the type in its place now: the same scalar, the same message
/// or enum, or a renamed one of the same shape.
fn compare_types(
    old: &Contract,
    new: &Contract,
    at: &str,
    was: &str,
    is: &str,
    seen: &mut Vec<(String, String)>,
    found: &mut Vec<String>,
) {
    if was == is {
        return;
    }
    let key = (was.to_string(), is.to_string());
    if seen.contains(&key) {
        return;
    }
    let (was_name, is_name) = (was.trim_start_matches('.'), is.trim_start_matches('.'));
    if let (Some(was_fields), Some(is_fields)) = (old.messages.get(was_name), new.messages.get(is_name)) {
        seen.push(key);
        let mut inner = Vec::new();
        compare_fields(old, new, was_name, was_fields, is_fields, seen, &mut inner);
        found.extend(inner.into_iter().map(|b| format!("{at}: type {was} is now {is}, and {b}")));
    } else if let (Some(was_values), Some(is_values)) = (old.enums.get(was_name), new.enums.get(is_name)) {
        let mut inner = Vec::new();
        compare_values(was_name, was_values, is_values, &mut inner);
        found.extend(inner.into_iter().map(|b| format!("{at}: type {was} is now {is}, and {b}")));
    } else {
        found.push(format!("{at}: type {was} is now {is}"));
    }
}

fn compare_values(
    name: &str,
    was: &BTreeMap<i32, String>,
    is: &BTreeMap<i32, String>,
    found: &mut Vec<String>,
) {
    for (number, value) in was {
        match is.get(number) {
            None => found.push(format!("{name}.{value} (= {number}) is gone")),
            Some(now) if now != value => found.push(format!("{name}.{value} (= {number}) is renamed {now}")),
            Some(_) => {}
        }
    }
}

/// What `new` has that `old` does not record (passes; worth recording when it ships).
fn additions(old: &Contract, new: &Contract) -> Vec<String> {
    let mut found = Vec::new();
    for (name, fields) in &new.messages {
        match old.messages.get(name) {
            None => found.push(format!("message {name}")),
            Some(was) => found.extend(
                fields
                    .iter()
                    .filter(|(n, _)| !was.contains_key(n))
                    .map(|(n, f)| format!("{name}.{} ({n})", f.name)),
            ),
        }
    }
    for (name, values) in &new.enums {
        match old.enums.get(name) {
            None => found.push(format!("enum {name}")),
            Some(was) => found.extend(
                values.iter().filter(|(n, _)| !was.contains_key(n)).map(|(_, v)| format!("{name}.{v}")),
            ),
        }
    }
    for (name, methods) in &new.services {
        let was = old.services.get(name);
        found.extend(
            methods
                .keys()
                .filter(|m| was.is_none_or(|w| !w.contains_key(*m)))
                .map(|m| format!("method {name}.{m}")),
        );
    }
    found
}

fn current() -> Contract {
    let set =
        FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).expect("the built descriptor set decodes");
    Contract::from_descriptors(&set)
}

#[test]
fn the_protocols_keep_what_older_peers_and_clients_rely_on() {
    let now = current();
    if std::env::var_os(UPDATE_VAR).is_some() {
        std::fs::write(BASELINE, now.render()).expect("write the baseline");
        eprintln!("wrote {BASELINE}");
        return;
    }
    let text = std::fs::read_to_string(BASELINE)
        .unwrap_or_else(|e| panic!("{BASELINE}: {e}; write it with {UPDATE_VAR}=1"));
    let baseline = Contract::parse(&text).expect("the baseline parses");
    let broken = breaks(&baseline, &now);
    assert!(
        broken.is_empty(),
        "the .proto files break what {BASELINE} records:\n  {}\n\
         If this is meant (a new major version, or what never shipped), rewrite the baseline:\n  \
         {UPDATE_VAR}=1 cargo test -p kiki-proto --lib compat",
        broken.join("\n  ")
    );
    let added = additions(&baseline, &now);
    if !added.is_empty() {
        eprintln!("not in the baseline yet (fine; record them when they ship):\n  {}", added.join("\n  "));
    }
}

#[test]
fn the_baseline_text_reads_back_as_written() {
    let now = current();
    assert_eq!(Contract::parse(&now.render()).expect("parses"), now);
}

mod tests {
    use super::*;

    fn contract(text: &str) -> Contract {
        Contract::parse(text).expect("parses")
    }

    const BASE: &str = "package p
message p.A
  1 id singular string
  2 b singular .p.B
  3 kind singular .p.Kind
  4 tags repeated string
  5 x singular string oneof choice
message p.B
  1 n singular uint64
enum p.Kind
  0 KIND_UNSPECIFIED
  1 KIND_ONE
service p.S
  Get .p.A stream .p.B
";

    fn broken(changed: &str) -> Vec<String> {
        breaks(&contract(BASE), &contract(changed))
    }

    #[test]
    fn additions_pass() {
        let added = BASE
            .replace("  5 x", "  6 more singular string\n  5 x")
            .replace("  1 KIND_ONE", "  1 KIND_ONE\n  2 KIND_TWO")
            + "message p.C\n  1 c singular bool\n";
        assert_eq!(broken(&added), Vec::<String>::new());
        assert_eq!(
            additions(&contract(BASE), &contract(&added)),
            ["p.A.more (6)", "message p.C", "p.Kind.KIND_TWO"]
        );
    }

    #[test]
    fn each_break_is_named() {
        let cases = [
            (BASE.replace("  1 id singular string\n", ""), "p.A.id (field 1) is gone"),
            (BASE.replace("1 id singular", "7 id singular"), "p.A.id (field 1) is gone"),
            (BASE.replace("1 id singular", "1 key singular"), "p.A.id (field 1) is renamed key"),
            (
                BASE.replace("1 id singular string", "1 id singular .p.Kind"),
                "p.A.id (field 1): type string is now .p.Kind",
            ),
            (
                BASE.replace("4 tags repeated", "4 tags singular"),
                "p.A.tags (field 4): label repeated is now singular",
            ),
            (BASE.replace(" oneof choice", ""), "p.A.x (field 5): oneof Some(\"choice\") is now None"),
            (BASE.replace("  1 KIND_ONE\n", ""), "p.Kind.KIND_ONE (= 1) is gone"),
            (
                BASE.replace("message p.B\n  1 n singular uint64\n", "").replace(".p.B", ".p.A"),
                "message p.B is gone",
            ),
            (BASE.replace("package p\n", "package q\n"), "package p is gone (removed or renamed)"),
            (BASE.replace("stream .p.B", ".p.B"), "method p.S.Get: streaming changed"),
        ];
        for (changed, named) in cases {
            let found = broken(&changed);
            assert!(found.iter().any(|b| b == named), "{named:?} not in {found:?}");
        }
    }

    #[test]
    fn a_renamed_type_of_the_same_shape_passes_and_a_reshaped_one_does_not() {
        let renamed = BASE
            .replace(".p.B", ".p.B2")
            .replace("message p.B\n", "message p.B\n  1 n singular uint64\nmessage p.B2\n");
        assert_eq!(broken(&renamed), Vec::<String>::new());
        let reshaped =
            renamed.replace("message p.B2\n  1 n singular uint64", "message p.B2\n  1 n singular string");
        assert_eq!(
            broken(&reshaped),
            [
                "p.A.b (field 2): type .p.B is now .p.B2, and p.B.n (field 1): type uint64 is now string",
                "method p.S.Get output: type .p.B is now .p.B2, and p.B.n (field 1): type uint64 is now string",
            ]
        );
    }
}
