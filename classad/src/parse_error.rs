//! Syntax errors: where one is (line, column, the line's text) and what
//! was expected there, in words rather than grammar rule names.

use std::fmt;

use super::Rule;

/// A syntax error: where it is and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}\n  {line_text}\n  {caret:>width$}", caret = "^", width = column)]
pub struct ParseError {
    /// 1-based line of the error.
    pub line: usize,
    /// 1-based column (in characters) of the error.
    pub column: usize,
    /// What went wrong, e.g. "expected an operand, found `)`".
    pub message: String,
    /// The text of the offending line.
    pub line_text: String,
}

impl ParseError {
    pub(super) fn at(text: &str, byte: usize, message: String) -> ParseError {
        let byte = byte.min(text.len());
        let before = &text[..byte];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = text[line_start..byte].chars().count() + 1;
        let line_text = text[line_start..].lines().next().unwrap_or("").to_string();
        ParseError {
            line,
            column,
            message,
            line_text,
        }
    }

    /// Moves the error to line `line` of a larger text, for old-syntax ads that
    /// are parsed one line at a time.
    pub(super) fn on_line(mut self, line: usize, col_offset: usize, line_text: &str) -> ParseError {
        if self.line == 1 {
            self.column += col_offset;
        }
        self.line = line;
        self.line_text = line_text.to_string();
        self
    }
}

fn describe(r: &Rule) -> &'static str {
    match r {
        Rule::expr | Rule::chain | Rule::unit | Rule::prefix | Rule::postfixed => "an expression",
        Rule::negative_number | Rule::elvis_negative => "a number",
        Rule::infix | Rule::kw_is | Rule::kw_isnt => "an operator",
        Rule::ternary | Rule::elvis_tail => "`?`",
        Rule::select => "`.`",
        Rule::subscript => "`[`",
        Rule::ident | Rule::quoted_name => "an attribute name",
        Rule::attr_def => "an attribute definition `name = expr`",
        Rule::EOI => "end of input",
        Rule::string | Rule::string_text => "a string",
        Rule::real | Rule::integer => "a number",
        Rule::ad => "`[`",
        _ => "something else",
    }
}

fn found_at(text: &str, byte: usize) -> String {
    match text[byte.min(text.len())..].chars().next() {
        None => "end of input".to_string(),
        Some(_) => {
            let rest = &text[byte..];
            let tok: String = rest
                .chars()
                .take_while(|c| !c.is_whitespace())
                .take(12)
                .collect();
            format!("`{tok}`")
        }
    }
}

pub(super) fn from_pest(e: pest::error::Error<Rule>, text: &str) -> ParseError {
    let byte = match e.location {
        pest::error::InputLocation::Pos(p) => p,
        pest::error::InputLocation::Span((s, _)) => s,
    };
    let message = match &e.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            let mut wanted: Vec<&str> = positives.iter().map(describe).collect();
            wanted.sort();
            wanted.dedup();
            let wanted = match wanted.len() {
                0 => "something else".to_string(),
                1 => wanted[0].to_string(),
                _ => {
                    let (last, first) = wanted.split_last().expect("len >= 2");
                    format!("{} or {}", first.join(", "), last)
                }
            };
            format!("expected {wanted}, found {}", found_at(text, byte))
        }
        pest::error::ErrorVariant::CustomError { message } => message.clone(),
    };
    ParseError::at(text, byte, message)
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(describe(self))
    }
}
