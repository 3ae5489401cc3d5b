//! How a batch of reads splits over the members that hold its keys: evenly, so a fleet
//! loading a checkpoint from replicas loads from every holder at once.

use std::collections::HashMap;

/// For each key of a batch, its members to choose from (`choices[i]`, in this client's
/// order of preference; one for a key without replicas): the index of the one to ask.
/// Keys with one choice are placed first; then each key with several goes to the choice
/// that has the fewest keys of the batch so far, the preferred one among those with as
/// few. Any one reader's batch thus splits over a key's holders within one key of even,
/// and readers whose preferences differ (each hashes the keys on its own name) leave
/// their odd keys on different members.
pub(super) fn balanced(choices: &[Vec<&str>]) -> Vec<usize> {
    let mut load: HashMap<&str, usize> = HashMap::new();
    let mut picks = vec![0; choices.len()];
    let mut by_choices: Vec<usize> = (0..choices.len()).collect();
    by_choices.sort_by_key(|&i| choices[i].len());
    for i in by_choices {
        let pick = (0..choices[i].len())
            .min_by_key(|&c| load.get(choices[i][c]).copied().unwrap_or(0))
            .unwrap_or(0);
        if let Some(&member) = choices[i].get(pick) {
            *load.entry(member).or_default() += 1;
        }
        picks[i] = pick;
    }
    picks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts<'a>(choices: &[Vec<&'a str>], picks: &[usize]) -> HashMap<&'a str, usize> {
        let mut n = HashMap::new();
        for (c, &p) in choices.iter().zip(picks) {
            *n.entry(c[p]).or_default() += 1;
        }
        n
    }

    /// 32 keys held by the same three members, each key preferring one of them as a
    /// reader's hash would (here: all the first): the batch splits 11/11/10, not 32/0/0.
    #[test]
    fn a_batch_of_replicated_keys_splits_evenly_over_their_holders() {
        let choices: Vec<Vec<&str>> = (0..32)
            .map(|i| {
                let mut c = vec!["a", "b", "c"];
                c.rotate_left(i % 3 * usize::from(i % 5 == 0));
                c
            })
            .collect();
        let n = counts(&choices, &balanced(&choices));
        let mut got: Vec<usize> = ["a", "b", "c"].iter().map(|m| n[m]).collect();
        got.sort();
        assert_eq!(got, [10, 11, 11], "{n:?}");
    }

    /// Keys without replicas go to their owner wherever they are in the batch, and the
    /// replicated keys make up for it on the other holders; ties go to the preferred one.
    #[test]
    fn lone_keys_stay_with_their_owner_and_the_rest_balance_around_them() {
        let mut choices: Vec<Vec<&str>> = (0..6).map(|_| vec!["b", "a", "c"]).collect();
        choices.extend((0..4).map(|_| vec!["a"]));
        let picks = balanced(&choices);
        let n = counts(&choices, &picks);
        assert_eq!(n.get("a"), Some(&4), "{n:?}");
        assert_eq!((n.get("b"), n.get("c")), (Some(&3), Some(&3)), "{n:?}");
        assert!(picks[6..].iter().all(|&p| p == 0));
        assert_eq!(
            picks[0], 0,
            "the first replicated key goes to its preferred holder"
        );
    }
}
