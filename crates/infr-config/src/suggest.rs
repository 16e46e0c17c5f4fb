//! "Did you mean" suggestions by edit distance.

/// Levenshtein distance between two strings (by chars).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The closest candidate within a distance proportional to the input's length, if any.
///
/// Dotted keys are also compared by their last segment, so `temperature` suggests `sampling.temperature`.
pub fn did_you_mean<'a, I: IntoIterator<Item = &'a str>>(input: &str, candidates: I) -> Option<&'a str> {
    let input_l = input.to_ascii_lowercase();
    let limit = (input.chars().count() / 3).max(2);
    let input_leaf = input_l.rsplit('.').next().unwrap_or(&input_l).to_string();
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        let cl = c.to_ascii_lowercase();
        let full = edit_distance(&input_l, &cl);
        let leaf_d = edit_distance(&input_leaf, cl.rsplit('.').next().unwrap_or(&cl));
        let score = if full <= limit {
            full
        } else if input_leaf.len() >= 4 && leaf_d <= 1 {
            // Right (or nearly right) name in the wrong or a missing section.
            limit
        } else {
            continue;
        };
        if best.is_none_or(|(bd, _)| score < bd) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_and_suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        let keys = ["sampling.temperature", "sampling.top_k", "context.size"];
        assert_eq!(did_you_mean("sampling.temprature", keys), Some("sampling.temperature"));
        assert_eq!(did_you_mean("temperature", keys), Some("sampling.temperature"));
        assert_eq!(did_you_mean("contxt.size", keys), Some("context.size"));
        assert_eq!(did_you_mean("wholly.unrelated", keys), None);
    }
}
