//! A hand-written recursive-descent parser for the success path.
//!
//! pest (`grammar.pest`) is the grammar of record and explains every syntax
//! error, but it spends about 4 µs on each attribute of a machine ad, far
//! from the 300,000 ads per second that pools need. This parser accepts the
//! same language and builds the same tree in a fraction of that time. It
//! never reports errors: on anything it does not accept (including nesting
//! deeper than it cares to follow) it returns `None` and the caller lets pest
//! decide, so the two can only disagree in speed, never in meaning. A
//! differential test checks that whatever this parser accepts, pest accepts
//! with an identical tree.

use std::sync::Arc;

use crate::ast::{BinaryOp, Call, Expr, UnaryOp};
use crate::builtins;
use crate::parse::{infix_op, prefix_op, scope_prefix, unescape};
use crate::record::ClassAd;
use crate::symbol::Name;
use crate::value::Value;

/// Beyond this tree depth the fast parser gives up and lets pest (which
/// enforces the real limit) decide.
const FAST_MAX_DEPTH: usize = 256;

/// Parses one whole expression, or `None` to defer to pest.
pub(crate) fn expr(text: &str) -> Option<Expr> {
    let mut p = Fast::new(text);
    let (e, _) = p.expr()?;
    p.at_end().then_some(e)
}

/// Parses one whole new-syntax ad, or `None` to defer to pest.
pub(crate) fn classad(text: &str) -> Option<ClassAd> {
    let mut p = Fast::new(text);
    if !p.eat(b'[') {
        return None;
    }
    let (ad, _) = p.ad_body()?;
    p.at_end().then_some(ad)
}

/// One line of an old-syntax ad. `Some(None)` for a blank or `#` comment
/// line, `Some(Some(..))` for `Name = expr`, `None` to defer to the slow path.
/// `hint` is the name the same line of the previous ad bound: ads written by
/// one daemon list their attributes in the same order, and comparing the
/// spelling with it costs less than looking the name up.
pub(crate) fn old_line<'a>(line: &'a str, hint: Option<&Name>) -> Option<OldLine<'a>> {
    let mut p = Fast::new(line);
    match p.peek() {
        None => return Some(OldLine::Blank),
        Some(b'#') => return Some(OldLine::Blank),
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        Some(_) => return None,
    }
    let name = p.ident();
    if !p.eat(b'=') || p.s.get(p.pos) == Some(&b'=') {
        return None;
    }
    let name = match hint {
        Some(h) if h.text == name => *h,
        _ => Name::new(name),
    };
    let source = &line[p.pos..];
    // Most lines of a machine ad bind a lone literal: read it without the
    // climb through expr, chain, unit and postfixed, and without looking
    // for a shared tree (literals are never shared).
    if let Some(e) = p.lone_literal() {
        return Some(OldLine::Parsed(name, e, source));
    }
    if let Some(e) = crate::record::recent_by_source(name.sym, source) {
        return Some(OldLine::Shared(name, e));
    }
    let (e, _) = p.expr()?;
    p.at_end().then_some(OldLine::Parsed(name, e, source))
}

/// What [`old_line`] makes of a line it can read.
pub(crate) enum OldLine<'a> {
    /// Nothing to bind (blank or a comment).
    Blank,
    /// A binding, parsed from its right-hand side (the text after `=`).
    Parsed(Name, Expr, &'a str),
    /// A binding whose right-hand side repeats the text of the tree the
    /// previous ad bound to the same name, shared without parsing.
    Shared(Name, std::sync::Arc<Expr>),
}

type Built = Option<(Expr, usize)>;

/// Deepest bracket nesting the fast parser follows before deferring to pest;
/// it bounds the recursion, so no input can exhaust the stack here.
/// It must not exceed `parse::MAX_NESTING`: each bracket or conditional
/// level costs at least one `expr` level here, so whatever this parser
/// accepts also passes pest's nesting check.
const FAST_MAX_NESTING: usize = crate::parse::MAX_NESTING;

struct Fast<'a> {
    text: &'a str,
    s: &'a [u8],
    pos: usize,
    nesting: usize,
}

/// Which bytes continue an identifier (letters, digits, `_`): one load per
/// byte where the comparisons cost several, on the hottest loop of parsing.
static IDENT_CHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'_';
        b += 1;
    }
    t
};

#[inline]
fn is_ident_char(b: u8) -> bool {
    IDENT_CHAR[b as usize]
}

impl<'a> Fast<'a> {
    fn new(text: &'a str) -> Fast<'a> {
        Fast {
            text,
            s: text.as_bytes(),
            pos: 0,
            nesting: 0,
        }
    }

    /// Skips what pest's implicit WHITESPACE and COMMENT rules skip.
    #[inline]
    fn ws(&mut self) {
        // Called before every token: settle the common case in one compare.
        match self.s.get(self.pos) {
            Some(&b) if b > b' ' && b != b'/' => {}
            None => {}
            _ => self.ws_slow(),
        }
    }

    /// An unterminated block comment is not skipped (pest would fail on it).
    fn ws_slow(&mut self) {
        loop {
            match self.s.get(self.pos) {
                Some(b' ' | b'\t' | b'\r' | b'\n') => self.pos += 1,
                Some(b'/') => match self.s.get(self.pos + 1) {
                    Some(b'/') => {
                        while self.pos < self.s.len() && self.s[self.pos] != b'\n' {
                            self.pos += 1;
                        }
                    }
                    Some(b'*') => match self.text[self.pos + 2..].find("*/") {
                        Some(end) => self.pos += 2 + end + 2,
                        None => return,
                    },
                    _ => return,
                },
                _ => return,
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// A number, string, `true` or `false` that is all the rest of the
    /// text, as [`Fast::expr`] would build it (the same [`Fast::primary`]
    /// reads it, and a lone primary climbs out of `expr` unwrapped); `None`,
    /// with the cursor back where it was, for anything else.
    fn lone_literal(&mut self) -> Option<Expr> {
        let save = self.pos;
        let e = match self.peek()? {
            b'0'..=b'9' | b'"' => self.primary().map(|(e, _)| e),
            b't' | b'T' | b'f' | b'F' => {
                let word = self.ident();
                if word.eq_ignore_ascii_case("true") {
                    Some(Expr::Literal(Value::Bool(true)))
                } else if word.eq_ignore_ascii_case("false") {
                    Some(Expr::Literal(Value::Bool(false)))
                } else {
                    None
                }
            }
            _ => None,
        };
        match e {
            Some(e) if self.at_end() => Some(e),
            _ => {
                self.pos = save;
                None
            }
        }
    }

    fn expr(&mut self) -> Built {
        if self.nesting >= FAST_MAX_NESTING {
            return None;
        }
        self.nesting += 1;
        let e = self.expr_inner();
        self.nesting -= 1;
        e
    }

    fn expr_inner(&mut self) -> Built {
        let (cond, cd) = self.chain()?;
        if self.peek() != Some(b'?') {
            return Some((cond, cd));
        }
        self.pos += 1;
        if self.peek() == Some(b':') {
            // An elvis tail the unit could not take: a syntax error for pest to explain.
            return None;
        }
        let (a, ad) = self.expr()?;
        if !self.eat(b':') {
            return None;
        }
        let (b, bd) = self.expr()?;
        let d = cd.max(ad).max(bd) + 1;
        (d <= FAST_MAX_DEPTH).then(|| (Expr::Cond(Box::new((cond, a, b))), d))
    }

    /// The infix operator at the cursor, in the grammar's order of alternatives.
    fn infix(&mut self) -> Option<(BinaryOp, usize)> {
        self.ws();
        let rest = &self.s[self.pos..];
        // The end of the text, after most values: nothing to try.
        let &first = rest.first()?;
        if first.is_ascii_alphanumeric() && !matches!(first | 0x20, b'i') {
            // Only `is` and `isnt` start with a letter; no operator with a digit.
            return None;
        }
        const SYMBOLIC: &[&str] = &[
            "=?=", "=!=", ">>>", ">>", "<<", "<=", ">=", "==", "!=", "&&", "||", "<", ">", "&",
            "|", "^", "+", "-", "*", "/", "%",
        ];
        for op in SYMBOLIC {
            if rest.starts_with(op.as_bytes()) {
                return Some((infix_op(op), op.len()));
            }
        }
        for word in ["isnt", "is"] {
            let n = word.len();
            if rest.len() >= n
                && rest[..n].eq_ignore_ascii_case(word.as_bytes())
                && !rest.get(n).is_some_and(|&b| is_ident_char(b))
            {
                return Some((infix_op(word), n));
            }
        }
        None
    }

    fn chain(&mut self) -> Built {
        let first = self.unit()?;
        // Most attribute values are a single operand: no stacks for them.
        if self.infix().is_none() {
            return Some(first);
        }
        let mut operands: Vec<(Expr, usize)> = vec![first];
        let mut ops: Vec<BinaryOp> = Vec::new();
        fn reduce(operands: &mut Vec<(Expr, usize)>, op: BinaryOp) -> Option<()> {
            let (r, rd) = operands.pop()?;
            let (l, ld) = operands.pop()?;
            let d = ld.max(rd) + 1;
            if d > FAST_MAX_DEPTH {
                return None;
            }
            operands.push((Expr::binary(op, l, r), d));
            Some(())
        }
        while let Some((op, len)) = self.infix() {
            self.pos += len;
            while let Some(&top) = ops.last() {
                if top.precedence() < op.precedence() {
                    break;
                }
                ops.pop();
                reduce(&mut operands, top)?;
            }
            ops.push(op);
            operands.push(self.unit()?);
        }
        while let Some(op) = ops.pop() {
            reduce(&mut operands, op)?;
        }
        operands.pop()
    }

    fn unit(&mut self) -> Built {
        let mut prefixes: Vec<UnaryOp> = Vec::new();
        while let Some(b @ (b'!' | b'-' | b'+' | b'~')) = self.peek() {
            self.pos += 1;
            prefixes.push(prefix_op(match b {
                b'!' => "!",
                b'-' => "-",
                b'+' => "+",
                _ => "~",
            }));
        }
        let (mut e, mut d) = self.postfixed()?;
        loop {
            let save = self.pos;
            if self.peek() != Some(b'?') {
                break;
            }
            self.pos += 1;
            if self.peek() != Some(b':') {
                // A ternary: the chain ends here.
                self.pos = save;
                break;
            }
            self.pos += 1;
            let (rhs, rd) = if self.peek() == Some(b'-') {
                self.pos += 1;
                let (n, _) = self.number()?;
                (Expr::Unary(UnaryOp::Neg, Box::new(n)), 2)
            } else {
                self.postfixed()?
            };
            d = d.max(rd) + 1;
            e = Expr::Elvis(Box::new((e, rhs)));
            if d > FAST_MAX_DEPTH {
                return None;
            }
        }
        // Checked before building, so a flood of prefixes never makes a deep tree.
        if d + prefixes.len() > FAST_MAX_DEPTH {
            return None;
        }
        for op in prefixes.into_iter().rev() {
            e = Expr::Unary(op, Box::new(e));
            d += 1;
        }
        (d <= FAST_MAX_DEPTH).then_some((e, d))
    }

    fn postfixed(&mut self) -> Built {
        let start = self.peek()?;
        let (mut e, mut d) = if start.is_ascii_alphabetic() || start == b'_' {
            let word = self.ident();
            let maybe_scope = matches!(word.len(), 2 | 6);
            match maybe_scope.then(|| scope_prefix(word)).flatten() {
                Some(scope) if self.peek() == Some(b'.') => {
                    self.pos += 1;
                    let name = self.attr_name()?;
                    (Expr::Attr(scope, name), 1)
                }
                _ => self.word_primary(word)?,
            }
        } else {
            self.primary()?
        };
        loop {
            match self.peek() {
                Some(b'.') => {
                    self.pos += 1;
                    let name = self.attr_name()?;
                    e = Expr::Select(Box::new(e), name);
                    d += 1;
                }
                Some(b'[') => {
                    self.pos += 1;
                    let (i, id) = self.expr()?;
                    if !self.eat(b']') {
                        return None;
                    }
                    e = Expr::Index(Box::new((e, i)));
                    d = d.max(id) + 1;
                }
                _ => break,
            }
            if d > FAST_MAX_DEPTH {
                return None;
            }
        }
        Some((e, d))
    }

    /// Reads an identifier at the cursor (the caller checked its first character).
    fn ident(&mut self) -> &'a str {
        let start = self.pos;
        while self.pos < self.s.len() && is_ident_char(self.s[self.pos]) {
            self.pos += 1;
        }
        &self.text[start..self.pos]
    }

    /// A primary that starts with a word: keyword literal, call or attribute.
    fn word_primary(&mut self, word: &str) -> Built {
        // Keywords start with one of these letters; most names skip the checks.
        if !matches!(word.as_bytes()[0] | 0x20, b't' | b'f' | b'u' | b'e' | b'i') {
            return self.call_or_attr(word);
        }
        let lit = |v| Some((Expr::Literal(v), 1));
        if word.eq_ignore_ascii_case("true") {
            return lit(Value::Bool(true));
        }
        if word.eq_ignore_ascii_case("false") {
            return lit(Value::Bool(false));
        }
        if word.eq_ignore_ascii_case("undefined") {
            return lit(Value::Undefined);
        }
        if word.eq_ignore_ascii_case("error") {
            return lit(Value::Error);
        }
        if word.eq_ignore_ascii_case("is") || word.eq_ignore_ascii_case("isnt") {
            return None;
        }
        self.call_or_attr(word)
    }

    fn call_or_attr(&mut self, word: &str) -> Built {
        if self.peek() == Some(b'(') {
            self.pos += 1;
            let mut args = Vec::new();
            let mut d = 0;
            if !self.eat(b')') {
                loop {
                    let (a, ad) = self.expr()?;
                    d = d.max(ad);
                    args.push(a);
                    if self.eat(b')') {
                        break;
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            let call = Call {
                name: Name::new(word),
                func: builtins::lookup(word),
                args,
            };
            return Some((Expr::Call(Box::new(call)), d + 1));
        }
        Some((Expr::Attr(crate::ast::RefScope::Bare, Name::new(word)), 1))
    }

    /// An attribute name after `.` or in an ad: identifier (not reserved) or `'quoted'`.
    fn attr_name(&mut self) -> Option<Name> {
        match self.peek()? {
            b'\'' => {
                let raw = self.quoted(b'\'')?;
                Some(Name::new(&unescape(raw)))
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let word = self.ident();
                let reserved = ["true", "false", "undefined", "error", "is", "isnt"]
                    .iter()
                    .any(|r| r.eq_ignore_ascii_case(word));
                (!reserved).then(|| Name::new(word))
            }
            _ => None,
        }
    }

    /// The raw text between `q` quotes (escapes not yet decoded); the cursor is on the opening quote.
    fn quoted(&mut self, q: u8) -> Option<&'a str> {
        let start = self.pos + 1;
        let mut i = start;
        // Jump from one quote or backslash to the next (SIMD search).
        while let Some(k) = memchr::memchr2(q, b'\\', self.s.get(i..)?) {
            i += k;
            if self.s[i] == q {
                self.pos = i + 1;
                return Some(&self.text[start..i]);
            }
            i += 2;
        }
        None
    }

    fn number(&mut self) -> Built {
        self.ws();
        let s = self.s;
        let start = self.pos;
        let mut i = start;
        // The value of the digits, read on the way: exact up to 18 digits,
        // which spares parsing the text again for the common integer.
        let mut acc: u64 = 0;
        while i < s.len() && s[i].is_ascii_digit() {
            acc = acc.wrapping_mul(10).wrapping_add(u64::from(s[i] - b'0'));
            i += 1;
        }
        let int_digits = i - start;
        let mut is_real = false;
        if s.get(i) == Some(&b'.') && s.get(i + 1).is_some_and(u8::is_ascii_digit) {
            is_real = true;
            i += 1;
            while i < s.len() && s[i].is_ascii_digit() {
                i += 1;
            }
        } else if int_digits == 0 {
            return None;
        }
        if matches!(s.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(s.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            if s.get(j).is_some_and(u8::is_ascii_digit) {
                while j < s.len() && s[j].is_ascii_digit() {
                    j += 1;
                }
                is_real = true;
                i = j;
            }
        }
        if s.get(i).is_some_and(|&b| is_ident_char(b) || b == b'.') {
            return None;
        }
        let text = &self.text[start..i];
        self.pos = i;
        let v = if is_real {
            Value::Real(text.parse().ok()?)
        } else {
            if text.len() > 1 && text.starts_with('0') {
                return None;
            }
            if int_digits <= 18 {
                // At most 18 digits: below 10^18, so it fits and `acc` is exact.
                Value::Int(acc as i64)
            } else {
                // Like strtoll, an integer too large for 64 bits saturates.
                Value::Int(text.parse().unwrap_or(i64::MAX))
            }
        };
        Some((Expr::Literal(v), 1))
    }

    fn primary(&mut self) -> Built {
        match self.peek()? {
            b'0'..=b'9' | b'.' => self.number(),
            b'"' => {
                let raw = self.quoted(b'"')?;
                let s: Arc<str> = if raw.contains('\\') {
                    unescape(raw).into()
                } else {
                    raw.into()
                };
                Some((Expr::Literal(Value::Str(s)), 1))
            }
            b'\'' => {
                let name = self.attr_name()?;
                Some((Expr::Attr(crate::ast::RefScope::Bare, name), 1))
            }
            b'(' => {
                self.pos += 1;
                let (e, d) = self.expr()?;
                self.eat(b')').then(|| (Expr::Paren(Box::new(e)), d + 1))
            }
            b'{' => {
                self.pos += 1;
                let mut items = Vec::new();
                let mut d = 0;
                if !self.eat(b'}') {
                    loop {
                        let (x, xd) = self.expr()?;
                        d = d.max(xd);
                        items.push(x);
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                Some((Expr::List(items), d + 1))
            }
            b'[' => {
                self.pos += 1;
                let (ad, d) = self.ad_body()?;
                Some((Expr::Ad(Arc::new(ad)), d + 1))
            }
            _ => None,
        }
    }

    /// The inside of `[ ... ]` after the opening bracket, through the closing one.
    fn ad_body(&mut self) -> Option<(ClassAd, usize)> {
        let mut ad = ClassAd::new();
        let mut d = 0;
        if self.eat(b']') {
            return Some((ad, 0));
        }
        loop {
            let name = self.attr_name()?;
            if !self.eat(b'=') {
                return None;
            }
            let (e, ed) = self.expr()?;
            d = d.max(ed);
            ad.insert_name(name, e);
            if self.eat(b']') {
                return Some((ad, d));
            }
            if !self.eat(b';') {
                return None;
            }
            if self.eat(b']') {
                return Some((ad, d));
            }
        }
    }
}
