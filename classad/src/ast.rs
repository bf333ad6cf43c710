//! The expression tree. The parser builds it, the evaluator walks it and
//! `unparse` prints it. It does not depend on pest, so the parser could be
//! replaced without touching anything else.

use std::sync::Arc;

use crate::builtins::BuiltinFn;
use crate::record::ClassAd;
use crate::symbol::Name;
use crate::value::Value;

/// Where an attribute reference looks its name up.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RefScope {
    /// A bare name: the enclosing ads from the inside out, then MY, then TARGET.
    Bare,
    /// `MY.name`: the ad the expression belongs to.
    My,
    /// `TARGET.name`: the other ad of a match.
    Target,
    /// `parent.name`: the ad enclosing the current nested ad.
    Parent,
}

/// Unary operators.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum UnaryOp {
    /// `!`
    Not,
    /// `-`
    Neg,
    /// `+`
    Plus,
    /// `~`
    BitNot,
}

/// Binary operators, lowest precedence first.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BinaryOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `|`
    BitOr,
    /// `^`
    BitXor,
    /// `&`
    BitAnd,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `=?=`
    Is,
    /// `=!=`
    Isnt,
    /// `is` (same as `=?=`, printed as written)
    IsWord,
    /// `isnt` (same as `=!=`, printed as written)
    IsntWord,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
    /// `>>>`
    UShr,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
}

impl BinaryOp {
    /// Binding strength: larger binds tighter. All binary operators are left-associative.
    pub fn precedence(self) -> u8 {
        use BinaryOp::*;
        match self {
            Or => 1,
            And => 2,
            BitOr => 3,
            BitXor => 4,
            BitAnd => 5,
            Eq | Ne | Is | Isnt | IsWord | IsntWord => 6,
            Lt | Le | Gt | Ge => 7,
            Shl | Shr | UShr => 8,
            Add | Sub => 9,
            Mul | Div | Mod => 10,
        }
    }

    /// The operator's spelling.
    pub fn symbol(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Or => "||",
            And => "&&",
            BitOr => "|",
            BitXor => "^",
            BitAnd => "&",
            Eq => "==",
            Ne => "!=",
            Is => "=?=",
            Isnt => "=!=",
            IsWord => "is",
            IsntWord => "isnt",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Shl => "<<",
            Shr => ">>",
            UShr => ">>>",
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
        }
    }
}

impl UnaryOp {
    /// The operator's spelling.
    pub fn symbol(self) -> &'static str {
        match self {
            UnaryOp::Not => "!",
            UnaryOp::Neg => "-",
            UnaryOp::Plus => "+",
            UnaryOp::BitNot => "~",
        }
    }
}

/// A function call. The builtin is resolved once, when the call is parsed.
#[derive(Clone, Debug)]
pub struct Call {
    /// The name as written.
    pub name: Name,
    /// The implementation, or `None` for an unknown function (evaluates to ERROR).
    pub func: Option<BuiltinFn>,
    /// Unevaluated arguments: some functions are lazy (`ifThenElse`, `isUndefined`...).
    pub args: Vec<Expr>,
}

impl PartialEq for Call {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.args == other.args
    }
}

/// A ClassAd expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A scalar literal: integer, real, string, boolean, `undefined` or `error`.
    Literal(Value),
    /// An attribute reference, bare or with a scope prefix.
    Attr(RefScope, Name),
    /// Selection of an attribute from the ad an expression evaluates to: `e.name`.
    Select(Box<Expr>, Name),
    /// Subscript: `list[i]` or `ad["name"]`.
    Index(Box<(Expr, Expr)>),
    /// A unary operator.
    Unary(UnaryOp, Box<Expr>),
    /// A binary operator.
    Binary(BinaryOp, Box<(Expr, Expr)>),
    /// `c ? a : b`
    Cond(Box<(Expr, Expr, Expr)>),
    /// `a ?: b`: `a` unless it is UNDEFINED.
    Elvis(Box<(Expr, Expr)>),
    /// A function call.
    Call(Box<Call>),
    /// A list literal `{a, b}`.
    List(Vec<Expr>),
    /// A nested ad literal `[a = 1; b = 2]`.
    Ad(Arc<ClassAd>),
    /// Parentheses as written, kept so that expressions print back as the user wrote them.
    Paren(Box<Expr>),
}

impl Expr {
    /// Convenience constructor for a binary expression.
    pub fn binary(op: BinaryOp, l: Expr, r: Expr) -> Expr {
        Expr::Binary(op, Box::new((l, r)))
    }

    /// Removes every `Paren` node, for comparing trees up to printing.
    pub fn without_parens(&self) -> Expr {
        match self {
            Expr::Paren(e) => e.without_parens(),
            Expr::Literal(_) | Expr::Attr(..) => self.clone(),
            Expr::Ad(ad) => {
                let mut bare = ClassAd::with_capacity(ad.len());
                for (name, e) in ad.iter() {
                    bare.insert(name, e.without_parens());
                }
                Expr::Ad(Arc::new(bare))
            }
            Expr::Select(e, n) => Expr::Select(Box::new(e.without_parens()), *n),
            Expr::Index(b) => Expr::Index(Box::new((b.0.without_parens(), b.1.without_parens()))),
            Expr::Unary(op, e) => Expr::Unary(*op, Box::new(e.without_parens())),
            Expr::Binary(op, b) => Expr::binary(*op, b.0.without_parens(), b.1.without_parens()),
            Expr::Cond(b) => Expr::Cond(Box::new((
                b.0.without_parens(),
                b.1.without_parens(),
                b.2.without_parens(),
            ))),
            Expr::Elvis(b) => Expr::Elvis(Box::new((b.0.without_parens(), b.1.without_parens()))),
            Expr::Call(c) => Expr::Call(Box::new(Call {
                name: c.name,
                func: c.func,
                args: c.args.iter().map(Expr::without_parens).collect(),
            })),
            Expr::List(items) => Expr::List(items.iter().map(Expr::without_parens).collect()),
        }
    }
}
