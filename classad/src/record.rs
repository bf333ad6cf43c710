//! `ClassAd` records: named attributes bound to expressions.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::ast::Expr;
use crate::eval::{Evaluator, eval_with};
use crate::parse::{self, ParseError};
use crate::symbol::{Name, Symbol};
use crate::value::{ShortStr, Value, ValueRef};

/// A ClassAd: a set of attributes, each bound to an expression. Names ignore
/// case; the spelling of the first insertion is kept for printing.
///
/// Lookup compares interned symbols, so evaluating an attribute never hashes
/// or lowercases a string. An ad of up to [`INDEX_FROM`] attributes is
/// searched in order; a larger one keeps a hash index too, so that inserting
/// and finding an attribute cost the same in an ad of 200,000 attributes as
/// in one of 50 (a list search made parsing such an ad quadratic: 11 s).
#[derive(Clone, Default)]
pub struct ClassAd {
    /// A summary of the first attributes, kept inline (see [`Head`]).
    head: Head,
    /// All attributes, in insertion order.
    attrs: Vec<Attr>,
    /// Position in `attrs` by symbol, once there are more than
    /// [`INDEX_FROM`] attributes (boxed: small ads, the matchmaking hot
    /// path, pay one null pointer for it).
    index: Option<Box<Index>>,
}

/// Above this many attributes an ad keeps an [`Index`]. Below, a scan of the
/// attributes beyond the inline ones is as fast as hashing and costs no
/// memory; above, it is not: evaluating the last attribute of 10,000 ads
/// took 26 ns per ad with 24 attributes, 48 ns with 32 and 191 ns with 48
/// by scanning, 22-32 ns through the index (release build).
const INDEX_FROM: usize = 24;

/// Attribute positions by symbol id.
type Index = HashMap<u32, u32, BuildHasherDefault<IdHasher>>;

/// Hashes a symbol id by one multiplication. Ids are small consecutive
/// integers handed out by the interner, not chosen by whoever wrote the ad
/// (a flood of distinct names costs interner memory, not collisions here),
/// so spreading their bits is all a hash must do.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// One attribute of a [`ClassAd`].
#[derive(Clone, Debug)]
struct Attr {
    sym: Symbol,
    /// The name as first written, for printing.
    name: &'static str,
    expr: Bound,
}

/// An attribute's expression: a literal kept in place, or anything else
/// behind an `Arc`, possibly shared with other ads (see [`share`]).
#[derive(Clone, Debug)]
enum Bound {
    Literal(Expr),
    Shared(Arc<Expr>),
}

impl Bound {
    #[inline]
    fn expr(&self) -> &Expr {
        match self {
            Bound::Literal(e) => e,
            Bound::Shared(e) => e,
        }
    }

    fn into_expr(self) -> Expr {
        match self {
            Bound::Literal(e) => e,
            Bound::Shared(e) => Arc::unwrap_or_clone(e),
        }
    }
}

/// How many recently inserted expressions [`share`] remembers per thread.
const SHARE_SLOTS: usize = 64;

/// A recently bound expression, the name it was bound to and, when it came
/// from text, that text.
#[derive(Clone)]
struct Recent {
    sym: Symbol,
    expr: Arc<Expr>,
    source: Option<Box<str>>,
}

thread_local! {
    /// The last non-literal expression bound to each of a few attribute
    /// names (a name's slot is its symbol id modulo [`SHARE_SLOTS`]), so that
    /// identical expressions of successive ads are stored once.
    static RECENT: RefCell<Vec<Option<Recent>>> = RefCell::new(vec![None; SHARE_SLOTS]);
}

/// The tree last bound to `sym` if it was parsed from exactly `source`.
///
/// The same text always parses to the same tree, so an old-syntax line whose
/// right-hand side repeats the previous ad's (Requirements, Rank and the like
/// in a pool's ads) need not be parsed at all: comparing the bytes is a few
/// dozen instructions, parsing them thousands.
pub(crate) fn recent_by_source(sym: Symbol, source: &str) -> Option<Arc<Expr>> {
    RECENT.with_borrow(|recent| match &recent[sym.id() as usize % SHARE_SLOTS] {
        Some(r) if r.sym == sym && r.source.as_deref() == Some(source) => Some(r.expr.clone()),
        _ => None,
    })
}

/// Prepares `expr` to be bound to `sym`, sharing it with the previous ad that
/// bound the same name to an identical expression; `source` is the text it
/// was parsed from, if any (see [`recent_by_source`]).
///
/// Pools are made of ads written by the same daemons, whose Requirements,
/// Rank and the like are the same text in every ad (HTCondor caches
/// expressions for the same reason). Stored once, such a tree stays in cache
/// while a matchmaker evaluates it against ad after ad; parsed separately,
/// each copy is scattered in the heap among the parser's garbage, and
/// walking it costs a cache miss per node.
fn share(sym: Symbol, expr: Expr, source: Option<&str>) -> Bound {
    if matches!(expr, Expr::Literal(_)) {
        return Bound::Literal(expr);
    }
    RECENT.with_borrow_mut(|recent| {
        let slot = &mut recent[sym.id() as usize % SHARE_SLOTS];
        if let Some(r) = slot
            && r.sym == sym
            && same_tree(&r.expr, &expr)
        {
            if source.is_some() && r.source.as_deref() != source {
                r.source = source.map(Box::from);
            }
            return Bound::Shared(r.expr.clone());
        }
        let shared = Arc::new(expr);
        *slot = Some(Recent {
            sym,
            expr: shared.clone(),
            source: source.map(Box::from),
        });
        Bound::Shared(shared)
    })
}

/// Whether two trees are the same to the letter: unlike `==`, names must be
/// spelt alike and reals have the same bits, so that an ad prints exactly
/// what was parsed whichever copy it holds.
fn same_tree(a: &Expr, b: &Expr) -> bool {
    match (a, b) {
        (Expr::Literal(x), Expr::Literal(y)) => same_literal(x, y),
        (Expr::Attr(s, m), Expr::Attr(t, n)) => s == t && m.text == n.text,
        (Expr::Select(x, m), Expr::Select(y, n)) => m.text == n.text && same_tree(x, y),
        (Expr::Index(x), Expr::Index(y)) => same_tree(&x.0, &y.0) && same_tree(&x.1, &y.1),
        (Expr::Unary(p, x), Expr::Unary(q, y)) => p == q && same_tree(x, y),
        (Expr::Binary(p, x), Expr::Binary(q, y)) => {
            p == q && same_tree(&x.0, &y.0) && same_tree(&x.1, &y.1)
        }
        (Expr::Cond(x), Expr::Cond(y)) => {
            same_tree(&x.0, &y.0) && same_tree(&x.1, &y.1) && same_tree(&x.2, &y.2)
        }
        (Expr::Elvis(x), Expr::Elvis(y)) => same_tree(&x.0, &y.0) && same_tree(&x.1, &y.1),
        (Expr::Call(x), Expr::Call(y)) => {
            x.name.text == y.name.text
                && x.func.map(|f| f as usize) == y.func.map(|f| f as usize)
                && same_trees(&x.args, &y.args)
        }
        (Expr::List(x), Expr::List(y)) => same_trees(x, y),
        (Expr::Ad(x), Expr::Ad(y)) => Arc::ptr_eq(x, y),
        (Expr::Paren(x), Expr::Paren(y)) => same_tree(x, y),
        _ => false,
    }
}

fn same_trees(a: &[Expr], b: &[Expr]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_tree(x, y))
}

/// Scalar literals that print alike; lists and ads never count as the same.
fn same_literal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Undefined, Value::Undefined) | (Value::Error, Value::Error) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Real(x), Value::Real(y)) => x.to_bits() == y.to_bits(),
        (Value::Str(x), Value::Str(y)) => x == y,
        _ => false,
    }
}

impl fmt::Debug for ClassAd {
    /// The attributes only: the inline summary repeats them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.attrs.iter().map(|a| (&a.name, a.expr.expr())))
            .finish()
    }
}

/// How many attributes a record describes inline.
const HEAD: usize = 16;

/// Symbol id of an unused inline slot: one the interner never reaches.
const NO_SYMBOL: u32 = u32::MAX;

/// What `Head::data` holds for an attribute: `TAG_EXPR` means nothing (look
/// at the expression); the others say which literal the payload is.
const TAG_EXPR: u8 = 0;
const TAG_UNDEFINED: u8 = 1;
const TAG_ERROR: u8 = 2;
const TAG_BOOL: u8 = 3;
const TAG_INT: u8 = 4;
const TAG_REAL: u8 = 5;
const TAG_STR: u8 = 6;

/// The first [`HEAD`] attributes, described inside the record: their symbol
/// ids, for those bound to small scalar literals the value, and for the
/// others the (shared) expression.
///
/// Matchmaking scans vectors of ads in order, which hardware prefetching
/// follows; any separate allocation touched per lookup (the symbol list, the
/// expression, a string) is a cache miss per ad that costs more than the
/// evaluation itself. The layout is kept small and in this order (symbols,
/// tags, payloads, expressions) so that reading the value of one of the
/// first attributes touches at most two adjacent cache lines.
#[derive(Clone, Debug)]
#[repr(C)]
struct Head {
    syms: [u32; HEAD],
    tags: [u8; HEAD],
    /// An `i64`, the bits of an `f64`, a boolean as 0/1, or a short string.
    data: [ShortStr; HEAD],
    /// The non-literal expressions (the same as in `ClassAd::attrs`): a
    /// matchmaker evaluates them ad after ad (Requirements, Rank, Start...),
    /// and reading them from here spares a cache miss on the attribute list.
    exprs: [Option<Arc<Expr>>; HEAD],
}

impl Default for Head {
    fn default() -> Head {
        Head {
            syms: [NO_SYMBOL; HEAD],
            tags: [TAG_EXPR; HEAD],
            data: [ShortStr::EMPTY; HEAD],
            exprs: [const { None }; HEAD],
        }
    }
}

impl Head {
    /// Position of `sym` among the inline symbols. (A plain scan: a
    /// branch-free vector compare of all sixteen measured slower, as an
    /// attribute is usually found among the first few.)
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn find(&self, sym: Symbol) -> Option<usize> {
        let id = sym.id();
        self.syms.iter().position(|&s| s == id)
    }

    /// Describes attribute `i` (if it has an inline slot).
    fn set(&mut self, i: usize, sym: Symbol, bound: &Bound) {
        if i >= HEAD {
            return;
        }
        self.syms[i] = sym.id();
        self.exprs[i] = match bound {
            Bound::Literal(_) => None,
            Bound::Shared(e) => Some(e.clone()),
        };
        let (tag, data) = match bound.expr() {
            Expr::Literal(v) => match v {
                Value::Undefined => (TAG_UNDEFINED, ShortStr::EMPTY),
                Value::Error => (TAG_ERROR, ShortStr::EMPTY),
                Value::Bool(b) => (TAG_BOOL, ShortStr::from_u64(u64::from(*b))),
                Value::Int(n) => (TAG_INT, ShortStr::from_u64(*n as u64)),
                Value::Real(r) => (TAG_REAL, ShortStr::from_u64(r.to_bits())),
                Value::Str(s) => match ShortStr::new(s) {
                    Some(short) => (TAG_STR, short),
                    None => (TAG_EXPR, ShortStr::EMPTY),
                },
                Value::List(_) | Value::Ad(_) => (TAG_EXPR, ShortStr::EMPTY),
            },
            _ => (TAG_EXPR, ShortStr::EMPTY),
        };
        self.tags[i] = tag;
        self.data[i] = data;
    }

    /// The inline literal of attribute `i`, if it has one.
    #[inline]
    fn literal(&self, i: usize) -> Option<ValueRef<'_>> {
        let tag = *self.tags.get(i)?;
        let data = &self.data[i];
        Some(match tag {
            TAG_UNDEFINED => ValueRef::Undefined,
            TAG_ERROR => ValueRef::Error,
            TAG_BOOL => ValueRef::Bool(data.to_u64() != 0),
            TAG_INT => ValueRef::Int(data.to_u64() as i64),
            TAG_REAL => ValueRef::Real(f64::from_bits(data.to_u64())),
            TAG_STR => ValueRef::ShortStr(data),
            _ => return None,
        })
    }
}

impl ClassAd {
    /// An empty ad.
    pub fn new() -> ClassAd {
        ClassAd::default()
    }

    /// An empty ad with room for `n` attributes.
    pub fn with_capacity(n: usize) -> ClassAd {
        ClassAd {
            head: Head::default(),
            attrs: Vec::with_capacity(n),
            index: None,
        }
    }

    /// Parses an ad in new syntax: `[ a = 1; b = a + 1 ]`.
    pub fn parse(text: &str) -> Result<ClassAd, ParseError> {
        parse::parse_classad(text)
    }

    /// Parses an ad in old syntax: one `Name = expr` per line; blank lines and
    /// lines starting with `#` are ignored.
    pub fn parse_old(text: &str) -> Result<ClassAd, ParseError> {
        parse::parse_old_classad(text)
    }

    /// Parses either syntax: new if the first non-blank character is `[`.
    pub fn parse_any(text: &str) -> Result<ClassAd, ParseError> {
        if text.trim_start().starts_with('[') {
            ClassAd::parse(text)
        } else {
            ClassAd::parse_old(text)
        }
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.attrs.len()
    }

    /// True when the ad has no attributes.
    pub fn is_empty(&self) -> bool {
        self.attrs.is_empty()
    }

    /// Binds `name` to `expr`, replacing any earlier binding of the same name (any case).
    pub fn insert(&mut self, name: &str, expr: Expr) {
        self.insert_name(Name::new(name), expr);
    }

    /// Like [`ClassAd::insert`] with an already interned name.
    pub fn insert_name(&mut self, name: Name, expr: Expr) {
        let bound = share(name.sym, expr, None);
        self.bind(name, bound);
    }

    /// Binds `name` to `expr` parsed from `source`, remembering the text so
    /// that the next ad binding the same name to the same text can skip
    /// parsing it (see [`recent_by_source`]).
    pub(crate) fn insert_parsed(&mut self, name: Name, expr: Expr, source: &str) {
        let bound = share(name.sym, expr, Some(source));
        self.bind(name, bound);
    }

    /// Binds `name` to a tree shared with an earlier ad.
    pub(crate) fn insert_shared(&mut self, name: Name, expr: Arc<Expr>) {
        self.bind(name, Bound::Shared(expr));
    }

    fn bind(&mut self, name: Name, bound: Bound) {
        let i = match self.find_sym(name.sym) {
            Some(i) => {
                self.attrs[i].expr = bound;
                i
            }
            None => {
                self.attrs.push(Attr {
                    sym: name.sym,
                    name: name.text,
                    expr: bound,
                });
                let i = self.attrs.len() - 1;
                match &mut self.index {
                    Some(index) => {
                        index.insert(name.sym.id(), i as u32);
                    }
                    None if self.attrs.len() > INDEX_FROM => self.build_index(),
                    None => {}
                }
                i
            }
        };
        self.head.set(i, name.sym, &self.attrs[i].expr);
    }

    /// Indexes every attribute (the ad just grew past [`INDEX_FROM`], or
    /// positions moved).
    fn build_index(&mut self) {
        let index = self.index.get_or_insert_with(|| {
            Box::new(Index::with_capacity_and_hasher(
                self.attrs.len(),
                Default::default(),
            ))
        });
        index.clear();
        index.extend(
            self.attrs
                .iter()
                .enumerate()
                .map(|(i, a)| (a.sym.id(), i as u32)),
        );
    }

    /// Binds `name` to a literal value.
    pub fn insert_value(&mut self, name: &str, v: Value) {
        self.insert(name, Expr::Literal(v));
    }

    /// Parses `expr` and binds it to `name`.
    pub fn insert_expr_str(&mut self, name: &str, expr: &str) -> Result<(), ParseError> {
        let e = parse::parse_expr(expr)?;
        self.insert(name, e);
        Ok(())
    }

    /// Removes an attribute; returns its expression if it was there.
    ///
    /// Keeps insertion order, so this costs time in the number of attributes
    /// after it (inserting and finding do not).
    pub fn remove(&mut self, name: &str) -> Option<Expr> {
        let i = self.find_sym(Symbol::lookup(name)?)?;
        let removed = self.attrs.remove(i);
        self.head = Head::default();
        for (j, a) in self.attrs.iter().enumerate().take(HEAD) {
            self.head.set(j, a.sym, &a.expr);
        }
        if self.index.is_some() {
            if self.attrs.len() > INDEX_FROM {
                self.build_index();
            } else {
                self.index = None;
            }
        }
        Some(removed.expr.into_expr())
    }

    /// The expression bound to `name` (any case).
    pub fn get(&self, name: &str) -> Option<&Expr> {
        self.find_sym(Symbol::lookup(name)?)
            .map(|i| self.expr_at(i))
    }

    /// Position of the attribute with symbol `sym`.
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub fn find_sym(&self, sym: Symbol) -> Option<usize> {
        match self.head.find(sym) {
            Some(i) => Some(i),
            None if self.attrs.len() > HEAD => self.find_sym_tail(sym),
            None => None,
        }
    }

    /// [`ClassAd::find_sym`] beyond the inline symbols.
    #[cold]
    #[inline(never)]
    fn find_sym_tail(&self, sym: Symbol) -> Option<usize> {
        if let Some(index) = &self.index {
            return index.get(&sym.id()).map(|&i| i as usize);
        }
        self.attrs[HEAD..]
            .iter()
            .position(|a| a.sym == sym)
            .map(|i| i + HEAD)
    }

    /// A number that identifies attribute `i` of this ad among all attributes
    /// of all live ads (its slot's address): what cycle detection records.
    /// Not the expression's address, since ads share expressions.
    #[inline]
    pub(crate) fn attr_key(&self, i: usize) -> usize {
        &self.attrs[i] as *const Attr as usize
    }

    /// The expression at position `i` (from [`ClassAd::find_sym`]).
    #[inline]
    pub fn expr_at(&self, i: usize) -> &Expr {
        match self.head.exprs.get(i) {
            Some(Some(e)) => e,
            _ => self.attrs[i].expr.expr(),
        }
    }

    /// The value of attribute `i` when it is bound to a literal, without
    /// copying it (small scalars are read from inside the record).
    #[inline]
    pub fn literal_at(&self, i: usize) -> Option<ValueRef<'_>> {
        if let Some(v) = self.head.literal(i) {
            return Some(v);
        }
        match self.expr_at(i) {
            Expr::Literal(v) => Some(v.view()),
            _ => None,
        }
    }

    /// Attributes in insertion order: (name as written, expression).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Expr)> {
        self.attrs.iter().map(|a| (a.name, a.expr.expr()))
    }

    /// Evaluates attribute `name` with this ad as MY and no TARGET.
    pub fn eval_attr(&self, name: &str) -> Value {
        self.eval_attr_against(name, None)
    }

    /// Evaluates attribute `name` with this ad as MY and `target` as TARGET.
    pub fn eval_attr_against(&self, name: &str, target: Option<&ClassAd>) -> Value {
        match Symbol::lookup(name).and_then(|s| self.find_sym(s)) {
            // The ad's own spelling: interning the caller's could add an entry.
            Some(i) => eval_with(
                &Expr::Attr(
                    crate::ast::RefScope::My,
                    Name {
                        sym: self.attrs[i].sym,
                        text: self.attrs[i].name,
                    },
                ),
                Some(self),
                target,
            ),
            None => Value::Undefined,
        }
    }

    /// Evaluates `e` with this ad as MY and `target` as TARGET.
    pub fn eval_expr(&self, e: &Expr, target: Option<&ClassAd>) -> Value {
        Evaluator::new(Some(self), target).eval_top(e)
    }

    /// As [`ClassAd::eval_expr`], with `time()` answering `unix_now`.
    pub fn eval_expr_at(&self, e: &Expr, target: Option<&ClassAd>, unix_now: i64) -> Value {
        Evaluator::new(Some(self), target).at(unix_now).eval_top(e)
    }

    /// Prints the ad in old syntax: one `Name = expr` per line.
    pub fn to_old_syntax(&self) -> String {
        let mut s = String::new();
        for (n, e) in self.iter() {
            crate::unparse::push_name(&mut s, n);
            s.push_str(" = ");
            s.push_str(&e.to_string());
            s.push('\n');
        }
        s
    }
}

impl PartialEq for ClassAd {
    /// Same attributes (names ignoring case) bound to equal expressions, in any order.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self.attrs.iter().all(|a| {
                other
                    .find_sym(a.sym)
                    .is_some_and(|i| other.expr_at(i) == a.expr.expr())
            })
    }
}

impl fmt::Display for ClassAd {
    /// Prints the ad in new syntax on one line: `[ a = 1; b = 2 ]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::unparse::write_ad(f, self)
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
