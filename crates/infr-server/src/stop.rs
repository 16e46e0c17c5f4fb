//! Stop strings matched on the decoded text. While streaming, text that could be the start of
//! a stop string is held back until it is known not to be one; the stop string itself is never
//! returned.

/// Incremental stop-string matcher.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What [`StopMatcher::push`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// Text safe to send now.
    pub text: String,
    /// The stop string that matched (generation should end; `text` is everything before it).
    pub stopped: Option<String>,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        Self { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), held: String::new() }
    }

    /// Add decoded text.
    pub fn push(&mut self, piece: &str) -> Pushed {
        self.held.push_str(piece);
        // Earliest match wins; on equal starts, the longest stop string.
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by(|a, b| a.0.cmp(&b.0).then(b.1.len().cmp(&a.1.len())));
        if let Some((at, s)) = found {
            let stop = s.clone();
            let text = self.held[..at].to_owned();
            self.held.clear();
            return Pushed { text, stopped: Some(stop) };
        }
        let keep = self.partial_suffix();
        let cut = self.held.len() - keep;
        let text = self.held[..cut].to_owned();
        self.held.drain(..cut);
        Pushed { text, stopped: None }
    }

    /// The text still held back (generation ended without a match).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of the held text that starts a stop string.
    fn partial_suffix(&self) -> usize {
        let h = &self.held;
        let mut best = 0;
        for s in &self.stops {
            let max = s.len().saturating_sub(1).min(h.len());
            for n in (best + 1..=max).rev() {
                let start = h.len() - n;
                if h.is_char_boundary(start) && s.starts_with(&h[start..]) {
                    best = n;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let r = m.push(p);
            out.push_str(&r.text);
            if r.stopped.is_some() {
                return (out, r.stopped);
            }
        }
        out.push_str(&m.finish());
        (out, None)
    }

    #[test]
    fn matches_across_pieces_and_drops_the_stop() {
        assert_eq!(run(&["END"], &["Hello E", "N", "D more"]), ("Hello ".into(), Some("END".into())));
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".into(), Some("\n\n".into())));
    }

    #[test]
    fn holds_back_only_possible_prefixes() {
        let mut m = StopMatcher::new(vec!["STOP".into()]);
        assert_eq!(m.push("abc S").text, "abc ");
        assert_eq!(m.push("T").text, "");
        assert_eq!(m.push("x").text, "STx");
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn releases_held_text_at_the_end() {
        assert_eq!(run(&["STOP"], &["ab", "ST"]), ("abST".into(), None));
        assert_eq!(run(&[], &["ab", "cd"]), ("abcd".into(), None));
    }

    #[test]
    fn earliest_match_wins_and_unicode_is_safe() {
        assert_eq!(run(&["b", "ab"], &["xab"]), ("x".into(), Some("ab".into())));
        assert_eq!(run(&["é!"], &["café", "?"]), ("café?".into(), None));
        assert_eq!(run(&["é!"], &["caf", "é", "!"]), ("caf".into(), Some("é!".into())));
    }
}
