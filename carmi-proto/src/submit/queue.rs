//! `queue` statements and their items, in every form HTCondor's submit
//! language has: `queue`, `queue N`, `queue [N] [VARS] in (...)`,
//! `queue [N] [VARS] from FILE`, `from ( ... )` tables, `from CMD |` and
//! `queue [N] [VAR] matching [files|dirs] PATTERN ...`.

use super::env::SubmitEnv;

/// A parsed `queue` statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    /// `N`: procs per item.
    pub count: usize,
    /// The variables each item sets, lower case (`item` when none are named).
    pub vars: Vec<String>,
    /// Where the items come from.
    pub source: Source,
}

/// Where a `queue` statement's items come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `queue [N]`: one item, no variables.
    Single,
    /// `in (a, b c)`: items separated by commas and white space.
    In(Vec<String>),
    /// `from ( ... )`: the table's rows (comment lines dropped).
    Table(Vec<String>),
    /// `from FILE`: the file's lines.
    File(String),
    /// `from CMD |`: the lines the command prints.
    Command(String),
    /// `matching [files|dirs] PATTERN ...`: `(files, dirs, patterns)`.
    Matching(bool, bool, Vec<String>),
}

/// One item: the values of the statement's variables.
pub type Item = Vec<(String, String)>;

fn is_keyword(word: &str) -> Option<&'static str> {
    ["in", "from", "matching"]
        .into_iter()
        .find(|k| word.eq_ignore_ascii_case(k))
}

/// Parses a `queue` statement's arguments (macros already expanded) and its
/// table lines (`body`, for a `(` left open at the end of the line).
pub fn parse(args: &str, body: Option<&[String]>) -> Result<QueueSpec, String> {
    let args = args.trim();
    let (count, rest) = match args.split_once(char::is_whitespace) {
        _ if args.is_empty() => (1, ""),
        Some((n, r)) if n.parse::<usize>().is_ok() => (n.parse().unwrap_or(1), r.trim()),
        None if args.parse::<usize>().is_ok() => (args.parse().unwrap_or(1), ""),
        _ => (1, args),
    };
    if count == 0 {
        return Err(format!(
            "`queue {args}` queues nothing: between 1 and {} procs per submit file",
            crate::bounds::MAX_JOBS_PER_SUBMIT
        ));
    }
    if rest.is_empty() {
        return Ok(QueueSpec {
            count,
            vars: Vec::new(),
            source: Source::Single,
        });
    }
    let (mut vars_text, mut keyword, mut after, mut pos) = ("", None, "", 0);
    for w in rest.split_whitespace() {
        let at = rest[pos..].find(w).map_or(pos, |i| i + pos);
        pos = at + w.len();
        if let Some(k) = is_keyword(w) {
            (vars_text, keyword, after) = (&rest[..at], Some(k), rest[pos..].trim());
            break;
        }
    }
    let Some(keyword) = keyword else {
        return Err(format!(
            "`queue {args}`: expected `queue [N] [VARS] in|from|matching ...` (N a whole number)"
        ));
    };
    let vars: Vec<String> = vars_text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|v| !v.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    if let Some(bad) = vars
        .iter()
        .find(|v| !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(format!("queue: `{bad}` is not a variable name"));
    }
    let vars = if vars.is_empty() {
        vec!["item".to_string()]
    } else {
        vars
    };
    let source = source(keyword, after, body)?;
    Ok(QueueSpec {
        count,
        vars,
        source,
    })
}

fn source(keyword: &str, after: &str, body: Option<&[String]>) -> Result<Source, String> {
    let table = |after: &str| -> Result<Vec<String>, String> {
        match body {
            Some(lines) => Ok(lines.to_vec()),
            None => {
                let inner = after
                    .strip_prefix('(')
                    .and_then(|s| s.strip_suffix(')'))
                    .ok_or_else(|| format!("`{keyword} {after}`: the list is not closed by `)`"))?;
                Ok(vec![inner.to_string()])
            }
        }
    };
    match keyword {
        "in" => {
            if !after.starts_with('(') {
                return Err(format!(
                    "`in {after}`: the list goes in parentheses: `in (a, b, c)`"
                ));
            }
            let items = table(after)?
                .iter()
                .flat_map(|l| {
                    l.split(|c: char| c == ',' || c.is_whitespace())
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect();
            Ok(Source::In(items))
        }
        "from" => {
            if after.starts_with('[') {
                return Err(
                    "`from [slice]`: slices of an item list are not read here; select the rows in the file instead".into(),
                );
            }
            if after.starts_with('(') {
                let rows = table(after)?
                    .into_iter()
                    .filter(|l| !l.trim_start().starts_with('#'))
                    .collect();
                return Ok(Source::Table(rows));
            }
            if let Some(cmd) = after.strip_suffix('|') {
                return Ok(Source::Command(cmd.trim().to_string()));
            }
            if after.is_empty() {
                return Err("`from`: name the item file, `( ... )` or `COMMAND |`".into());
            }
            Ok(Source::File(after.to_string()))
        }
        _ => {
            let mut words: Vec<&str> = after.split_whitespace().collect();
            let (mut files, mut dirs) = (true, true);
            match words.first().map(|w| w.to_ascii_lowercase()) {
                Some(w) if w == "files" => {
                    (files, dirs, words) = (true, false, words[1..].to_vec())
                }
                Some(w) if w == "dirs" => (files, dirs, words) = (false, true, words[1..].to_vec()),
                _ => {}
            }
            if words.is_empty() {
                return Err("`matching`: give at least one file name pattern".into());
            }
            let patterns = words.into_iter().map(str::to_string).collect();
            Ok(Source::Matching(files, dirs, patterns))
        }
    }
}

/// Splits a row into `vars.len()` fields: each but the last ends at a comma
/// or white space; the last takes the rest of the row.
fn fields(row: &str, vars: &[String]) -> Item {
    let mut rest = row.trim();
    let mut out = Vec::with_capacity(vars.len());
    for (i, v) in vars.iter().enumerate() {
        if i + 1 == vars.len() {
            out.push((v.clone(), rest.to_string()));
            break;
        }
        let end = rest
            .find(|c: char| c == ',' || c.is_whitespace())
            .unwrap_or(rest.len());
        out.push((v.clone(), rest[..end].to_string()));
        rest = rest[end..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    out
}

/// Rows into items; a blank row keeps the values of the row before it (as
/// HTCondor reads it).
fn rows_to_items(rows: &[&str], vars: &[String]) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::with_capacity(rows.len());
    for row in rows {
        let item = if row.trim().is_empty() {
            items
                .last()
                .cloned()
                .unwrap_or_else(|| vars.iter().map(|v| (v.clone(), String::new())).collect())
        } else {
            fields(row, vars)
        };
        items.push(item);
    }
    items
}

/// Whether `name` matches `pattern` (`*`, `?` and `[...]` classes).
pub fn glob(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|i| glob(rest, &name[i..])),
        Some(('?', rest)) => !name.is_empty() && glob(rest, &name[1..]),
        Some(('[', rest)) => {
            let Some(close) = rest.iter().position(|&c| c == ']') else {
                return name.first() == Some(&'[') && glob(rest, &name[1..]);
            };
            let Some((&c, tail)) = name.split_first() else {
                return false;
            };
            let set = &rest[..close];
            let (negate, set) = match set.split_first() {
                Some(('!' | '^', s)) => (true, s),
                _ => (false, set),
            };
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == '-' {
                    hit |= set[i] <= c && c <= set[i + 2];
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit != negate && glob(&rest[close + 1..], tail)
        }
        Some((&p, rest)) => name.first() == Some(&p) && glob(rest, &name[1..]),
    }
}

fn matching(
    env: &dyn SubmitEnv,
    files: bool,
    dirs: bool,
    patterns: &[String],
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for pattern in patterns {
        let (dir, base) = match pattern.rfind('/') {
            Some(i) => (&pattern[..i], &pattern[i + 1..]),
            None => ("", pattern.as_str()),
        };
        if dir.contains(['*', '?', '[']) {
            return Err(format!(
                "matching {pattern}: wildcards only in the last part of a path here"
            ));
        }
        let base: Vec<char> = base.chars().collect();
        let mut found: Vec<String> = env
            .list_dir(dir)?
            .into_iter()
            .filter(|(n, is_dir)| {
                !n.starts_with('.')
                    && (if *is_dir { dirs } else { files })
                    && glob(&base, &n.chars().collect::<Vec<_>>())
            })
            .map(|(n, is_dir)| {
                let path = if dir.is_empty() {
                    n
                } else {
                    format!("{dir}/{n}")
                };
                if is_dir { format!("{path}/") } else { path }
            })
            .collect();
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// The items of a statement, read with `env` where they come from outside.
pub fn items(spec: &QueueSpec, env: &dyn SubmitEnv) -> Result<Vec<Item>, String> {
    let lines = |text: String| -> Vec<String> { text.lines().map(str::to_string).collect() };
    let rows: Vec<String> = match &spec.source {
        Source::Single => return Ok(vec![Vec::new()]),
        Source::In(items) => {
            return Ok(items.iter().map(|i| fields(i, &spec.vars)).collect());
        }
        Source::Table(rows) => rows.clone(),
        Source::File(f) => lines(
            env.read_file(f)
                .map_err(|e| format!("queue from {f}: {e}"))?,
        ),
        Source::Command(c) => lines(
            env.run_command(c)
                .map_err(|e| format!("queue from {c} |: {e}"))?,
        ),
        Source::Matching(files, dirs, patterns) => {
            let names = matching(env, *files, *dirs, patterns)?;
            return Ok(names.iter().map(|n| fields(n, &spec.vars)).collect());
        }
    };
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    Ok(rows_to_items(&rows, &spec.vars))
}
