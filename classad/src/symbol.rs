//! Case-insensitive attribute names interned to small integers.
//!
//! ClassAd attribute names ignore case. Evaluation must not hash or lowercase
//! strings, so every name is folded and interned once, when it is parsed or
//! inserted, and lookups compare `Symbol`s (a `u32`).

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

/// An interned, case-folded attribute name. Equal symbols mean names that are
/// equal ignoring ASCII case.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Symbol(u32);

struct Interner {
    ids: HashMap<Box<str>, u32>,
}

static INTERNER: LazyLock<RwLock<Interner>> = LazyLock::new(|| {
    RwLock::new(Interner {
        ids: HashMap::new(),
    })
});

impl Symbol {
    /// Interns `name` (any case) and returns its symbol.
    pub fn intern(name: &str) -> Symbol {
        let folded;
        let key: &str = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            folded = name.to_ascii_lowercase();
            &folded
        } else {
            name
        };
        if let Some(&id) = INTERNER
            .read()
            .expect("symbol interner lock poisoned")
            .ids
            .get(key)
        {
            return Symbol(id);
        }
        let mut w = INTERNER.write().expect("symbol interner lock poisoned");
        let next = w.ids.len() as u32;
        let id = *w.ids.entry(key.into()).or_insert(next);
        Symbol(id)
    }

    /// The raw id, useful for ordering and hashing.
    pub fn id(self) -> u32 {
        self.0
    }
}

/// An attribute name as written (for printing) together with its symbol (for lookup).
#[derive(Clone, Debug)]
pub struct Name {
    /// The folded, interned name.
    pub sym: Symbol,
    /// The spelling the user wrote, kept for printing.
    pub text: std::sync::Arc<str>,
}

impl Name {
    /// Builds a name from its spelling.
    pub fn new(text: &str) -> Name {
        Name {
            sym: Symbol::intern(text),
            text: text.into(),
        }
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.sym == other.sym
    }
}
impl Eq for Name {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_is_folded() {
        assert_eq!(Symbol::intern("Memory"), Symbol::intern("MEMORY"));
        assert_ne!(Symbol::intern("Memory"), Symbol::intern("Memory2"));
    }
}
