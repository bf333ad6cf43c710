//! Parsing text into [`Expr`] trees and [`ClassAd`] records.
//!
//! pest recognises the grammar (`grammar.pest`); this module turns pest's
//! pairs into our own AST, applying operator precedence with an explicit
//! stack (no recursion per operator), so pest stays an implementation detail.
//! Nesting is bounded before pest runs, so no input can exhaust the stack.
//! Text is first offered to the hand-written parser in `fastparse`, which
//! accepts the same language much faster; pest handles whatever it declines
//! and produces every error message.

use std::sync::Arc;

use pest::Parser;
use pest::iterators::Pair;

use crate::ast::{BinaryOp, Call, Expr, RefScope, UnaryOp};
use crate::builtins;
use crate::fastparse::OldLine;
use crate::record::ClassAd;
use crate::symbol::Name;
use crate::value::Value;

#[path = "parse_error.rs"]
mod error;
pub use error::ParseError;
use error::from_pest;

#[derive(pest_derive::Parser)]
#[grammar = "grammar.pest"]
struct Grammar;

/// Deepest nesting of brackets (`(`, `[`, `{`) and conditionals (`? :`)
/// accepted by the parser. Real expressions nest a handful of levels; the
/// bound keeps the recursive parsers far from the end of a 2 MB thread stack,
/// even in debug builds.
pub const MAX_NESTING: usize = 64;
/// Deepest expression tree accepted by the parser (long operator chains included).
pub const MAX_TREE_DEPTH: usize = 1000;

/// Rejects nesting deeper than [`MAX_NESTING`] before pest (which recurses) sees the text.
///
/// Brackets nest until they close. A conditional's `?` nests its branches
/// until the expression it belongs to ends: at the enclosing closing bracket,
/// or at a `,` or `;` separating it from the next element. `?:` does not nest.
fn check_nesting(text: &str) -> Result<(), ParseError> {
    let bytes = text.as_bytes();
    // true for a bracket, false for a conditional
    let mut stack: Vec<bool> = Vec::new();
    let pop_conditionals = |stack: &mut Vec<bool>| {
        while stack.last() == Some(&false) {
            stack.pop();
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => match text[i + 2..].find("*/") {
                Some(end) => i += 2 + end + 1,
                None => break,
            },
            b @ (b'(' | b'[' | b'{' | b'?') => {
                let elvis = b == b'?'
                    && bytes[i + 1..]
                        .iter()
                        .find(|c| !c.is_ascii_whitespace())
                        .is_some_and(|&c| c == b':');
                if !elvis {
                    stack.push(b != b'?');
                    if stack.len() > MAX_NESTING {
                        return Err(ParseError::at(
                            text,
                            i,
                            format!("expression nested deeper than {MAX_NESTING} levels"),
                        ));
                    }
                }
            }
            b')' | b']' | b'}' => {
                pop_conditionals(&mut stack);
                stack.pop();
            }
            b',' | b';' => pop_conditionals(&mut stack),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Runs one public parse of `text`, failing it when a name it brings was
/// refused by the bounds of the symbol table (see `symbol`): what it built
/// then holds placeholders and is dropped here.
fn bounded<T>(text: &str, parse: impl FnOnce() -> Result<T, ParseError>) -> Result<T, ParseError> {
    let guard = crate::symbol::ParseGuard::start();
    let out = parse();
    match guard.refused() {
        None => out,
        Some(why) => Err(ParseError::at(text, 0, format!("refused: {why}"))),
    }
}

/// Parses one expression.
pub fn parse_expr(text: &str) -> Result<Expr, ParseError> {
    bounded(text, || match crate::fastparse::expr(text) {
        Some(e) => Ok(e),
        None => parse_expr_pest(text),
    })
}

/// Parses one expression with the fast parser only; `None` where it defers to pest.
#[doc(hidden)]
pub fn parse_expr_fast(text: &str) -> Option<Expr> {
    crate::fastparse::expr(text)
}

/// Parses one expression with the pest grammar only (no fast path): the
/// reference the fast parser is tested against.
#[doc(hidden)]
pub fn parse_expr_pest(text: &str) -> Result<Expr, ParseError> {
    bounded(text, || parse_expr_pest_inner(text))
}

fn parse_expr_pest_inner(text: &str) -> Result<Expr, ParseError> {
    check_nesting(text)?;
    let top = Grammar::parse(Rule::expression, text)
        .map_err(|e| from_pest(e, text))?
        .next()
        .expect("pest returns the expression rule");
    let e = first_inner(top);
    Builder { text }.expr(e).map(|(e, _)| e)
}

/// Parses a new-syntax ad `[ a = 1; b = 2 ]`.
pub fn parse_classad(text: &str) -> Result<ClassAd, ParseError> {
    bounded(text, || match crate::fastparse::classad(text) {
        Some(ad) => Ok(ad),
        None => parse_classad_pest(text),
    })
}

/// Parses a new-syntax ad with the pest grammar only (no fast path).
#[doc(hidden)]
pub fn parse_classad_pest(text: &str) -> Result<ClassAd, ParseError> {
    bounded(text, || parse_classad_pest_inner(text))
}

fn parse_classad_pest_inner(text: &str) -> Result<ClassAd, ParseError> {
    check_nesting(text)?;
    let top = Grammar::parse(Rule::classad_text, text)
        .map_err(|e| from_pest(e, text))?
        .next()
        .expect("pest returns the classad rule");
    Builder { text }.ad(first_inner(top)).map(|(ad, _)| ad)
}

fn is_plain_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Parses an old-syntax ad: one `Name = expr` per line. Blank lines and
/// lines starting with `#` are skipped.
pub fn parse_old_classad(text: &str) -> Result<ClassAd, ParseError> {
    let out = bounded(text, || parse_old_inner(text));
    if out.is_err() {
        // The hints may name placeholders of refused names: start afresh.
        LINE_NAMES.take();
    }
    out
}

fn parse_old_inner(text: &str) -> Result<ClassAd, ParseError> {
    // Room for a typical small ad up front; counting lines first costs more
    // than the regrowths it would save on large ones.
    let mut ad = ClassAd::with_capacity(16);
    // The names the previous ad bound, by line (see `fastparse::old_line`);
    // taken out of the thread's slot for the whole ad, put back at the end.
    let mut names = LINE_NAMES.take();
    for (n, raw) in lines(text).enumerate() {
        match crate::fastparse::old_line(raw, names.get(n)) {
            Some(OldLine::Parsed(name, e, source)) => {
                remember(&mut names, n, name);
                ad.insert_parsed(name, e, source);
                continue;
            }
            Some(OldLine::Shared(name, e)) => {
                remember(&mut names, n, name);
                ad.insert_shared(name, e);
                continue;
            }
            Some(OldLine::Blank) => continue,
            None => {}
        }
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let indent = raw.len() - raw.trim_start().len();
        let lead = || raw[..indent].chars().count();
        if let Some(eq) = line.find('=') {
            let name = line[..eq].trim_end();
            let rhs = &line[eq + 1..];
            if is_plain_ident(name) && !rhs.starts_with('=') {
                let e = parse_expr(rhs)
                    .map_err(|e| e.on_line(n + 1, lead() + line[..eq + 1].chars().count(), raw))?;
                ad.insert(name, e);
                continue;
            }
        }
        // Quoted names or a missing `=`: let the grammar explain.
        check_nesting(line).map_err(|e| e.on_line(n + 1, lead(), raw))?;
        let top = Grammar::parse(Rule::old_line, line)
            .map_err(|e| from_pest(e, line).on_line(n + 1, lead(), raw))?
            .next()
            .expect("pest returns the old_line rule");
        let mut it = top.into_inner();
        let name = name_text(it.next().expect("old_line has a name"));
        let (e, _) = Builder { text: line }
            .expr(it.next().expect("old_line has an expr"))
            .map_err(|e| e.on_line(n + 1, lead(), raw))?;
        ad.insert(&name, e);
    }
    LINE_NAMES.set(names);
    Ok(ad)
}

thread_local! {
    /// The names bound by the lines of the last old-syntax ad this thread read.
    static LINE_NAMES: std::cell::Cell<Vec<Name>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Lines past this many keep no name hint: ads are rarely longer, and the
/// hints must stay small.
const LINE_NAME_HINTS: usize = 256;

/// Records that line `n` bound `name`, for the next ad's hint.
fn remember(names: &mut Vec<Name>, n: usize, name: Name) {
    if let Some(slot) = names.get_mut(n) {
        *slot = name;
    } else if n < LINE_NAME_HINTS {
        // Lines without a binding (blank, comments) hold a placeholder.
        names.resize(n, name);
        names.push(name);
    }
}

/// The lines of `text` as `str::lines` cuts them (`\n` or `\r\n` ends a
/// line, a last line without an end counts), found with SIMD search.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (line, next) = match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        rest = next;
        Some(line.strip_suffix('\r').unwrap_or(line))
    })
}

fn first_inner(p: Pair<'_, Rule>) -> Pair<'_, Rule> {
    p.into_inner().next().expect("rule has an inner pair")
}

fn name_text(p: Pair<'_, Rule>) -> String {
    match p.as_rule() {
        Rule::quoted_name => unescape(first_inner(p).as_str()),
        _ => p.as_str().to_string(),
    }
}

/// Decodes backslash escapes: C escapes, octal `\ooo`, and any other escaped
/// character stands for itself (`\q` is `q`), as in HTCondor.
pub fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else { break };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'a' => out.push('\u{7}'),
            'v' => out.push('\u{b}'),
            '0'..='7' => {
                let mut v = e.to_digit(8).expect("octal digit");
                let max = if e <= '3' { 2 } else { 1 };
                for _ in 0..max {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
            }
            other => out.push(other),
        }
    }
    out
}

pub(crate) fn infix_op(s: &str) -> BinaryOp {
    use BinaryOp::*;
    match s {
        "=?=" => Is,
        "=!=" => Isnt,
        ">>>" => UShr,
        ">>" => Shr,
        "<<" => Shl,
        "<=" => Le,
        ">=" => Ge,
        "==" => Eq,
        "!=" => Ne,
        "&&" => And,
        "||" => Or,
        "<" => Lt,
        ">" => Gt,
        "&" => BitAnd,
        "|" => BitOr,
        "^" => BitXor,
        "+" => Add,
        "-" => Sub,
        "*" => Mul,
        "/" => Div,
        "%" => Mod,
        w if w.eq_ignore_ascii_case("isnt") => IsntWord,
        w if w.eq_ignore_ascii_case("is") => IsWord,
        other => unreachable!("grammar produced unknown operator {other:?}"),
    }
}

/// The scope a `MY.`, `TARGET.` or `parent.` prefix names, if `word` is one.
pub(crate) fn scope_prefix(word: &str) -> Option<RefScope> {
    if word.eq_ignore_ascii_case("my") {
        Some(RefScope::My)
    } else if word.eq_ignore_ascii_case("target") {
        Some(RefScope::Target)
    } else if word.eq_ignore_ascii_case("parent") {
        Some(RefScope::Parent)
    } else {
        None
    }
}

pub(crate) fn prefix_op(s: &str) -> UnaryOp {
    match s {
        "!" => UnaryOp::Not,
        "-" => UnaryOp::Neg,
        "+" => UnaryOp::Plus,
        "~" => UnaryOp::BitNot,
        other => unreachable!("unknown prefix {other:?}"),
    }
}

/// Turns pest pairs into our AST, tracking tree depth.
struct Builder<'t> {
    text: &'t str,
}

type Built = Result<(Expr, usize), ParseError>;

impl Builder<'_> {
    fn too_deep(&self, p: &Pair<'_, Rule>) -> ParseError {
        ParseError::at(
            self.text,
            p.as_span().start(),
            format!("expression deeper than {MAX_TREE_DEPTH} levels"),
        )
    }

    fn check(&self, depth: usize, p: &Pair<'_, Rule>) -> Result<usize, ParseError> {
        if depth > MAX_TREE_DEPTH {
            Err(self.too_deep(p))
        } else {
            Ok(depth)
        }
    }

    fn expr(&self, p: Pair<'_, Rule>) -> Built {
        let span_pair = p.clone();
        let mut it = p.into_inner();
        let (cond, cd) = self.chain(it.next().expect("expr starts with a chain"))?;
        let Some(tail) = it.next() else {
            return Ok((cond, cd));
        };
        match tail.as_rule() {
            Rule::ternary => {
                let mut t = tail.into_inner();
                let (a, ad) = self.expr(t.next().expect("ternary has a true branch"))?;
                let (b, bd) = self.expr(t.next().expect("ternary has a false branch"))?;
                let d = self.check(cd.max(ad).max(bd) + 1, &span_pair)?;
                Ok((Expr::Cond(Box::new((cond, a, b))), d))
            }
            r => unreachable!("unexpected rule {r:?} after a chain"),
        }
    }

    /// Precedence climbing over the flat `unit (infix unit)*` sequence.
    fn chain(&self, p: Pair<'_, Rule>) -> Built {
        let span_pair = p.clone();
        let mut operands: Vec<(Expr, usize)> = Vec::new();
        let mut ops: Vec<BinaryOp> = Vec::new();
        let reduce = |operands: &mut Vec<(Expr, usize)>, op: BinaryOp| -> usize {
            let (r, rd) = operands.pop().expect("operand for reduction");
            let (l, ld) = operands.pop().expect("operand for reduction");
            let d = ld.max(rd) + 1;
            operands.push((Expr::binary(op, l, r), d));
            d
        };
        for item in span_pair.clone().into_inner() {
            match item.as_rule() {
                Rule::unit => operands.push(self.unit(item)?),
                Rule::infix => {
                    let op = infix_op(item.as_str());
                    while let Some(&top) = ops.last() {
                        if top.precedence() >= op.precedence() {
                            ops.pop();
                            let d = reduce(&mut operands, top);
                            self.check(d, &span_pair)?;
                        } else {
                            break;
                        }
                    }
                    ops.push(op);
                }
                r => unreachable!("unexpected rule {r:?} in a chain"),
            }
        }
        while let Some(op) = ops.pop() {
            let d = reduce(&mut operands, op);
            self.check(d, &span_pair)?;
        }
        Ok(operands.pop().expect("a chain has at least one operand"))
    }

    fn unit(&self, p: Pair<'_, Rule>) -> Built {
        let span_pair = p.clone();
        let mut prefixes = Vec::new();
        let mut acc: Option<(Expr, usize)> = None;
        for item in p.into_inner() {
            match item.as_rule() {
                Rule::prefix => prefixes.push(item),
                Rule::postfixed => acc = Some(self.postfixed(item)?),
                Rule::elvis_tail => {
                    let (lhs, ld) = acc.take().expect("an elvis tail follows an operand");
                    let operand = first_inner(item);
                    let (rhs, rd) = match operand.as_rule() {
                        Rule::elvis_negative => {
                            let mut it = operand.into_inner();
                            let neg = it.next().expect("elvis_negative starts with a number");
                            let (n, _) = self.primary(first_inner(neg))?;
                            let e = Expr::Unary(UnaryOp::Neg, Box::new(n));
                            self.postfixes(e, 2, it, &span_pair)?
                        }
                        _ => self.postfixed(operand)?,
                    };
                    let d = self.check(ld.max(rd) + 1, &span_pair)?;
                    acc = Some((Expr::Elvis(Box::new((lhs, rhs))), d));
                }
                r => unreachable!("unexpected rule {r:?} in a unit"),
            }
        }
        let (mut e, mut d) = acc.expect("a unit has an operand");
        for pre in prefixes.iter().rev() {
            e = Expr::Unary(prefix_op(pre.as_str()), Box::new(e));
            d += 1;
            self.check(d, &span_pair)?;
        }
        Ok((e, d))
    }

    fn postfixed(&self, p: Pair<'_, Rule>) -> Built {
        let span_pair = p.clone();
        let mut it = p.into_inner();
        let prim = it.next().expect("postfixed starts with a primary");
        let mut postfixes = it.peekable();

        // `MY.x`, `TARGET.x`, `parent.x` are scoped references, not selections.
        let (e, d) = match (prim.as_rule(), postfixes.peek()) {
            (Rule::ident, Some(sel)) if sel.as_rule() == Rule::select => {
                match scope_prefix(prim.as_str()) {
                    Some(scope) => {
                        let sel = postfixes.next().expect("peeked");
                        let name = name_text(first_inner(sel));
                        (Expr::Attr(scope, Name::new(&name)), 1)
                    }
                    None => self.primary(prim)?,
                }
            }
            _ => self.primary(prim)?,
        };
        self.postfixes(e, d, postfixes, &span_pair)
    }

    /// Applies selections and subscripts, in order, to `e` (of depth `d`).
    fn postfixes<'i>(
        &self,
        mut e: Expr,
        mut d: usize,
        postfixes: impl Iterator<Item = Pair<'i, Rule>>,
        span_pair: &Pair<'_, Rule>,
    ) -> Built {
        for post in postfixes {
            match post.as_rule() {
                Rule::select => {
                    let name = name_text(first_inner(post));
                    e = Expr::Select(Box::new(e), Name::new(&name));
                    d += 1;
                }
                Rule::subscript => {
                    let (i, id) = self.expr(first_inner(post))?;
                    e = Expr::Index(Box::new((e, i)));
                    d = d.max(id) + 1;
                }
                r => unreachable!("unexpected postfix {r:?}"),
            }
            self.check(d, span_pair)?;
        }
        Ok((e, d))
    }

    fn primary(&self, p: Pair<'_, Rule>) -> Built {
        let e = match p.as_rule() {
            // Like strtoll, an integer too large for 64 bits saturates.
            Rule::integer => Expr::Literal(Value::Int(p.as_str().parse().unwrap_or(i64::MAX))),
            Rule::real => Expr::Literal(Value::Real(
                p.as_str()
                    .parse()
                    .expect("grammar only accepts valid reals"),
            )),
            Rule::string => Expr::Literal(Value::str(unescape(first_inner(p).as_str()))),
            Rule::keyword => {
                let s = p.as_str();
                Expr::Literal(if s.eq_ignore_ascii_case("true") {
                    Value::Bool(true)
                } else if s.eq_ignore_ascii_case("false") {
                    Value::Bool(false)
                } else if s.eq_ignore_ascii_case("undefined") {
                    Value::Undefined
                } else {
                    Value::Error
                })
            }
            Rule::ident | Rule::quoted_name => Expr::Attr(RefScope::Bare, Name::new(&name_text(p))),
            Rule::paren => {
                let (e, d) = self.expr(first_inner(p))?;
                return Ok((Expr::Paren(Box::new(e)), d + 1));
            }
            Rule::list => {
                let mut items = Vec::new();
                let mut d = 0;
                for x in p.into_inner() {
                    let (e, xd) = self.expr(x)?;
                    d = d.max(xd);
                    items.push(e);
                }
                return Ok((Expr::List(items), d + 1));
            }
            Rule::call => {
                let mut it = p.into_inner();
                let name = it.next().expect("call has a name").as_str();
                let mut args = Vec::new();
                let mut d = 0;
                for x in it {
                    let (e, xd) = self.expr(x)?;
                    d = d.max(xd);
                    args.push(e);
                }
                let call = Call {
                    name: Name::new(name),
                    func: builtins::lookup(name),
                    args,
                };
                return Ok((Expr::Call(Box::new(call)), d + 1));
            }
            Rule::ad => {
                let (ad, d) = self.ad(p)?;
                return Ok((Expr::Ad(Arc::new(ad)), d + 1));
            }
            r => unreachable!("unexpected primary {r:?}"),
        };
        Ok((e, 1))
    }

    fn ad(&self, p: Pair<'_, Rule>) -> Result<(ClassAd, usize), ParseError> {
        let mut ad = ClassAd::new();
        let mut d = 0;
        for def in p.into_inner() {
            let mut it = def.into_inner();
            let name = name_text(it.next().expect("attr_def has a name"));
            let (e, ed) = self.expr(it.next().expect("attr_def has an expr"))?;
            d = d.max(ed);
            ad.insert(&name, e);
        }
        Ok((ad, d))
    }
}
