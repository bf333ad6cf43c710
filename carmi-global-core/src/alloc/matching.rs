//! The bipartite matching of a job's minimum places to candidate slots, by
//! which a job starts all or nothing.
//!
//! Places of one class share one candidate list (best first), so memory is
//! one list per class, not one per minimum machine. A greedy pass gives each
//! place the first free candidate of its list (a cursor per list, so places
//! of one class cost one walk of that list in all); only the places it leaves
//! unmatched search for augmenting paths (Kuhn), iteratively, so a long
//! path cannot overflow the stack. A job of 1,000 minimum machines on 1,000
//! slots took 0.5 s to start (debug build) with a fresh search per place,
//! 6 ms with the greedy pass.

/// A matching of every place to a distinct candidate, or `None` when there
/// is none. Place `u` may take the candidates `lists[class_of[u]]`, listed
/// best first; candidates are `0..candidates`. Returns each place's candidate.
pub(super) fn match_all(
    lists: &[Vec<usize>],
    class_of: &[usize],
    candidates: usize,
) -> Option<Vec<usize>> {
    let mut owner: Vec<Option<usize>> = vec![None; candidates];
    let mut placed: Vec<Option<usize>> = vec![None; class_of.len()];
    // Greedy: a candidate taken stays taken during this pass, so each list's
    // cursor only moves forward.
    let mut cursor = vec![0usize; lists.len()];
    for (u, &k) in class_of.iter().enumerate() {
        let list = &lists[k];
        while cursor[k] < list.len() && owner[list[cursor[k]]].is_some() {
            cursor[k] += 1;
        }
        if let Some(&c) = list.get(cursor[k]) {
            owner[c] = Some(u);
            placed[u] = Some(c);
        }
    }
    // `seen[c] == stamp` marks candidates visited by the current search,
    // without clearing an array per search.
    let mut seen = vec![0u32; candidates];
    let mut stamp = 0u32;
    for u in 0..class_of.len() {
        if placed[u].is_some() {
            continue;
        }
        stamp += 1;
        if !augment(
            u,
            lists,
            class_of,
            &mut seen,
            stamp,
            &mut owner,
            &mut placed,
        ) {
            return None;
        }
    }
    placed.into_iter().collect()
}

/// Finds an augmenting path from the unmatched place `root` and flips it.
/// Depth-first with an explicit stack: each frame is a place and the next
/// index of its list to try; the candidate a frame last tried is the one
/// whose owner is the frame above it.
fn augment(
    root: usize,
    lists: &[Vec<usize>],
    class_of: &[usize],
    seen: &mut [u32],
    stamp: u32,
    owner: &mut [Option<usize>],
    placed: &mut [Option<usize>],
) -> bool {
    let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
    while let Some(top) = stack.last_mut() {
        let (u, i) = *top;
        let list = &lists[class_of[u]];
        let Some(&c) = list.get(i) else {
            stack.pop();
            continue;
        };
        top.1 += 1;
        if seen[c] == stamp {
            continue;
        }
        seen[c] = stamp;
        match owner[c] {
            Some(o) => stack.push((o, 0)),
            None => {
                // Every place on the path takes the candidate it last tried.
                for &(p, next) in &stack {
                    let took = lists[class_of[p]][next - 1];
                    owner[took] = Some(p);
                    placed[p] = Some(took);
                }
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_augmenting_path_moves_earlier_places() {
        // Place 0 may use 0 or 1, place 1 only 0: greedy gives 0 to place 0,
        // and the path moves place 0 to 1.
        let lists = vec![vec![0, 1], vec![0]];
        assert_eq!(match_all(&lists, &[0, 1], 2), Some(vec![1, 0]));
        // Three places, two candidates: none.
        assert_eq!(match_all(&lists, &[0, 0, 1], 2), None);
    }

    #[test]
    fn a_long_path_needs_no_deep_recursion() {
        // Place i may use i or i + 1, listed i + 1 first, except the last
        // (only its own): greedy gives every place i + 1 and leaves the last
        // unmatched, whose path runs through every earlier place.
        let n = 200_000;
        let mut lists: Vec<Vec<usize>> = (0..n - 1).map(|i| vec![i + 1, i]).collect();
        lists.push(vec![n - 1]);
        let class_of: Vec<usize> = (0..n).collect();
        let placed = match_all(&lists, &class_of, n).expect("a perfect matching exists");
        assert!(placed.iter().enumerate().all(|(i, &c)| c == i));
    }

    #[test]
    fn places_of_one_class_share_a_list() {
        let lists = vec![(0..1000).collect::<Vec<_>>()];
        let placed = match_all(&lists, &vec![0; 1000], 1000).unwrap();
        assert_eq!(placed, (0..1000).collect::<Vec<_>>());
        assert_eq!(match_all(&lists, &vec![0; 1001], 1000), None);
    }
}
