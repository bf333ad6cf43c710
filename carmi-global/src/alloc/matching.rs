//! The bipartite matching of a job's minimum places to candidate slots
//! (Kuhn's augmenting paths), by which a job starts all or nothing.

/// Finds a place for minimum slot `u` (Kuhn's augmenting paths).
fn augment(u: usize, adj: &[Vec<usize>], seen: &mut [bool], owner: &mut [Option<usize>]) -> bool {
    for &c in &adj[u] {
        if seen[c] {
            continue;
        }
        seen[c] = true;
        if owner[c].is_none_or(|o| augment(o, adj, seen, owner)) {
            owner[c] = Some(u);
            return true;
        }
    }
    false
}

/// A matching of every place to a distinct candidate, or `None`.
pub(super) fn match_all(adj: &[Vec<usize>], candidates: usize) -> Option<Vec<usize>> {
    let mut owner: Vec<Option<usize>> = vec![None; candidates];
    for u in 0..adj.len() {
        let mut seen = vec![false; candidates];
        if !augment(u, adj, &mut seen, &mut owner) {
            return None;
        }
    }
    let mut placed = vec![0; adj.len()];
    for (c, o) in owner.iter().enumerate() {
        if let Some(u) = o {
            placed[*u] = c;
        }
    }
    Some(placed)
}
