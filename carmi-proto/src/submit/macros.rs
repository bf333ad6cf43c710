//! Macro expansion as HTCondor's submit language does it, late: a value is
//! kept as written and expanded where it is used, at each `queue`, with the
//! macros in effect there and the variables of each proc.
//!
//! - `$(name)`: a proc variable (`ProcId`, `Process`, `Step`, `Item`,
//!   `ItemIndex`, `Row`, the named variables of a `queue` list), a built-in
//!   (`Year`, `Month`, `Day`, `SUBMIT_TIME`, `DOLLAR`) or a user macro
//!   (`dir = /x`), expanded in turn; anything else expands to nothing, as in
//!   HTCondor. `$(name:default)` gives `default` when `name` is not defined.
//! - `$(Cluster)`, `$(ClusterId)`: left as written; the
//!   global RM replaces it once the cluster has its id ([`super::JobSpec::expand`]).
//! - `$$(Attr)`: kept as written; HTCondor replaces it at match time with
//!   the machine's attribute (see docs/submit.md).
//! - `$ENV(NAME)`, `$ENV(NAME:default)`: the submitter's environment.
//! - `$F[pdnxqb](name)`, `$INT(name[,fmt])`, `$REAL(name)`,
//!   `$SUBSTR(name,start[,len])`, `$CHOICE(index,a,b,...)`, `$BASENAME(name)`,
//!   `$DIRNAME(name)`: HTCondor's macro functions.

use std::collections::HashMap;

use super::env::SubmitEnv;

/// Nesting of user macros within user macros at most (a deeper chain is a mistake).
const MAX_DEPTH: usize = 32;

/// Macro names that belong to a proc, left as written when no proc is known.
const PROC_NAMES: [&str; 7] = [
    "procid",
    "process",
    "step",
    "item",
    "itemindex",
    "row",
    "node",
];

/// The variables of one proc.
#[derive(Clone, Debug, Default)]
pub struct ProcVars {
    /// `$(ProcId)`, `$(Process)`: the proc's number in the cluster.
    pub proc_id: usize,
    /// `$(Step)`: its number among the `N` of its item.
    pub step: usize,
    /// `$(ItemIndex)`, `$(Row)`: its item's number in the list.
    pub item_index: usize,
    /// `$(Item)` or the named variables: lower-case name, value.
    pub vars: Vec<(String, String)>,
}

/// Everything a value is expanded with.
pub struct Scope<'a> {
    /// User macros: lower-case name, value as written.
    pub user: &'a HashMap<String, String>,
    /// The proc; `None` leaves `$(ProcId)` and the like as written (a CARMI
    /// file's `queue N`, whose copies replace them).
    pub proc: Option<&'a ProcVars>,
    /// The world: `$ENV()`, the submit time.
    pub env: &'a dyn SubmitEnv,
}

/// `(year, month, day)` of a Unix time, in UTC.
fn civil(unix: i64) -> (i64, u32, u32) {
    // Days to a civil date (proleptic Gregorian), H. Hinnant's algorithm.
    let z = unix.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Where the parenthesis opened just before `s` closes (nesting counted).
fn closing(s: &str) -> Option<usize> {
    let mut depth = 1usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

impl Scope<'_> {
    /// `value` with every macro expanded.
    pub fn expand(&self, value: &str) -> Result<String, String> {
        let mut active = Vec::new();
        self.expand_in(value, &mut active)
    }

    fn expand_in(&self, value: &str, active: &mut Vec<String>) -> Result<String, String> {
        if !value.contains('$') {
            return Ok(value.to_string());
        }
        let mut out = String::with_capacity(value.len());
        let mut rest = value;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let at = &rest[i..];
            if let Some(body) = at.strip_prefix("$$(") {
                // Match time: kept whole for the matchmaker.
                let end = closing(body).ok_or_else(|| unclosed(at))?;
                out.push_str(&at[..3 + end + 1]);
                rest = &body[end + 1..];
                continue;
            }
            let fname_len = at[1..]
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(at.len() - 1);
            let fname = &at[1..1 + fname_len];
            let Some(body) = at[1 + fname_len..].strip_prefix('(') else {
                out.push('$');
                rest = &at[1..];
                continue;
            };
            let end = closing(body).ok_or_else(|| unclosed(at))?;
            let inner = &body[..end];
            rest = &body[end + 1..];
            if fname.is_empty() {
                out.push_str(&self.macro_value(inner, active)?);
            } else {
                out.push_str(&self.function(fname, inner, active)?);
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `$(inner)`: `name` or `name:default`.
    fn macro_value(&self, inner: &str, active: &mut Vec<String>) -> Result<String, String> {
        let (name, default) = match inner.split_once(':') {
            Some((n, d)) => (n.trim(), Some(d)),
            None => (inner.trim(), None),
        };
        match self.lookup(name, active)? {
            Some(v) => Ok(v),
            None => match default {
                Some(d) => self.expand_in(d, active),
                None => Ok(String::new()),
            },
        }
    }

    /// The value of macro `name`, if defined.
    fn lookup(&self, name: &str, active: &mut Vec<String>) -> Result<Option<String>, String> {
        let lc = name.to_ascii_lowercase();
        match lc.as_str() {
            // Kept as written (the global RM's `JobSpec::expand` reads both
            // spellings), so that a value is no longer here than in the file.
            "cluster" | "clusterid" => return Ok(Some(format!("$({name})"))),
            "dollar" => return Ok(Some("$".into())),
            _ => {}
        }
        if let Some(v) = self.builtin(&lc) {
            return Ok(Some(v));
        }
        if PROC_NAMES.contains(&lc.as_str()) || lc == "jobid" {
            return Ok(Some(match self.proc {
                Some(p) => self.proc_value(p, &lc),
                None => format!("$({name})"),
            }));
        }
        if let Some(p) = self.proc
            && let Some((_, v)) = p.vars.iter().find(|(n, _)| *n == lc)
        {
            return Ok(Some(v.clone()));
        }
        let Some(raw) = self.user.get(&lc) else {
            return Ok(None);
        };
        if active.contains(&lc) {
            // HTCondor expands a macro that names itself to nothing.
            return Ok(Some(String::new()));
        }
        if active.len() >= MAX_DEPTH {
            return Err(format!(
                "macros nest more than {MAX_DEPTH} deep at `$({name})`"
            ));
        }
        active.push(lc);
        let v = self.expand_in(raw, active);
        active.pop();
        v.map(Some)
    }

    fn builtin(&self, lc: &str) -> Option<String> {
        let now = self.env.now_unix();
        let (y, m, d) = civil(now);
        Some(match lc {
            "year" => y.to_string(),
            "month" => format!("{m:02}"),
            "day" => format!("{d:02}"),
            "submit_time" => now.to_string(),
            _ => return None,
        })
    }

    fn proc_value(&self, p: &ProcVars, lc: &str) -> String {
        match lc {
            "procid" | "process" | "node" => p.proc_id.to_string(),
            "step" => p.step.to_string(),
            "itemindex" | "row" => p.item_index.to_string(),
            "jobid" => format!("$(ClusterId).{}", p.proc_id),
            // `item`: only when the list has no named variables.
            _ => p
                .vars
                .iter()
                .find(|(n, _)| n == "item")
                .map(|(_, v)| v.clone())
                .unwrap_or_default(),
        }
    }

    /// `$NAME(inner)`: `$ENV` and the macro functions.
    fn function(
        &self,
        fname: &str,
        inner: &str,
        active: &mut Vec<String>,
    ) -> Result<String, String> {
        let upper = fname.to_ascii_uppercase();
        let args: Vec<&str> = inner.split(',').map(str::trim).collect();
        let arg = |i: usize, active: &mut Vec<String>| -> Result<String, String> {
            let name = args.get(i).copied().unwrap_or_default();
            Ok(self.lookup(name, active)?.unwrap_or_default())
        };
        match upper.as_str() {
            "ENV" => {
                let (name, default) = match inner.split_once(':') {
                    Some((n, d)) => (n.trim(), Some(d)),
                    None => (inner.trim(), None),
                };
                match self.env.var(name) {
                    Some(v) => Ok(v),
                    None => default.map_or(Ok(String::new()), |d| self.expand_in(d, active)),
                }
            }
            "INT" | "REAL" => {
                let v = arg(0, active)?;
                number(&upper, &v, args.get(1).copied())
            }
            "SUBSTR" => {
                let v = arg(0, active)?;
                substr(&v, &args[1..])
            }
            "CHOICE" => {
                let i = arg(0, active)?;
                let i: usize = i
                    .trim()
                    .parse()
                    .map_err(|_| format!("$CHOICE({inner}): `{i}` is not an index"))?;
                args.get(i + 1)
                    .map(|s| s.to_string())
                    .ok_or_else(|| format!("$CHOICE({inner}): index {i} is past the list"))
            }
            "BASENAME" => Ok(file_part(&arg(0, active)?, "nx")),
            "DIRNAME" => Ok(file_part(&arg(0, active)?, "pb")),
            "RANDOM_CHOICE" | "RANDOM_INTEGER" => Err(format!(
                "${upper}() is not supported here: a submit file must read the same every time (it is checked twice, by carmi and by the global RM)"
            )),
            f if f.starts_with('F') && f[1..].chars().all(|c| "PDNXQBAFUW".contains(c)) => {
                Ok(file_part(&arg(0, active)?, &f[1..].to_ascii_lowercase()))
            }
            _ => Err(format!(
                "`${fname}(...)` is not a macro function of HTCondor's submit language; write `$({inner})` for a macro"
            )),
        }
    }
}

fn unclosed(at: &str) -> String {
    let shown: String = at.chars().take(40).collect();
    format!("`{shown}` opens a macro that is never closed")
}

/// `$INT(v[,fmt])` / `$REAL(v[,fmt])`: `fmt` a printf format of one
/// conversion (`%d`, `%03d`, `%x`, `%.2f`...).
fn number(f: &str, v: &str, fmt: Option<&str>) -> Result<String, String> {
    let x: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("${f}(): `{v}` is not a number"))?;
    let Some(fmt) = fmt else {
        return Ok(if f == "INT" {
            (x as i64).to_string()
        } else {
            x.to_string()
        });
    };
    let spec = fmt.trim_start_matches('%');
    let conv = spec.chars().last().unwrap_or('d');
    let flags = &spec[..spec.len() - conv.len_utf8()];
    let zero = flags.starts_with('0');
    let (width, prec) = match flags.trim_start_matches('0').split_once('.') {
        Some((w, p)) => (w.parse().unwrap_or(0), p.parse().ok()),
        None => (flags.trim_start_matches('0').parse().unwrap_or(0), None),
    };
    let body = match conv {
        'd' | 'i' => (x as i64).to_string(),
        'x' => format!("{:x}", x as i64),
        'X' => format!("{:X}", x as i64),
        'f' | 'g' | 'e' => format!("{:.*}", prec.unwrap_or(6), x),
        other => {
            return Err(format!(
                "${f}(): format `%{spec}` (`{other}`) is not understood"
            ));
        }
    };
    Ok(if zero {
        format!("{body:0>width$}")
    } else {
        format!("{body:>width$}")
    })
}

/// `$SUBSTR(v, start[, len])`; a negative start counts from the end.
fn substr(v: &str, args: &[&str]) -> Result<String, String> {
    let chars: Vec<char> = v.chars().collect();
    let n = chars.len() as i64;
    let num = |s: Option<&&str>| {
        s.map(|s| {
            s.parse::<i64>()
                .map_err(|_| format!("$SUBSTR(): `{s}` is not a number"))
        })
    };
    let start = num(args.first()).transpose()?.unwrap_or(0);
    let start = if start < 0 {
        (n + start).max(0)
    } else {
        start.min(n)
    };
    let len = num(args.get(1)).transpose()?.unwrap_or(n - start);
    let end = if len < 0 {
        (n + len).max(start)
    } else {
        (start + len).min(n)
    };
    Ok(chars[start as usize..end as usize].iter().collect())
}

/// The parts of file name `v` that `mods` select, as `$F` gives them: `p`
/// the directory with its `/`, `d` its last directory with `/`, `n` the name
/// without its last extension, `x` the extension with its dot, `b` drops a
/// trailing `/`, `q` double quotes around the whole.
fn file_part(v: &str, mods: &str) -> String {
    let (dir, name) = match v.rfind('/') {
        Some(i) => (&v[..=i], &v[i + 1..]),
        None => ("", v),
    };
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i..]),
        _ => (name, ""),
    };
    let last_dir = {
        let d = dir.trim_end_matches('/');
        match d.rfind('/') {
            Some(i) => &dir[i + 1..],
            None => dir,
        }
    };
    let [p, d, n, x] = ["p", "d", "n", "x"].map(|m| mods.contains(m));
    let mut out = String::new();
    if p {
        out.push_str(dir);
    } else if d {
        out.push_str(last_dir);
    }
    if n {
        out.push_str(stem);
    }
    if x {
        out.push_str(ext);
    }
    if !(p || d || n || x) {
        out.push_str(v);
    }
    if mods.contains('b') && !(n || x) {
        out = out.trim_end_matches('/').to_string();
    }
    if mods.contains('q') {
        out = format!("\"{out}\"");
    }
    out
}

#[cfg(test)]
#[path = "macros_tests.rs"]
mod tests;
