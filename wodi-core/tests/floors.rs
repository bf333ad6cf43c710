//! The core's floors, checked rather than promised (issue "one crate, one
//! concern"): no async runtime anywhere in its dependency tree, and no import
//! circle among its modules, so that each module can be read and tested
//! standing on the ones below it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[test]
fn the_core_has_no_tokio_in_its_dependency_tree() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "wodi-core",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(crates.contains(&"carmi-proto"), "{tree}");
    for runtime in ["tokio", "carmi-api", "mio"] {
        assert!(
            !crates.contains(&runtime),
            "wodi-core depends on {runtime}:\n{tree}"
        );
    }
}

/// The top-level module a source file belongs to (`sched/hosts.rs` is `sched`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::NAME` a file mentions outside its test module, code and
/// doc links alike (a doc link to a module above is an import of its ideas).
fn imports(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `$crate::` of a macro and the crate-root items are not modules.
        if !name.is_empty() && name.chars().next().unwrap().is_ascii_lowercase() {
            out.insert(name);
        }
    }
    out
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

#[test]
fn no_import_circle_among_the_core_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy();
        if name.contains("_tests") || name == "tests.rs" || name == "lib.rs" {
            continue;
        }
        let module = module_of(&src, f);
        let text = std::fs::read_to_string(f).unwrap();
        let deps = graph.entry(module.clone()).or_default();
        deps.extend(imports(&text).into_iter().filter(|d| *d != module));
    }
    assert!(graph.len() >= 8, "too few modules found: {graph:?}");
    // Depth-first search for a back edge, reporting the circle it closes.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = path.iter().position(|p| p == m) {
            panic!("import circle: {} -> {m}", path[at..].join(" -> "));
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            visit(d, graph, path, done);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
}

#[test]
fn the_circle_finder_sees_imports() {
    let deps = imports(
        "use crate::sched::Time;\n/// [`crate::plan::History`]\n#[cfg(test)]\nuse crate::order;",
    );
    assert_eq!(
        deps.into_iter().collect::<Vec<_>>(),
        vec!["plan".to_string(), "sched".to_string()]
    );
}
