//! How many connections one holder (a job at a local RM, an identity at the
//! global RM) keeps open at once (issue 38, "bounded by design"): without a
//! cap, one job's credential or one user's token could open connections
//! until its daemon's `max_connections` is reached, locking everyone else
//! out. A connection past its holder's cap is refused inside its handshake,
//! so its client is told why.

use std::collections::HashMap;
use std::fmt::Display;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// The connections each holder keeps open, shared by the connection tasks.
#[derive(Debug)]
pub struct PerHolder<K: Hash + Eq> {
    open: Arc<Mutex<HashMap<K, usize>>>,
    max: usize,
    /// The setting that sets `max`, named in refusals.
    setting: &'static str,
}

impl<K: Hash + Eq> Clone for PerHolder<K> {
    fn clone(&self) -> Self {
        PerHolder {
            open: self.open.clone(),
            max: self.max,
            setting: self.setting,
        }
    }
}

/// One connection's place in its holder's count, given back when dropped.
#[derive(Debug)]
pub struct Place<K: Hash + Eq> {
    per: PerHolder<K>,
    holder: K,
}

impl<K: Hash + Eq + Clone + Display> PerHolder<K> {
    /// No connection open, at most `max` per holder, a cap named `setting`.
    pub fn new(max: usize, setting: &'static str) -> PerHolder<K> {
        PerHolder {
            open: Default::default(),
            max: max.max(1),
            setting,
        }
    }

    /// A place for one more connection of `holder` (named `who` in a
    /// refusal, "job 7" say), or why there is none.
    pub fn take(&self, holder: K, who: &str) -> Result<Place<K>, String> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(holder.clone()).or_default();
        if *n >= self.max {
            return Err(format!(
                "{who} holds {n} connections here already; at most {} are accepted ({})",
                self.max, self.setting
            ));
        }
        *n += 1;
        Ok(Place {
            per: self.clone(),
            holder,
        })
    }

    /// How many connections `holder` keeps open.
    pub fn held(&self, holder: &K) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(holder).copied().unwrap_or(0)
    }
}

impl<K: Hash + Eq> Drop for Place<K> {
    fn drop(&mut self) {
        let mut open = self.per.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.holder) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_gets_its_cap_and_its_places_back() {
        let per = PerHolder::new(2, "max_connections_per_job");
        let a = per.take(3u64, "job 3").unwrap();
        let _b = per.take(3, "job 3").unwrap();
        let e = per.take(3, "job 3").unwrap_err();
        assert!(
            e.contains("job 3") && e.contains("max_connections_per_job") && e.contains("at most 2"),
            "{e}"
        );
        let _other = per
            .take(4, "job 4")
            .expect("another holder is not held back");
        drop(a);
        assert_eq!(per.held(&3), 1);
        let _c = per.take(3, "job 3").expect("a place given back");
    }
}
