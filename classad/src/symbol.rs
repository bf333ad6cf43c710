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
//! A peer that writes fresh names into every ad it sends would grow the
//! table without bound: about 270 bytes per name (2,000,000 distinct names
//! took `classad match` from 138 MB to 672 MB). Two bounds keep a daemon
//! that parses ads from the network in check, both enforced here so that no
//! parse site can forget them: a process-wide cap on the table
//! ([`set_table_limit`]) and a budget of new entries for the parses one
//! caller runs ([`with_name_budget`], a connection's allowance, say). A parse
//! that would pass either fails with a [`crate::ParseError`] naming the
//! limit, and nothing of it enters the table. Lookups by a name the table
//! lacks ([`Symbol::lookup`]) add nothing either.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// New entries this thread may still add (`None`: no budget of its own).
    static BUDGET: Cell<Option<usize>> = const { Cell::new(None) };
    /// Which limit a name was refused by since the running parse began.
    static REFUSED: Cell<Option<Refused>> = const { Cell::new(None) };
}

/// Most entries (spellings) the table may hold; no limit until a daemon sets one.
static TABLE_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The id handed out for a name the table had no room for. Nothing built
/// with it survives: the parse that asked fails (see [`ParseGuard`]).
const REFUSED_ID: u32 = u32::MAX - 1;

/// Which bound refused a new name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The process-wide table is full ([`set_table_limit`]).
    Table(usize),
    /// The caller's budget of new names is spent ([`with_name_budget`]).
    Budget,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Table(limit) => write!(
                f,
                "it brings new attribute names, and this process already knows {limit}, its limit (max_attribute_names)"
            ),
            Refused::Budget => f.write_str(
                "it brings more new attribute names than its sender may still add (max_new_names_per_connection)",
            ),
        }
    }
}

/// Caps the table at `entries` spellings for the rest of the process: a new
/// name past it fails the parse that brings it. Names already known stay
/// free to use.
pub fn set_table_limit(entries: usize) {
    TABLE_LIMIT.store(entries, Ordering::Relaxed);
}

/// Runs `f` (parses) letting it add at most `new` entries to the table; a
/// parse inside that would add more fails. Returns what `f` returned and how
/// many entries it added.
pub fn with_name_budget<T>(new: usize, f: impl FnOnce() -> T) -> (T, usize) {
    let before = BUDGET.replace(Some(new));
    let out = f();
    let left = BUDGET.replace(before).unwrap_or(0);
    (out, new - left.min(new))
}

/// Marks the span of one public parse: [`ParseGuard::refused`] tells whether
/// a name was refused inside it. Nests: an inner parse's refusal is the
/// outer's too.
pub(crate) struct ParseGuard(Option<Refused>);

impl ParseGuard {
    pub(crate) fn start() -> ParseGuard {
        ParseGuard(REFUSED.take())
    }

    /// The limit that refused a name since `start`, if any.
    pub(crate) fn refused(self) -> Option<Refused> {
        let now = REFUSED.get();
        REFUSED.set(self.0.or(now));
        now
    }
}

/// Whether one more entry fits, charging the thread's budget if it does.
fn room_for_one(table_len: usize) -> Result<(), Refused> {
    let limit = TABLE_LIMIT.load(Ordering::Relaxed);
    if table_len >= limit {
        return Err(Refused::Table(limit));
    }
    match BUDGET.get() {
        Some(0) => Err(Refused::Budget),
        Some(n) => {
            BUDGET.set(Some(n - 1));
            Ok(())
        }
        None => Ok(()),
    }
}

fn intern_global(spelling: &str) -> (Symbol, &'static str) {
    let mut g = INTERNER.lock().expect("symbol interner lock poisoned");
    if let Some(hit) = g.spellings.get(spelling) {
        return *hit;
    }
    if let Err(why) = room_for_one(g.spellings.len()) {
        REFUSED.set(Some(why));
        return (Symbol(REFUSED_ID), "");
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
        if entry.0.0 != REFUSED_ID {
            local.borrow_mut().insert(entry.1, entry);
        }
        entry
    })
}

impl Symbol {
    /// Interns `name` (any case) and returns its symbol.
    pub fn intern(name: &str) -> Symbol {
        intern_spelling(name).0
    }

    /// The symbol of `name` (any case) if the process knows it; adds nothing
    /// to the table, so a lookup by a name from the network costs nothing
    /// to keep. No ad holds a name the table lacks.
    pub fn lookup(name: &str) -> Option<Symbol> {
        if let Some(hit) = LOCAL.with(|local| local.borrow().get(name).copied()) {
            return Some(hit.0);
        }
        let g = INTERNER.lock().expect("symbol interner lock poisoned");
        if let Some(hit) = g.spellings.get(name) {
            return Some(hit.0);
        }
        g.folded
            .get(name.to_ascii_lowercase().as_str())
            .map(|&id| Symbol(id))
    }

    /// How many spellings the table holds: what [`set_table_limit`] caps.
    pub fn entries() -> usize {
        INTERNER
            .lock()
            .expect("symbol interner lock poisoned")
            .spellings
            .len()
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
    fn a_parse_past_its_budget_fails_and_adds_nothing() {
        let before = Symbol::entries();
        let (ad, used) =
            with_name_budget(2, || crate::ClassAd::parse_old("BudgetA = 1\nBudgetB = 2"));
        assert!(ad.is_ok());
        assert_eq!(used, 2);
        let (refused, used) = with_name_budget(1, || {
            crate::ClassAd::parse("[ BudgetC = 1; BudgetD = BudgetE ]")
        });
        let message = refused.expect_err("over the budget").message;
        assert!(
            message.contains("max_new_names_per_connection"),
            "{message}"
        );
        assert_eq!(used, 1);
        assert_eq!(Symbol::lookup("BudgetD"), None);
        assert_eq!(Symbol::lookup("BudgetE"), None);
        // Known names cost nothing: the same ad again within a budget of 0.
        let (again, used) =
            with_name_budget(0, || crate::ClassAd::parse_old("BudgetA = 3\nbudgetb = 4"));
        assert!(again.is_err(), "a new spelling is a new entry");
        assert_eq!(used, 0);
        let (again, _) =
            with_name_budget(0, || crate::ClassAd::parse_old("BudgetA = 3\nBudgetB = 4"));
        assert_eq!(again.expect("known names").len(), 2);
        // Outside a budget, parsing goes on as before.
        assert!(crate::parse_expr("BudgetF + 1").is_ok());
        assert!(Symbol::entries() >= before + 3);
    }

    #[test]
    fn a_lookup_adds_nothing() {
        let ad = crate::ClassAd::parse("[ LookedUp = 1 ]").unwrap();
        assert!(ad.get("LOOKEDUP").is_some());
        assert!(ad.get("NeverSeenAnywhere1234").is_none());
        assert_eq!(Symbol::lookup("NeverSeenAnywhere1234"), None);
        assert_eq!(Symbol::lookup("lookedup"), Some(Symbol::intern("LookedUp")));
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
