//! A submit file's statements: `key = value` settings, `queue` statements
//! (with the lines of a `( ... )` list left open at the end of the line),
//! and lines that are neither. Comments are whole lines starting with `#`
//! (a `#` later in a line is part of the value, as in HTCondor); a line
//! ending in `\` continues on the next.

/// One statement, with the line it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stmt {
    /// `key = value` (both trimmed).
    Set {
        /// Line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
    },
    /// `queue ARGS`, and the lines of a list opened by a final `(`.
    Queue {
        /// Line number.
        line: usize,
        /// What follows `queue`.
        args: String,
        /// The list's lines, when it spans lines.
        body: Option<Vec<String>>,
    },
    /// Anything else: a mistake, reported with its line.
    Other {
        /// Line number.
        line: usize,
        /// The line.
        text: String,
    },
}

/// A logical line: continuation lines joined, with the line it started on.
struct Logical {
    line: usize,
    text: String,
}

fn logical_lines(text: &str) -> Vec<Logical> {
    let mut out = Vec::new();
    let mut current: Option<Logical> = None;
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_end();
        let (body, continues) = match trimmed.strip_suffix('\\') {
            Some(b) => (b.trim_end(), true),
            None => (trimmed, false),
        };
        match current.as_mut() {
            Some(c) => {
                c.text.push(' ');
                c.text.push_str(body.trim_start());
            }
            None => {
                current = Some(Logical {
                    line: i + 1,
                    text: body.to_string(),
                })
            }
        }
        if !continues {
            out.extend(current.take());
        }
    }
    out.extend(current);
    out
}

/// Whether `t` is a `queue` statement; its arguments if so.
fn queue_args(t: &str) -> Option<&str> {
    let head = t.get(..5)?;
    if !head.eq_ignore_ascii_case("queue") {
        return None;
    }
    let rest = &t[5..];
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim())
}

/// The statements of `text`, in order.
pub fn statements(text: &str) -> Vec<Stmt> {
    let mut out = Vec::new();
    let mut lines = logical_lines(text).into_iter();
    while let Some(l) = lines.next() {
        let t = l.text.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(args) = queue_args(t) {
            // A list left open takes the lines up to a `)` of its own; none
            // (the end of the file) leaves it open, a mistake said by `queue`.
            let body = if args.ends_with('(') && !args.contains(')') {
                list_body(&mut lines)
            } else {
                None
            };
            let args = match &body {
                Some(_) => format!("{args})"),
                None => args.to_string(),
            };
            out.push(Stmt::Queue {
                line: l.line,
                args,
                body,
            });
            continue;
        }
        match t.split_once('=') {
            Some((k, v)) if is_key(k.trim()) => out.push(Stmt::Set {
                line: l.line,
                key: k.trim().to_string(),
                value: v.trim().to_string(),
            }),
            _ => out.push(Stmt::Other {
                line: l.line,
                text: t.to_string(),
            }),
        }
    }
    out
}

/// The lines of a list up to the line starting with `)`; `None` if there is none.
fn list_body(lines: &mut impl Iterator<Item = Logical>) -> Option<Vec<String>> {
    let mut body = Vec::new();
    for next in lines {
        if next.text.trim_start().starts_with(')') {
            return Some(body);
        }
        body.push(next.text);
    }
    None
}

/// A key: a word of letters, digits, `_`, `.` and `-`, maybe after a `+`.
fn is_key(k: &str) -> bool {
    let k = k.strip_prefix('+').unwrap_or(k);
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}
