//! The workspace's structure, checked rather than promised (issue 14, "one
//! crate, one concern"): in every crate, no import circle between its
//! top-level modules (outside the ClassAd interpreter, whose evaluator,
//! values and builtins are one recursive concern), nor between the modules
//! below one module (`router::anywhere` and `router::jobs`); no non-test
//! source file over 700 lines; no function over 100 lines; no struct of
//! over 15 fields in a core (issue 33). Read from the sources
//! themselves, so that a change that breaks a floor fails here, naming each
//! offender with file:line.
//!
//! Test code does not count: files named `*_tests.rs` or `tests.rs`,
//! directories named `tests`, and items under `#[cfg(test)]`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest non-test source file, in lines.
const MAX_FILE_LINES: usize = 700;
/// Longest function, in lines from `fn` to its closing brace.
const MAX_FN_LINES: usize = 100;
/// Most named fields of a struct in a core: a state machine wider than
/// this has parts that want their own struct (issue 33).
const MAX_FIELDS: usize = 15;
/// The crates whose structs are held to [`MAX_FIELDS`]: the daemons' and
/// WoDi's decisions. `carmi-proto` is not among them: its structs are the
/// protocol's messages and records, whose fields are the wire format.
const CORE_CRATES: &[&str] = &[
    "carmi-global-core",
    "carmi-local-core",
    "wodi-core",
    "owner-model",
];
/// Crates whose modules may use each other in a circle (the interpreter).
const CIRCLES_ALLOWED: &[&str] = &["classad"];
/// Offenders found when this check was written and not yet fixed, by the
/// key the check reports them under; each must still offend (so the list
/// only shrinks), and a new one fails.
const KNOWN_OFFENDERS: &[&str] = &[];

/// The workspace's member directories, from its manifest.
fn members() -> Vec<String> {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line in the workspace manifest");
    let list = line.split('[').nth(1).unwrap().split(']').next().unwrap();
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Whether a path (relative to its crate) is test code by its name.
fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().unwrap().to_string_lossy();
    name.ends_with("_tests.rs")
        || name == "tests.rs"
        || rel.components().any(|c| c.as_os_str() == "tests")
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                walk(&p, files);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

/// The text with comments and the insides of string and char literals
/// blanked to spaces (newlines kept, so line numbers hold), so that braces
/// and paths in them are not mistaken for code.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = b.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in out.iter_mut().take(to.min(b.len())).skip(from) {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        let ident_before = i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_');
        if c == '/' && next == Some('/') {
            let end = (i..b.len()).find(|&j| b[j] == '\n').unwrap_or(b.len());
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j] == '/' && b.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if b[j] == '*' && b.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == 'r' && !ident_before && matches!(next, Some('"') | Some('#')) {
            // A raw string: r"..." or r#"..."#.
            let hashes = b[i + 1..].iter().take_while(|&&h| h == '#').count();
            if b.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let start = i + 2 + hashes;
            let mut j = start;
            while j < b.len() {
                if b[j] == '"'
                    && b[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    break;
                }
                j += 1;
            }
            blank(&mut out, start, j);
            i = j + 1 + hashes;
        } else if c == '"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != '"' {
                j += if b[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{7b}'), not a lifetime ('a).
            if next == Some('\\') {
                let end = (i + 3..b.len()).find(|&j| b[j] == '\'').unwrap_or(b.len());
                blank(&mut out, i + 1, end);
                i = end + 1;
            } else if b.get(i + 2) == Some(&'\'') {
                blank(&mut out, i + 1, i + 2);
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// The index just past the item starting at `from`: its first `;` or the
/// brace matching its first `{`, outside parentheses and brackets.
fn item_end(code: &[u8], from: usize) -> usize {
    let mut nest = 0i32;
    let mut j = from;
    while j < code.len() {
        match code[j] {
            b'(' | b'[' => nest += 1,
            b')' | b']' => nest -= 1,
            b';' if nest == 0 => return j + 1,
            b'{' if nest == 0 => return matching_brace(code, j) + 1,
            _ => {}
        }
        j += 1;
    }
    code.len()
}

fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (j, &c) in code.iter().enumerate().skip(open) {
        if c == b'{' {
            depth += 1;
        } else if c == b'}' {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    code.len() - 1
}

/// The code with every `#[cfg(test)]` item blanked, and how many lines
/// those items took.
fn without_tests(code: &str) -> (String, usize) {
    let mut bytes = code.as_bytes().to_vec();
    let mut removed = 0;
    let mut at = 0;
    while let Some(i) = code[at..].find("#[cfg(test)]").map(|i| i + at) {
        let end = item_end(code.as_bytes(), i + "#[cfg(test)]".len());
        removed += code[i..end].matches('\n').count();
        for c in &mut bytes[i..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        at = end;
    }
    (String::from_utf8(bytes).unwrap(), removed)
}

/// Every function longer than `MAX_FN_LINES`: (line, name, length).
fn long_fns(code: &str) -> Vec<(usize, String, usize)> {
    let bytes = code.as_bytes();
    let line_of = |i: usize| code[..i].matches('\n').count() + 1;
    let mut found = Vec::new();
    for (i, _) in code.match_indices("fn ") {
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            continue;
        }
        let name: String = code[i + 3..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // a `fn(..)` pointer type
        }
        let end = item_end(bytes, i);
        if bytes[end - 1] != b'}' {
            continue; // a declaration without a body
        }
        let len = line_of(end - 1) - line_of(i) + 1;
        if len > MAX_FN_LINES {
            found.push((line_of(i), name, len));
        }
    }
    found
}

/// Every edge `a -> b` where `b` also reaches `a`.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            if m == to {
                return true;
            }
            if seen.insert(m.clone()) {
                stack.extend(graph.get(&m).into_iter().flatten().cloned());
            }
        }
        false
    };
    let mut found = Vec::new();
    for (a, uses) in graph {
        for b in uses {
            if reaches(b, a) {
                found.push((a.clone(), b.clone()));
            }
        }
    }
    found
}

/// One crate's non-test source files: path relative to the workspace, and
/// its code (comments, literals and `#[cfg(test)]` items blanked).
struct Source {
    rel: PathBuf,
    code: String,
    lines: usize,
}

fn sources(member: &str) -> Vec<Source> {
    let root = workspace_root();
    let dir = root.join(member);
    let mut files = Vec::new();
    walk(&dir, &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let rel_crate = f.strip_prefix(&dir).unwrap();
        if is_test_file(rel_crate) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let (code, test_lines) = without_tests(&code_only(&text));
        let lines = text.lines().count() - test_lines;
        let rel = f.strip_prefix(&root).unwrap().to_path_buf();
        out.push(Source { rel, code, lines });
    }
    out
}

/// The module graph of a crate's `src`: top-level module -> the top-level
/// modules it uses. Files included with `#[path]` belong to their includer;
/// binaries (`main.rs`, `bin/`) and the root are not modules.
fn module_graph(member: &str, srcs: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(member).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in srcs {
        let Ok(rel) = s.rel.strip_prefix(&src) else {
            continue;
        };
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if ["lib", "main", "bin"].contains(&module.as_str()) {
            continue;
        }
        let mut uses: BTreeSet<String> = used_paths(&s.code, &module_path(rel), 1)
            .into_iter()
            .map(|p| p[0].clone())
            .collect();
        uses.remove(&module);
        graph.entry(module).or_default().extend(uses);
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for uses in graph.values_mut() {
        uses.retain(|u| modules.contains(u));
    }
    graph
}

/// Structs with more than [`MAX_FIELDS`] named fields in `code`: (line, name, fields).
fn wide_structs(code: &str) -> Vec<(usize, String, usize)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for (i, _) in code.match_indices("struct ") {
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            continue;
        }
        let rest = &code[i + "struct ".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body's opening brace, unless a `;` or `(` (a tuple or unit struct) comes first.
        let Some(open) = rest.find(['{', ';', '(']) else {
            continue;
        };
        if rest.as_bytes()[open] != b'{' {
            continue;
        }
        let start = i + "struct ".len() + open;
        let body = &code[start + 1..matching_brace(bytes, start)];
        let fields = top_level_parts(body);
        if fields > MAX_FIELDS {
            found.push((code[..i].matches('\n').count() + 1, name, fields));
        }
    }
    found
}

/// Comma-separated parts of `body` outside any brackets (`->` is no bracket).
fn top_level_parts(body: &str) -> usize {
    let (mut parts, mut nest, mut filled) = (0, 0i32, false);
    let mut prev = ' ';
    for c in body.chars() {
        match c {
            '(' | '[' | '{' | '<' => nest += 1,
            '>' if prev == '-' => {}
            ')' | ']' | '}' | '>' => nest -= 1,
            ',' if nest == 0 => {
                parts += usize::from(filled);
                filled = false;
            }
            _ if !c.is_whitespace() => filled = true,
            _ => {}
        }
        prev = c;
    }
    parts + usize::from(filled)
}

/// A module's path from its file under `src`: `router/anywhere.rs` is
/// `router::anywhere`, `router/mod.rs` and `router.rs` are `router`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = path.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !["mod", "lib", "main"].contains(&stem) {
        path.push(stem.to_string());
    }
    path
}

/// Every path a module's code names from the crate root, `crate::a::b` and
/// `super::b` alike, groups (`crate::{a, b::{c, d}}`) opened, each cut to
/// its first `keep` segments.
fn used_paths(code: &str, here: &[String], keep: usize) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code.as_bytes()[i - 1] == b'$' {
            continue; // a macro's own crate
        }
        paths_at(&code[i + "crate::".len()..], &[], keep, &mut out);
    }
    for (i, _) in code.match_indices("super::") {
        if code[..i].ends_with("super::") || code[..i].ends_with("crate::") {
            continue; // counted from the first `super::` of the chain
        }
        let mut rest = &code[i..];
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            rest = r;
            ups += 1;
        }
        if ups <= here.len() {
            paths_at(rest, &here[..here.len() - ups], keep, &mut out);
        }
    }
    out
}

/// The paths written at the start of `rest`, below `base`.
fn paths_at(rest: &str, base: &[String], keep: usize, out: &mut BTreeSet<Vec<String>>) {
    let mut path = base.to_vec();
    let mut rest = rest.trim_start();
    loop {
        if path.len() >= keep {
            break;
        }
        if let Some(group) = rest.strip_prefix('{') {
            for part in group_parts(group) {
                paths_at(part, &path, keep, out);
            }
            return;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        path.push(name);
        match rest.strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    if path.len() > base.len() {
        out.insert(path);
    }
}

/// The top-level parts of a `{a, b::{c, d}}` group (without its opening brace).
fn group_parts(group: &str) -> Vec<&str> {
    let (mut parts, mut nest, mut start) = (Vec::new(), 0, 0);
    for (k, c) in group.char_indices() {
        match c {
            '{' => nest += 1,
            '}' if nest == 0 => {
                parts.push(&group[start..k]);
                return parts;
            }
            '}' => nest -= 1,
            ',' if nest == 0 => {
                parts.push(&group[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts
}

/// The import graph among sibling modules at every depth: `router::anywhere
/// -> router::jobs` when code in `router/anywhere.rs` (or below it) names
/// `router::jobs`. Keys and values are paths joined with `::`.
fn nested_graph(member: &str, srcs: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(member).join("src");
    let files: Vec<(Vec<String>, &Source)> = srcs
        .iter()
        .filter_map(|s| Some((module_path(s.rel.strip_prefix(&src).ok()?), s)))
        .filter(|(p, _)| p.first().is_some_and(|m| m != "bin"))
        .collect();
    let modules: BTreeSet<&[String]> = files.iter().map(|(p, _)| &p[..]).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (here, s) in &files {
        for used in used_paths(&s.code, here, here.len().max(1)) {
            // The first segment where the two differ names two siblings.
            let k = here.iter().zip(&used).take_while(|(a, b)| a == b).count();
            if k >= here.len() || k >= used.len() || !modules.contains(&used[..=k]) {
                continue;
            }
            let (from, to) = (here[..=k].join("::"), used[..=k].join("::"));
            if k > 0 {
                graph.entry(from).or_default().insert(to);
            }
        }
    }
    graph
}

#[test]
fn every_crate_keeps_its_floors() {
    // (key, message): the key stays stable as lines move.
    let mut offenders: Vec<(String, String)> = Vec::new();
    let members = members();
    assert!(members.len() > 10, "members: {members:?}");
    let mut files = 0;
    for member in &members {
        let srcs = sources(member);
        files += srcs.len();
        for s in &srcs {
            if s.lines > MAX_FILE_LINES {
                offenders.push((
                    format!("{}", s.rel.display()),
                    format!(
                        "{}:1: {} non-test lines (limit {MAX_FILE_LINES})",
                        s.rel.display(),
                        s.lines
                    ),
                ));
            }
            for (line, name, len) in long_fns(&s.code) {
                offenders.push((
                    format!("{}: fn {name}", s.rel.display()),
                    format!(
                        "{}:{line}: fn {name} is {len} lines (limit {MAX_FN_LINES})",
                        s.rel.display()
                    ),
                ));
            }
        }
        if CORE_CRATES.contains(&member.as_str()) {
            for s in &srcs {
                for (line, name, fields) in wide_structs(&s.code) {
                    let key = format!("{}: struct {name}", s.rel.display());
                    offenders.push((
                        key,
                        format!(
                            "{}:{line}: struct {name} has {fields} fields (limit {MAX_FIELDS})",
                            s.rel.display()
                        ),
                    ));
                }
            }
        }
        if CIRCLES_ALLOWED.contains(&member.as_str()) {
            continue;
        }
        let mut graph = module_graph(member, &srcs);
        graph.extend(nested_graph(member, &srcs));
        for (a, b) in circles(&graph) {
            offenders.push((
                format!("{member}/src/{a} -> {b}"),
                format!("{member}/src/{a}: uses module {b}, which leads back to {a}"),
            ));
        }
    }
    assert!(files > 150, "only {files} source files read");
    let gone: Vec<&&str> = KNOWN_OFFENDERS
        .iter()
        .filter(|k| !offenders.iter().any(|(key, _)| key == *k))
        .collect();
    assert!(
        gone.is_empty(),
        "fixed, so drop from KNOWN_OFFENDERS: {gone:?}"
    );
    let new: Vec<&str> = offenders
        .iter()
        .filter(|(key, _)| !KNOWN_OFFENDERS.contains(&key.as_str()))
        .map(|(_, msg)| msg.as_str())
        .collect();
    assert!(
        new.is_empty(),
        "{} offenders:\n{}",
        new.len(),
        new.join("\n")
    );
}

#[test]
fn the_checker_finds_circles_long_fns_and_skips_tests() {
    let edge = |a: &str, b: &str| (a.to_string(), BTreeSet::from([b.to_string()]));
    let graph = BTreeMap::from([
        edge("a", "b"),
        edge("b", "c"),
        edge("c", "a"),
        edge("d", "a"),
    ]);
    assert_eq!(circles(&graph).len(), 3);

    let code = code_only(
        "use crate::{apps, global::{Link, x}};\n// crate::comment\nuse super::super::up;\n\
         fn f() { x(crate::input::Input, \"crate::string\", '{') }\n$crate::mac",
    );
    let here = ["a".to_string(), "b".to_string()];
    let used: Vec<String> = (used_paths(&code, &here, 1).into_iter())
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(used, ["apps", "global", "input", "up"]);

    let body = "    let x = 1;\n".repeat(MAX_FN_LINES);
    let src = format!("/// doc\nfn long() {{\n{body}}}\nfn short(a: [u8; 2]) {{ '}}'; }}\n");
    let found = long_fns(&code_only(&src));
    assert_eq!(found, [(2, "long".to_string(), MAX_FN_LINES + 2)]);

    let here = ["router".to_string(), "logs".to_string()];
    let code = code_only(
        "use super::{jobs::{Submitted, x}, Router};\nfn f() { crate::router::anywhere::g() }",
    );
    let used: Vec<String> = (used_paths(&code, &here, 2).into_iter())
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(used, ["router::Router", "router::anywhere", "router::jobs"]);

    let fields =
        (0..=MAX_FIELDS).map(|i| format!("f{i}: HashMap<u8, Vec<(u8, u8)>>, g{i}: fn(u8) -> u8"));
    let wide = format!(
        "pub struct Wide {{ {} }}\nstruct T(u8, u8);\nstruct U;\n",
        fields.collect::<Vec<_>>().join(",\n")
    );
    assert_eq!(
        wide_structs(&code_only(&wide)),
        [(1, "Wide".to_string(), 2 * (MAX_FIELDS + 1))]
    );

    let tested = format!("fn a() {{}}\n#[cfg(test)]\nmod tests {{\nfn long() {{\n{body}}}\n}}\n");
    let (code, removed) = without_tests(&code_only(&tested));
    assert!(long_fns(&code).is_empty());
    assert_eq!(removed, MAX_FN_LINES + 4);
}

/// The crates that must stay pure, each with one crate its tree must contain
/// (so that an empty or failed `cargo tree` cannot pass).
const PURE_CRATES: &[(&str, &str)] = &[
    ("carmi-proto", "classad"),
    ("carmi-global-core", "carmi-proto"),
    ("carmi-local-core", "carmi-proto"),
    ("wodi-core", "carmi-proto"),
    ("owner-model", "carmi-proto"),
];

/// What no pure crate may link: an async runtime, the client library (which
/// pulls one), a daemon, or a command-line tool's dependencies.
const NOT_IN_A_PURE_TREE: &[&str] = &[
    "tokio",
    "clap",
    "anyhow",
    "mio",
    "carmi-api",
    "carmi-global",
    "carmi-local",
    "carmi-pool",
];

/// The simulator runs the cores in virtual time: no runtime and no daemon
/// either, though its command-line tool may use `clap`.
const NOT_IN_THE_SIMULATOR: &[&str] = &[
    "tokio",
    "mio",
    "carmi-api",
    "carmi-global",
    "carmi-local",
    "carmi-pool",
    "wodi",
];

/// The crates `cargo tree -e normal -p krate` lists.
fn tree_of(krate: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(&cargo)
        .args(["tree", "-p", krate, "-e", "normal", "--prefix", "none"])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {krate}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn pure_crates_link_no_runtime_and_no_daemon() {
    let simulator = [("wodi-sim", "carmi-global-core", NOT_IN_THE_SIMULATOR)];
    let pure = PURE_CRATES
        .iter()
        .map(|(k, e)| (*k, *e, NOT_IN_A_PURE_TREE));
    for (krate, expected, banned) in pure.chain(simulator) {
        let tree = tree_of(krate);
        let crates: BTreeSet<&str> = tree.lines().filter_map(|l| l.split(' ').next()).collect();
        assert!(crates.contains(expected), "{krate}: {tree}");
        for heavy in banned {
            assert!(
                !crates.contains(heavy),
                "{krate} depends on {heavy}:\n{tree}"
            );
        }
    }
}
