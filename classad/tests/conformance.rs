//! Conformance against HTCondor's own ClassAd library.
//!
//! Reads every `*.jsonl` under `../shared/classad-conformance/` (or the copy
//! in `tests/data/` when the shared folder is absent, as on a fresh clone),
//! plus every `*.jsonl` under `$CLASSAD_CONFORMANCE_DIR` when it is set. Ads
//! referred to by name come from the `ads.json` beside each vector file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use classad::{ClassAd, Value, eval_with, parse_expr};
use serde_json::Value as Json;

fn vector_dirs() -> Vec<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = manifest.join("../../shared/classad-conformance");
    let mut dirs = vec![if shared.is_dir() {
        shared
    } else {
        manifest.join("tests/data")
    }];
    if let Ok(extra) = std::env::var("CLASSAD_CONFORMANCE_DIR") {
        dirs.push(PathBuf::from(extra));
    }
    dirs
}

fn load_ads(dir: &Path) -> HashMap<String, ClassAd> {
    let Ok(text) = std::fs::read_to_string(dir.join("ads.json")) else {
        return HashMap::new();
    };
    let json: Json = serde_json::from_str(&text).expect("ads.json is JSON");
    let mut ads = HashMap::new();
    for (name, v) in json.as_object().expect("ads.json is an object") {
        let src = v.as_str().expect("ad text");
        let ad = ClassAd::parse_any(src)
            .unwrap_or_else(|e| panic!("ad {name} in {} does not parse: {e}", dir.display()));
        ads.insert(name.clone(), ad);
    }
    ads
}

/// Checks `actual` against an encoded expected result; `Err` describes the mismatch.
fn check(expected: &Json, actual: &Value) -> Result<(), String> {
    let t = expected["t"].as_str().unwrap_or("?");
    let v = &expected["v"];
    let ok = match (t, actual) {
        ("undefined", Value::Undefined) | ("error", Value::Error) | ("ad", Value::Ad(_)) => true,
        ("bool", Value::Bool(b)) => v.as_bool() == Some(*b),
        ("int", Value::Int(i)) => v.as_i64() == Some(*i),
        ("str", Value::Str(s)) => v.as_str() == Some(&**s),
        ("real", Value::Real(r)) => match v {
            Json::String(s) => match s.as_str() {
                "inf" => *r == f64::INFINITY,
                "-inf" => *r == f64::NEG_INFINITY,
                "nan" => r.is_nan(),
                _ => false,
            },
            _ => v.as_f64() == Some(*r),
        },
        ("list", Value::List(items)) => {
            let exp = v.as_array().cloned().unwrap_or_default();
            exp.len() == items.len()
                && exp
                    .iter()
                    .zip(items.iter())
                    .all(|(e, a)| check(e, a).is_ok())
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected {expected}, got {actual} ({})",
            actual.type_name()
        ))
    }
}

fn run_vector(v: &Json, ads: &HashMap<String, ClassAd>) -> Result<(), String> {
    if v["kind"] == "match" {
        let job = ClassAd::parse(v["job"].as_str().unwrap_or(""))
            .map_err(|e| format!("job ad does not parse: {e}"))?;
        let machine = ClassAd::parse(v["machine"].as_str().unwrap_or(""))
            .map_err(|e| format!("machine ad does not parse: {e}"))?;
        let m = classad::match_ads(&job, &machine);
        let mut problems = Vec::new();
        if Some(m.a_accepts) != v["job_accepts"].as_bool() {
            problems.push(format!("job_accepts {}", m.a_accepts));
        }
        if Some(m.b_accepts) != v["machine_accepts"].as_bool() {
            problems.push(format!("machine_accepts {}", m.b_accepts));
        }
        if Some(m.symmetric()) != v["symmetric"].as_bool() {
            problems.push(format!("symmetric {}", m.symmetric()));
        }
        if let Err(e) = check(
            &v["job_rank"],
            &classad::matching::rank_value(&job, &machine),
        ) {
            problems.push(format!("job_rank: {e}"));
        }
        return if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        };
    }
    let text = v["expr"].as_str().ok_or("vector has no expr")?;
    let parsed = parse_expr(text);
    if v["result"]["t"] == "parse_error" {
        return match parsed {
            Err(_) => Ok(()),
            Ok(e) => Err(format!("expected a parse error, parsed as {e}")),
        };
    }
    let e = parsed.map_err(|e| format!("unexpected parse error: {e}"))?;
    let ad = |key: &str| {
        v[key]
            .as_str()
            .map(|n| ads.get(n).unwrap_or_else(|| panic!("unknown ad {n}")))
    };
    let actual = eval_with(&e, ad("my"), ad("target"));
    check(&v["result"], &actual)
}

#[test]
fn conformance() {
    let mut passed = 0;
    let mut failures = Vec::new();
    for dir in vector_dirs() {
        let ads = load_ads(&dir);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("vector file is readable");
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: Json = serde_json::from_str(line).expect("vector line is JSON");
                match run_vector(&v, &ads) {
                    Ok(()) => passed += 1,
                    Err(why) => failures.push(format!(
                        "{} `{}`: {why}",
                        v["id"].as_str().unwrap_or("?"),
                        v["expr"].as_str().unwrap_or("(match)")
                    )),
                }
            }
        }
    }
    println!(
        "classad conformance: {passed} passed, {} failed",
        failures.len()
    );
    let limit: usize = std::env::var("CONFORMANCE_SHOW")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    for f in failures.iter().take(limit) {
        println!("  FAIL {f}");
    }
    assert!(passed > 0, "no conformance vectors found");
    assert!(
        failures.is_empty(),
        "{} conformance vectors failed",
        failures.len()
    );
}
