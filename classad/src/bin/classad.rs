//! `classad`: check ClassAd expressions from the command line.
//!
//! - `classad eval [--my FILE] [--target FILE] EXPR` prints the value of `EXPR`
//!   (`-` reads `EXPR` from stdin).
//! - `classad match --requirements EXPR [--rank EXPR] [--list] FILE...` counts
//!   the machine ads in the files for which `EXPR` is `true`.
//! - `classad synth --count N` writes `N` synthetic machine ads to try `match` on.
//!
//! A syntax error in an expression or in an ad exits with status 2 and says
//! where it is; any other failure (a missing file, say) exits with status 1.
//!
//! # Layout
//! - `Cli`/`Command`: the arguments, as clap sees them.
//! - `SyntaxError`: a parse error placed in its file, with the exit status it implies.
//! - `AdSpans`/`cut_points`: finding the ads in an input without copying them, and
//!   cutting an input into pieces that start on ad boundaries, so that pieces can
//!   be parsed in parallel.
//! - `match_input`: parses and evaluates the pieces on all cores, in input order.

use std::fmt;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use classad::{ClassAd, Evaluator, Expr, ParseError, Value, eval_with, parse_expr};

/// Evaluate ClassAd expressions and match them against machine ads.
#[derive(Parser, Debug)]
#[command(name = "classad", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Evaluate an expression and print its value in ClassAd syntax.
    Eval {
        /// The ad that is MY (one ad, old or new syntax; `-` for stdin).
        #[arg(long, value_name = "FILE")]
        my: Option<PathBuf>,
        /// The ad that is TARGET (one ad, old or new syntax; `-` for stdin).
        #[arg(long, value_name = "FILE")]
        target: Option<PathBuf>,
        /// The expression, e.g. 'strcat("x", 1 + 2)'; `-` reads it from stdin
        /// (for expressions longer than the command line allows).
        expr: String,
    },
    /// Count the ads for which an expression is true (MY = each ad, no TARGET).
    Match {
        /// The expression an ad must make `true` to match.
        #[arg(long, value_name = "EXPR")]
        requirements: String,
        /// Orders the `--list` output, highest first; non-numbers rank 0.
        #[arg(long, value_name = "EXPR")]
        rank: Option<String>,
        /// Also print the `Name` of each matching ad, by rank.
        #[arg(long)]
        list: bool,
        /// Files of ads: old syntax separated by blank lines, or one `[...]`
        /// per line; `-` for stdin.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Write synthetic machine ads in old syntax, separated by blank lines.
    Synth {
        /// How many ads to write.
        #[arg(long, value_name = "N")]
        count: u64,
    },
}

/// Exit status for a syntax error in an expression or an ad.
const EXIT_SYNTAX: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => {
            // `classad match --list ... | head` closes the pipe early: that is
            // the reader's choice, not a failure worth reporting.
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("classad: error: {e:#}");
            if e.chain().any(|c| c.is::<SyntaxError>()) {
                ExitCode::from(EXIT_SYNTAX)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> Result<()> {
    let mut inputs = Inputs::default();
    match cli.command {
        Command::Eval { my, target, expr } => {
            let my = my.map(|p| read_one_ad(&mut inputs, &p)).transpose()?;
            let target = target.map(|p| read_one_ad(&mut inputs, &p)).transpose()?;
            let expr = if expr == "-" {
                let (_, text) = inputs.read(Path::new("-"))?;
                parse_arg("the expression from stdin", text.trim_end())?
            } else {
                parse_arg("the expression", &expr)?
            };
            let v = eval_with(&expr, my.as_ref(), target.as_ref());
            let mut out = io::stdout().lock();
            writeln!(out, "{v}")?;
            out.flush()?;
        }
        Command::Match {
            requirements,
            rank,
            list,
            files,
        } => {
            let query = Query {
                requirements: parse_arg("the --requirements expression", &requirements)?,
                rank: rank
                    .map(|r| parse_arg("the --rank expression", &r))
                    .transpose()?,
                list,
            };
            let mut total = Tally::default();
            for path in &files {
                let (name, text) = inputs.read(path)?;
                let t = match_input(&query, &text).map_err(|(offset, err)| SyntaxError {
                    source: name.clone(),
                    ad_line: Some(line_of(&text, offset)),
                    err,
                })?;
                total.matched += t.matched;
                total.ads += t.ads;
                total.listed.extend(t.listed);
            }
            let mut out = BufWriter::new(io::stdout().lock());
            if list {
                // A stable sort: equal ranks keep their input order.
                total
                    .listed
                    .sort_by(|a, b| b.0.partial_cmp(&a.0).expect("ranks are never NaN"));
                for (_, name) in &total.listed {
                    writeln!(out, "{name}")?;
                }
            }
            writeln!(out, "{} of {} ads match", total.matched, total.ads)?;
            out.flush()?;
        }
        Command::Synth { count } => {
            // Written one ad at a time rather than through
            // `synth::machines_old_syntax`, which builds the whole text in
            // memory; the bytes are the same (a test checks it).
            let mut out = BufWriter::new(io::stdout().lock());
            for i in 0..count {
                out.write_all(classad::synth::machine_old_syntax(i).as_bytes())?;
                out.write_all(b"\n")?;
            }
            out.flush()?;
        }
    }
    Ok(())
}

/// A parse error placed where the user can find it.
#[derive(Debug)]
struct SyntaxError {
    /// The file name, or a description such as "the --rank expression".
    source: String,
    /// The file line where the ad containing the error starts, for files of
    /// many ads; `err.line` is relative to that line.
    ad_line: Option<usize>,
    /// The error, with its line counted from the start of the ad or expression.
    err: ParseError,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.err;
        let line = e.line + self.ad_line.unwrap_or(1) - 1;
        write!(
            f,
            "syntax error in {} at line {line}, column {}",
            self.source, e.column
        )?;
        if let Some(start) = self.ad_line {
            write!(f, " (in the ad starting at line {start})")?;
        }
        let (text, column) = clip_around(&e.line_text, e.column);
        write!(
            f,
            ": {}\n  {}\n  {:>width$}",
            e.message,
            text,
            "^",
            width = column
        )
    }
}

/// Characters of context kept on each side of an error's column: a line of
/// 100,000 brackets is no help to read, a window around the caret is.
const CONTEXT_CHARS: usize = 60;

/// The part of `line` around the 1-based character `column`, with `...`
/// where it was cut, and the caret's column within that part.
fn clip_around(line: &str, column: usize) -> (String, usize) {
    let chars: Vec<char> = line.chars().collect();
    let at = column.saturating_sub(1).min(chars.len());
    let start = at.saturating_sub(CONTEXT_CHARS);
    let end = (at + CONTEXT_CHARS).min(chars.len());
    if start == 0 && end == chars.len() {
        return (line.to_string(), column);
    }
    let mut text = String::new();
    let mut column = at - start + 1;
    if start > 0 {
        text.push_str("...");
        column += 3;
    }
    text.extend(&chars[start..end]);
    if end < chars.len() {
        text.push_str("...");
    }
    (text, column)
}

impl std::error::Error for SyntaxError {}

/// Parses an expression given on the command line.
fn parse_arg(what: &str, text: &str) -> Result<Expr> {
    parse_expr(text).map_err(|err| {
        SyntaxError {
            source: what.to_string(),
            ad_line: None,
            err,
        }
        .into()
    })
}

/// Reads inputs named on the command line, and refuses to read stdin twice
/// (the second read would silently see nothing).
#[derive(Default)]
struct Inputs {
    stdin_used: bool,
}

impl Inputs {
    /// Returns the name to use in messages and the whole text of `path`.
    fn read(&mut self, path: &Path) -> Result<(String, String)> {
        if path == Path::new("-") {
            if self.stdin_used {
                bail!("stdin (`-`) can be read only once");
            }
            self.stdin_used = true;
            let mut text = String::new();
            io::stdin()
                .lock()
                .read_to_string(&mut text)
                .context("cannot read stdin")?;
            Ok(("<stdin>".to_string(), text))
        } else {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Ok((path.display().to_string(), text))
        }
    }
}

/// Reads a file holding one ad in either syntax.
fn read_one_ad(inputs: &mut Inputs, path: &Path) -> Result<ClassAd> {
    let (name, text) = inputs.read(path)?;
    ClassAd::parse_any(&text).map_err(|err| {
        SyntaxError {
            source: name,
            ad_line: None,
            err,
        }
        .into()
    })
}

/// 1-based line number of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    1 + text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// What `match` asks of each ad.
struct Query {
    requirements: Expr,
    rank: Option<Expr>,
    list: bool,
}

/// Results of `match` over some ads, in input order.
#[derive(Default)]
struct Tally {
    /// Ads for which the requirements are `true`.
    matched: usize,
    /// Ads read.
    ads: usize,
    /// With `--list`: (rank, name) of each matching ad.
    listed: Vec<(f64, String)>,
}

/// A parse error and the byte offset, in the whole input, of the ad it is in.
type AdError = (usize, ParseError);

/// Inputs smaller than this are not worth a thread each.
const MIN_PIECE_BYTES: usize = 256 * 1024;
/// Pieces per thread: more than one, so that a thread that drew cheap ads
/// takes another piece instead of idling while the others finish.
const PIECES_PER_THREAD: usize = 4;

/// Parses every ad of `text` and evaluates the query against it, on all
/// cores. The result is the same as a serial pass: tallies are combined in
/// input order, and the error reported is the first one in the input.
fn match_input(q: &Query, text: &str) -> std::result::Result<Tally, AdError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pieces = (text.len() / MIN_PIECE_BYTES).clamp(1, threads * PIECES_PER_THREAD);
    let cuts = cut_points(text, pieces);
    if cuts.len() <= 2 {
        return match_piece(q, text, 0);
    }
    let n = cuts.len() - 1;
    let results: Vec<Mutex<Option<std::result::Result<Tally, AdError>>>> =
        (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    // Pieces after the first failed one need not be read: only the first
    // error in input order is reported.
    let first_failed = AtomicUsize::new(usize::MAX);
    std::thread::scope(|s| {
        for _ in 0..threads.min(n) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n || i > first_failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let r = match_piece(q, &text[cuts[i]..cuts[i + 1]], cuts[i]);
                    if r.is_err() {
                        first_failed.fetch_min(i, Ordering::Relaxed);
                    }
                    *results[i].lock().expect("no thread panics holding it") = Some(r);
                }
            });
        }
    });
    let mut total = Tally::default();
    for slot in results {
        let r = slot
            .into_inner()
            .expect("no thread panics holding it")
            // Pieces are taken in order, so every piece before the first
            // failure has been done.
            .expect("every piece up to the first failure is done");
        let t = r?;
        total.matched += t.matched;
        total.ads += t.ads;
        total.listed.extend(t.listed);
    }
    Ok(total)
}

/// `match` over one piece of the input; `base` is the piece's byte offset in it.
fn match_piece(q: &Query, piece: &str, base: usize) -> std::result::Result<Tally, AdError> {
    // Parsed once per piece rather than shared, which would need the
    // interned name to be built on every evaluation.
    let name = q
        .list
        .then(|| parse_expr("MY.Name").expect("a constant expression parses"));
    let mut t = Tally::default();
    for (offset, ad_text) in AdSpans::new(piece) {
        let ad = ClassAd::parse_any(ad_text).map_err(|e| (base + offset, e))?;
        t.ads += 1;
        let mut ev = Evaluator::new(Some(&ad), None);
        if !ev.eval_top(&q.requirements).is_true() {
            continue;
        }
        t.matched += 1;
        if let Some(name) = &name {
            let rank = q
                .rank
                .as_ref()
                .and_then(|r| ev.eval_top(r).as_f64())
                .filter(|r| !r.is_nan())
                .unwrap_or(0.0);
            let name = match ev.eval_top(name) {
                Value::Str(s) => s.to_string(),
                other => other.to_string(),
            };
            t.listed.push((rank, name));
        }
    }
    Ok(t)
}

/// True for a line of only whitespace.
fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// True for a line of a comment only (old syntax skips these).
fn is_comment(line: &[u8]) -> bool {
    line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'#')
}

/// The ads in a text, as (byte offset, text) pairs, without copying.
///
/// An ad starts at the first non-blank line after a blank line (or at the
/// start), and at every line whose first character is `[`: so old-syntax ads
/// are separated by blank lines, new-syntax ads may sit one per line, and a
/// new-syntax ad may also span lines (as long as no line inside it is blank or
/// starts with `[`). A run of lines holding only `#` comments is not an ad.
///
/// The rule looks at no line but the current and the previous one, which is
/// what lets [`cut_points`] cut a text anywhere an ad starts and get the same
/// ads as reading it whole.
struct AdSpans<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> AdSpans<'a> {
    fn new(text: &'a str) -> AdSpans<'a> {
        AdSpans { text, pos: 0 }
    }

    /// The line starting at `pos` without its `\n`, and where the next line starts.
    fn line_at(&self, pos: usize) -> (&'a [u8], usize) {
        let rest = &self.text[pos..];
        match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(i) => (&rest.as_bytes()[..i], pos + i + 1),
            None => (rest.as_bytes(), self.text.len()),
        }
    }
}

impl<'a> Iterator for AdSpans<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<(usize, &'a str)> {
        loop {
            // Skip blank lines up to the ad's first line.
            while self.pos < self.text.len() {
                let (line, next) = self.line_at(self.pos);
                if !is_blank(line) {
                    break;
                }
                self.pos = next;
            }
            if self.pos >= self.text.len() {
                return None;
            }
            let start = self.pos;
            let mut end = start;
            let mut content = false;
            loop {
                let (line, next) = self.line_at(self.pos);
                if self.pos > start && (is_blank(line) || line.first() == Some(&b'[')) {
                    break;
                }
                content |= !is_comment(line);
                end = self.pos + line.len();
                self.pos = next;
                if self.pos >= self.text.len() {
                    break;
                }
            }
            if content {
                return Some((start, &self.text[start..end]));
            }
        }
    }
}

/// Byte offsets that cut `text` into about `pieces` pieces, each starting where
/// an ad starts (see [`AdSpans`]): `0`, the cuts in increasing order, then
/// `text.len()`.
fn cut_points(text: &str, pieces: usize) -> Vec<usize> {
    let bytes = text.as_bytes();
    let mut cuts = vec![0];
    for k in 1..pieces {
        let target = text.len() / pieces * k;
        let from = (*cuts.last().expect("starts with 0")).max(target);
        // The first line starting after `from`: its start is the first
        // candidate, so the previous line is whole and can be judged blank.
        let Some(nl) = bytes[from..].iter().position(|&b| b == b'\n') else {
            break;
        };
        let mut prev_blank = is_blank(&bytes[line_start(bytes, from)..from + nl]);
        let mut pos = from + nl + 1;
        while pos < bytes.len() {
            let end = bytes[pos..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| pos + i);
            let line = &bytes[pos..end];
            let blank = is_blank(line);
            if line.first() == Some(&b'[') || (prev_blank && !blank) {
                break;
            }
            prev_blank = blank;
            pos = end + 1;
        }
        if pos >= bytes.len() {
            break;
        }
        if pos > *cuts.last().expect("starts with 0") {
            cuts.push(pos);
        }
    }
    cuts.push(text.len());
    cuts
}

/// Start of the line containing byte `pos`.
fn line_start(bytes: &[u8], pos: usize) -> usize {
    bytes[..pos]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIXED: &str = "# a pool\n\nName = \"a\"\nMemory = 1\n\n\n  \n# b\nName = \"b\"\r\n\r\n\
        [ Name = \"c\" ]\n[ Name = \"d\";\n  Memory = 4 ]\n\nName = \"e\"\n[ Name = \"f\" ]\n\n# end\n";

    fn spans(text: &str) -> Vec<(usize, &str)> {
        AdSpans::new(text).collect()
    }

    #[test]
    fn ads_are_split_at_blank_lines_and_brackets() {
        let names: Vec<&str> = spans(MIXED).iter().map(|s| s.1).collect();
        assert_eq!(
            names,
            [
                "Name = \"a\"\nMemory = 1",
                "# b\nName = \"b\"\r",
                "[ Name = \"c\" ]",
                "[ Name = \"d\";\n  Memory = 4 ]",
                "Name = \"e\"",
                "[ Name = \"f\" ]",
            ]
        );
        for (offset, ad) in spans(MIXED) {
            assert!(MIXED[offset..].starts_with(ad));
        }
    }

    #[test]
    fn no_ads_in_blank_text() {
        assert!(spans("").is_empty());
        assert!(spans("\n \n\t\n").is_empty());
        assert!(spans("# only a comment\n").is_empty());
    }

    #[test]
    fn any_cut_gives_the_same_ads() {
        let whole = spans(MIXED);
        for pieces in 1..=MIXED.len() {
            let cuts = cut_points(MIXED, pieces);
            assert_eq!(cuts[0], 0);
            assert_eq!(*cuts.last().unwrap(), MIXED.len());
            assert!(cuts.windows(2).all(|w| w[0] < w[1]), "{cuts:?}");
            let mut joined = Vec::new();
            for w in cuts.windows(2) {
                joined.extend(AdSpans::new(&MIXED[w[0]..w[1]]).map(|(o, s)| (o + w[0], s)));
            }
            assert_eq!(joined, whole, "cuts {cuts:?}");
        }
    }

    #[test]
    fn syntax_errors_name_the_file_line() {
        let err = ClassAd::parse_old("A = 1\nB = (2 +\n").unwrap_err();
        let e = SyntaxError {
            source: "pool.ads".into(),
            ad_line: Some(10),
            err,
        };
        let msg = e.to_string();
        assert!(
            msg.starts_with("syntax error in pool.ads at line 11, column "),
            "{msg}"
        );
        assert!(msg.contains("(in the ad starting at line 10)"), "{msg}");
    }
}
