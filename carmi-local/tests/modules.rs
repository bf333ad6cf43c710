//! The modules of the local RM's crates form no import circle (issue "one
//! crate, one concern"): read from the sources themselves, so that a new
//! `use crate::...` that closes a circle fails here.
//!
//! A file included with `#[path]` (`daemon_inputs.rs`, `node_tests.rs`)
//! counts as part of the module that includes it; comments are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name -> the sibling modules it uses, for the `src` of a crate.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut text = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            text.insert(stem, std::fs::read_to_string(&path).unwrap());
        }
    }
    // Which module each file belongs to: its own, or its includer's.
    let mut owner: BTreeMap<String, String> = text.keys().map(|k| (k.clone(), k.clone())).collect();
    loop {
        let mut changed = false;
        for (file, body) in &text {
            for line in body.lines() {
                let Some(rest) = line.trim().strip_prefix("#[path = \"") else {
                    continue;
                };
                let included = rest.split(".rs\"").next().unwrap().to_string();
                let parent = owner[file].clone();
                if owner.get(&included) != Some(&parent) {
                    owner.insert(included, parent);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let modules: BTreeSet<String> = owner
        .values()
        .filter(|m| *m != "lib" && *m != "main")
        .cloned()
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (file, body) in &text {
        let from = &owner[file];
        if !modules.contains(from) {
            continue;
        }
        for line in body.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            for used in used_modules(line) {
                if used != *from && modules.contains(&used) {
                    graph.get_mut(from).unwrap().insert(used);
                }
            }
        }
    }
    graph
}

/// The first path segment after each `crate::` in a line, including every
/// one of a `use crate::{a, b::c}` group.
fn used_modules(line: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for part in line.split("crate::").skip(1) {
        if let Some(group) = part.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            out.extend(group.split(',').map(|g| ident(g.trim())));
        } else {
            out.push(ident(part));
        }
    }
    out
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
                stack.extend(graph[&m].iter().cloned());
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

fn check(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(crate_dir)
        .join("src");
    let graph = module_graph(&src);
    assert!(graph.len() > 2, "no modules read from {}", src.display());
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "import circles in {crate_dir}: {found:?}\n{graph:#?}"
    );
}

#[test]
fn the_daemons_modules_form_no_circle() {
    check(".");
}

#[test]
fn the_cores_modules_form_no_circle() {
    check("../carmi-local-core");
}

#[test]
fn the_check_finds_a_circle() {
    let edge = |a: &str, b: &str| (a.to_string(), BTreeSet::from([b.to_string()]));
    let graph = BTreeMap::from([edge("a", "b"), edge("b", "c"), edge("c", "a")]);
    assert_eq!(circles(&graph).len(), 3);
    assert_eq!(
        used_modules("use crate::{apps, global::Link}; x(crate::input::Input)"),
        ["apps", "global", "input"]
    );
}
