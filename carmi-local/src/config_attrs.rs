//! Machine attributes as the owner gives them (`--attr NAME=VALUE`, the
//! configuration file's `[attributes]` table): checked names and parsed
//! ClassAd expressions.

use classad::{Expr, Value, parse_expr};

use super::ConfigError;

/// Parses one `--attr NAME=VALUE` argument; VALUE is a ClassAd expression.
pub fn parse_attr_arg(arg: &str) -> Result<(String, Expr), ConfigError> {
    let origin = "--attr".to_string();
    let Some((name, value)) = arg.split_once('=') else {
        return Err(ConfigError::BadAttribute {
            name: arg.to_string(),
            origin,
            reason: "expected NAME=VALUE".into(),
        });
    };
    let name = name.trim();
    check_attr_name(name, &origin)?;
    let expr = parse_expr(value).map_err(|error| ConfigError::BadExpression {
        name: name.to_string(),
        origin,
        error,
    })?;
    Ok((name.to_string(), expr))
}

pub(super) fn table_attribute(
    name: &str,
    value: &toml::Value,
    origin: &str,
) -> Result<(String, Expr), ConfigError> {
    check_attr_name(name, origin)?;
    let expr = match value {
        toml::Value::String(text) => {
            parse_expr(text).map_err(|error| ConfigError::BadExpression {
                name: name.to_string(),
                origin: origin.to_string(),
                error,
            })?
        }
        toml::Value::Boolean(b) => Expr::Literal(Value::Bool(*b)),
        toml::Value::Integer(i) => Expr::Literal(Value::Int(*i)),
        toml::Value::Float(f) => Expr::Literal(Value::Real(*f)),
        other => {
            return Err(ConfigError::BadAttribute {
                name: name.to_string(),
                origin: origin.to_string(),
                reason: format!(
                    "TOML values of type {} cannot be attributes; write the ClassAd expression as a string",
                    other.type_str()
                ),
            });
        }
    };
    Ok((name.to_string(), expr))
}

/// Attribute names are plain identifiers so that the ad prints and reparses
/// the same in both syntaxes (heartbeat updates use old syntax).
fn check_attr_name(name: &str, origin: &str) -> Result<(), ConfigError> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::BadAttribute {
            name: name.to_string(),
            origin: origin.to_string(),
            reason: "an attribute name is a letter or `_` followed by letters, digits or `_`"
                .into(),
        })
    }
}
