//! Case-insensitive attribute names interned to small integers.
//!
//! ClassAd attribute names ignore case. Evaluation must not hash or lowercase
//! strings, so every name is folded and interned once, when it is parsed or
//! inserted, and lookups compare `Symbol`s (a `u32`).
//!
//! The table only grows: a process holds one entry per distinct spelling it
//! has seen, which for ClassAds is a small vocabulary. Each thread keeps a
//! cache of spellings in front of the shared table, so parsing on many
//! threads does not contend on its lock.
//!
//! A peer that writes fresh names into every ad it sends grows the table
//! without bound: about 270 bytes per name (2,000,000 distinct names took
//! `classad match` from 138 MB to 672 MB). A daemon that parses ads from
//! the network can watch [`Symbol::count`] and refuse ads that bring new
//! names beyond a limit of its own.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{LazyLock, Mutex};

/// An interned, case-folded attribute name. Equal symbols mean names that are
/// equal ignoring ASCII case.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Symbol(u32);

/// A small, fast hasher for short attribute names (FNV-1a over 8-byte words).
/// The table is keyed by names, not attacker-chosen collisions of note: a
/// flood of distinct names costs memory whatever the hash.
#[derive(Default)]
struct NameHasher(u64);

impl Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0 ^ 0xcbf2_9ce4_8422_2325;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("chunk of 8"));
            h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(23);
        }
        for &b in chunks.remainder() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

type Fast = BuildHasherDefault<NameHasher>;

/// Exact spelling -> (symbol, the spelling kept for good).
type Spellings = HashMap<&'static str, (Symbol, &'static str), Fast>;

#[derive(Default)]
struct Interner {
    /// Folded name -> symbol id.
    folded: HashMap<Box<str>, u32, Fast>,
    spellings: Spellings,
}

static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(Mutex::default);

thread_local! {
    static LOCAL: RefCell<Spellings> = RefCell::new(HashMap::default());
}

fn intern_global(spelling: &str) -> (Symbol, &'static str) {
    let mut g = INTERNER.lock().expect("symbol interner lock poisoned");
    if let Some(hit) = g.spellings.get(spelling) {
        return *hit;
    }
    let folded = spelling.to_ascii_lowercase();
    let next = g.folded.len() as u32;
    let id = *g.folded.entry(folded.into_boxed_str()).or_insert(next);
    // Leaked on purpose: the table never shrinks (see the module docs), and
    // a `&'static str` makes every copy of a name free, where a shared,
    // reference-counted one cost two atomic operations per copy and made
    // threads parsing ads at once contend on the counts.
    let kept: &'static str = Box::leak(spelling.into());
    let entry = (Symbol(id), kept);
    g.spellings.insert(kept, entry);
    entry
}

fn intern_spelling(spelling: &str) -> (Symbol, &'static str) {
    LOCAL.with(|local| {
        if let Some(hit) = local.borrow().get(spelling) {
            return *hit;
        }
        let entry = intern_global(spelling);
        local.borrow_mut().insert(entry.1, entry);
        entry
    })
}

impl Symbol {
    /// Interns `name` (any case) and returns its symbol.
    pub fn intern(name: &str) -> Symbol {
        intern_spelling(name).0
    }

    /// How many distinct names (ignoring case) the process has interned.
    pub fn count() -> usize {
        INTERNER
            .lock()
            .expect("symbol interner lock poisoned")
            .folded
            .len()
    }

    /// The raw id, useful for ordering and hashing.
    #[inline]
    pub fn id(self) -> u32 {
        self.0
    }
}

/// An attribute name as written (for printing) together with its symbol (for lookup).
#[derive(Clone, Copy, Debug)]
pub struct Name {
    /// The folded, interned name.
    pub sym: Symbol,
    /// The spelling the user wrote, kept for printing; one copy per distinct spelling.
    pub text: &'static str,
}

impl Name {
    /// Builds a name from its spelling.
    pub fn new(text: &str) -> Name {
        let (sym, text) = intern_spelling(text);
        Name { sym, text }
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

    #[test]
    fn spelling_is_kept() {
        assert_eq!(Name::new("KFlops").text, "KFlops");
        assert_eq!(Name::new("kflops").text, "kflops");
        assert_eq!(Name::new("KFlops"), Name::new("kflops"));
    }

    #[test]
    fn the_count_grows_with_a_new_name() {
        Symbol::intern("CountedName");
        let before = Symbol::count();
        Symbol::intern("COUNTEDNAME");
        Symbol::intern("countedname");
        // Other tests may intern names meanwhile: the count never falls.
        assert!(Symbol::count() >= before);
        Symbol::intern("CountedName2");
        assert!(Symbol::count() > before);
    }

    #[test]
    fn threads_agree_on_symbols() {
        let here = Symbol::intern("CrossThreadName");
        let there = std::thread::spawn(|| Symbol::intern("CROSSTHREADNAME"))
            .join()
            .expect("thread ran");
        assert_eq!(here, there);
    }
}
