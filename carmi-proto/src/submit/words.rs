//! `arguments` and `environment` in HTCondor's two syntaxes: the old one
//! (no surrounding double quotes: arguments split on white space, `\"` a
//! double quote; environment `NAME=VALUE` pairs separated by `;`) and the new
//! one (the whole value in double quotes: white space separates, single
//! quotes group, `''` inside them is a single quote, `""` a double quote).

/// The words of a new-syntax value (its surrounding double quotes removed).
fn new_syntax_words(inner: &str, what: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut any, mut quoted) = (false, false);
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' if quoted && chars.peek() == Some(&'\'') => {
                chars.next();
                cur.push('\'');
            }
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            '"' if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
                any = true;
            }
            '"' => {
                return Err(format!(
                    "{what}: a double quote inside the quoted value must be doubled (`\"\"`)"
                ));
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if quoted {
        return Err(format!("{what}: a single quote is never closed"));
    }
    if any {
        out.push(cur);
    }
    Ok(out)
}

/// The inside of a new-syntax value, if `value` is one.
fn new_syntax(value: &str) -> Option<&str> {
    let v = value.trim();
    (v.len() >= 2 && v.starts_with('"') && v.ends_with('"')).then(|| &v[1..v.len() - 1])
}

/// `arguments`, as HTCondor splits them.
pub fn split_args(value: &str) -> Result<Vec<String>, String> {
    if let Some(inner) = new_syntax(value) {
        return new_syntax_words(inner, "arguments");
    }
    let mut out = Vec::new();
    for word in value.split_whitespace() {
        let mut w = String::with_capacity(word.len());
        let mut chars = word.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&'"') => {
                    chars.next();
                    w.push('"');
                }
                '"' => {
                    return Err(format!(
                        "arguments: a double quote must be written `\\\"` (or put the whole value in double quotes, HTCondor's new syntax): {value}"
                    ));
                }
                c => w.push(c),
            }
        }
        out.push(w);
    }
    Ok(out)
}

/// `environment`, as HTCondor reads it.
pub fn environment(value: &str) -> Result<Vec<(String, String)>, String> {
    let pairs: Vec<String> = match new_syntax(value) {
        Some(inner) => new_syntax_words(inner, "environment")?,
        None => value
            .split(';')
            .map(|p| p.trim_start().to_string())
            .filter(|p| !p.trim().is_empty())
            .collect(),
    };
    pairs
        .into_iter()
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(format!(
                "environment: `{pair}` is not NAME=VALUE (pairs are separated by `;`, or by spaces inside double quotes)"
            )),
        })
        .collect()
}

/// The arguments in the new syntax, as a job ad shows them: words with
/// white space or quotes in single quotes.
pub fn join_args(args: &[String]) -> String {
    args.iter()
        .map(|a| quote_word(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The environment in the new syntax: `NAME=VALUE` pairs, quoted where needed.
pub fn join_environment(env: &[(String, String)]) -> String {
    env.iter()
        .map(|(k, v)| quote_word(&format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote_word(a: &str) -> String {
    if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'') {
        format!("'{}'", a.replace('\'', "''"))
    } else {
        a.to_string()
    }
}
