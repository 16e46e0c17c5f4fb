//! Reasoning ("thinking") in model output. Qwen3, DeepSeek-R1, QwQ and their kin write their
//! chain of thought between `<think>` and `</think>` before the answer (Gemma 4 between
//! `<|channel>thought` and `<channel|>`, see [`Tags`]); some chat templates (DeepSeek-R1's,
//! Qwen3's with thinking on) already end the prompt with the opener, so the reply starts inside
//! the reasoning and carries only the closer.
//!
//! [`ReasoningSplit`] separates the two parts of a reply, whole or streamed: the reasoning goes
//! to OpenAI's `reasoning_content` / Anthropic's `thinking` block, the rest is the content (and
//! only the content is searched for tool calls). Like llama.cpp, only reasoning at the very
//! start of a reply is recognised: a `<think>` later in the answer is plain text. While
//! streaming, text that may be the start of a tag is held back until it is known, so a partial
//! `<think>` or `</think>` never reaches the client as content. Whitespace around the
//! reasoning (the newlines templates put after `<think>` and after `</think>`) is dropped.

use std::str::FromStr;

/// The tag that opens reasoning.
pub const OPEN: &str = "<think>";
/// The tag that closes reasoning.
pub const CLOSE: &str = "</think>";

/// The markers around a model family's reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tags {
    pub open: &'static str,
    pub close: &'static str,
    /// Headers that open the answer and are dropped from it (gpt-oss's final channel).
    pub headers: &'static [&'static str],
}

/// `<think>` ... `</think>` (Qwen3, DeepSeek-R1, QwQ, SmolLM3...).
pub const THINK: Tags = Tags { open: OPEN, close: CLOSE, headers: &[] };
/// Gemma 4's thought channel: `<|channel>thought` ... `<channel|>`.
pub const GEMMA4: Tags = Tags { open: "<|channel>thought", close: "<channel|>", headers: &[] };
/// gpt-oss's harmony format: the `analysis` channel is the reasoning, the `final` channel
/// the answer (other messages, such as tool calls, pass on to the tool parser).
pub const HARMONY: Tags = Tags {
    open: "<|channel|>analysis<|message|>",
    close: "<|end|>",
    headers: &["<|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>"],
};

/// Every family's markers; [`THINK`] is also the default.
const ALL: [Tags; 3] = [GEMMA4, HARMONY, THINK];

impl Tags {
    /// The markers a chat template uses.
    pub fn for_template(template_source: &str) -> Tags {
        ALL.into_iter().find(|t| template_source.contains(t.open)).unwrap_or(THINK)
    }

    /// Whether `t` may still become one of the answer headers.
    fn header_prefix(&self, t: &str) -> bool {
        self.headers.iter().any(|h| h.starts_with(t))
    }

    /// The length of the answer header `t` starts with, if any.
    fn header_len(&self, t: &str) -> Option<usize> {
        self.headers.iter().find(|h| t.starts_with(*h)).map(|h| h.len())
    }
}

/// How the server treats reasoning in replies (`--reasoning-format`, as llama.cpp's flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// Leave replies as generated: `<think>...</think>` stays in the content.
    None,
    /// Split the reasoning out: a reply that opens with `<think>`, or whose prompt ends with an
    /// open `<think>`, has its reasoning in `reasoning_content` / a `thinking` block.
    Deepseek,
    /// As [`ReasoningFormat::Deepseek`], except that a prompt ending with `<think>` only counts
    /// as open reasoning when the chat template itself mentions `<think>` (the default).
    #[default]
    Auto,
}

/// A reasoning format name that is not `none`, `deepseek` or `auto`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reasoning format '{0}' (expected none, deepseek or auto)")]
pub struct UnknownFormat(pub String);

impl FromStr for ReasoningFormat {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Self::None),
            "deepseek" => Ok(Self::Deepseek),
            "auto" => Ok(Self::Auto),
            _ => Err(UnknownFormat(s.to_owned())),
        }
    }
}

impl ReasoningFormat {
    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Deepseek => "deepseek",
            Self::Auto => "auto",
        }
    }

    /// The splitter for one reply, or `None` when replies pass through untouched.
    /// `template_source` is the chat template's text; `prompt_open` says whether the rendered
    /// prompt ends with an open `<think>` (see [`prompt_opens_reasoning`]).
    pub fn splitter(self, template_source: &str, prompt_open: bool) -> Option<ReasoningSplit> {
        let tags = Tags::for_template(template_source);
        match self {
            Self::None => None,
            Self::Deepseek => Some(ReasoningSplit::with_tags(tags, prompt_open)),
            Self::Auto => Some(ReasoningSplit::with_tags(tags, prompt_open && template_source.contains(tags.open))),
        }
    }
}

/// Whether a rendered prompt leaves reasoning open: it ends with an opener (and whitespace).
pub fn prompt_opens_reasoning(prompt_text: &str) -> bool {
    let t = prompt_text.trim_end();
    ALL.iter().any(|tags| t.ends_with(tags.open))
}

/// Where the splitter is in the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: the reply may still open with `<think>`.
    Start,
    /// Inside the reasoning, until `</think>`.
    Reasoning,
    /// Just after the reasoning: an answer header may follow (harmony).
    AfterReasoning,
    /// The answer: everything else passes through.
    Content,
}

/// What one step of the splitter releases. The reasoning always comes before the content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    /// Reasoning text safe to send now.
    pub reasoning: String,
    /// Content text safe to send now.
    pub content: String,
}

/// Incremental splitter of a reply into reasoning and content.
#[derive(Debug, Clone)]
pub struct ReasoningSplit {
    tags: Tags,
    state: State,
    held: String,
    /// Drop the whitespace that opens the current part.
    trim: bool,
}

impl ReasoningSplit {
    /// A splitter for a reply that starts inside reasoning (`open`: the prompt ended with
    /// `<think>`) or may open with `<think>`.
    pub fn new(open: bool) -> Self {
        Self::with_tags(THINK, open)
    }

    /// [`ReasoningSplit::new`] for other markers.
    pub fn with_tags(tags: Tags, open: bool) -> Self {
        let state = if open { State::Reasoning } else { State::Start };
        Self { tags, state, held: String::new(), trim: open }
    }

    /// Split a whole reply.
    pub fn split_whole(mut self, text: &str) -> Split {
        let mut out = self.push(text);
        let last = self.finish();
        out.reasoning.push_str(&last.reasoning);
        out.content.push_str(&last.content);
        out
    }

    /// Add decoded text.
    pub fn push(&mut self, piece: &str) -> Split {
        self.held.push_str(piece);
        let mut out = Split::default();
        loop {
            match self.state {
                State::Start => {
                    let t = self.held.trim_start();
                    if let Some(rest) = t.strip_prefix(self.tags.open) {
                        let skip = self.held.len() - rest.len();
                        self.held.drain(..skip);
                        self.state = State::Reasoning;
                        self.trim = true;
                        continue;
                    }
                    if let Some(n) = self.tags.header_len(t) {
                        let skip = self.held.len() - t.len() + n;
                        self.held.drain(..skip);
                        self.state = State::Content;
                        self.trim = true;
                        continue;
                    }
                    if t.is_empty() || self.tags.open.starts_with(t) || self.tags.header_prefix(t) {
                        return out; // may still become `<think>` (or an answer header)
                    }
                    self.state = State::Content;
                    self.trim = false;
                }
                State::AfterReasoning => {
                    let t = self.held.trim_start();
                    if let Some(n) = self.tags.header_len(t) {
                        let skip = self.held.len() - t.len() + n;
                        self.held.drain(..skip);
                    } else if !self.tags.headers.is_empty() && (t.is_empty() || self.tags.header_prefix(t)) {
                        return out;
                    }
                    self.state = State::Content;
                }
                State::Reasoning => {
                    if self.trim && !self.trim_start() {
                        return out;
                    }
                    if let Some(at) = self.held.find(self.tags.close) {
                        out.reasoning.push_str(self.held[..at].trim_end());
                        self.held.drain(..at + self.tags.close.len());
                        self.state = State::AfterReasoning;
                        self.trim = true;
                        continue;
                    }
                    // Hold back a possible start of `</think>` and the whitespace before it
                    // (trailing whitespace of the reasoning is dropped if the closer follows).
                    let keep = partial_suffix(&self.held, self.tags.close);
                    let send = self.held[..self.held.len() - keep].trim_end().len();
                    out.reasoning.extend(self.held.drain(..send));
                    return out;
                }
                State::Content => {
                    if self.trim && !self.trim_start() {
                        return out;
                    }
                    out.content.push_str(&self.held);
                    self.held.clear();
                    return out;
                }
            }
        }
    }

    /// The reply ended: whatever is held back. Reasoning that never closed is all reasoning.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        let mut out = Split::default();
        match self.state {
            State::Start => out.content = held,
            State::Reasoning => {
                let held = if self.trim { held.trim_start() } else { &held };
                out.reasoning = held.trim_end().to_owned();
            }
            State::Content | State::AfterReasoning => {
                out.content = if self.trim { held.trim_start().to_owned() } else { held }
            }
        }
        out
    }

    /// Drop leading whitespace of the held text; true once something else is held.
    fn trim_start(&mut self) -> bool {
        let n = self.held.len() - self.held.trim_start().len();
        self.held.drain(..n);
        if self.held.is_empty() {
            return false;
        }
        self.trim = false;
        true
    }
}

/// Length in bytes of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    let max = tag.len().saturating_sub(1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `pieces` one by one; the concatenated reasoning and content.
    fn run(open: bool, pieces: &[&str]) -> (String, String) {
        let mut s = ReasoningSplit::new(open);
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            let out = s.push(p);
            r.push_str(&out.reasoning);
            c.push_str(&out.content);
        }
        let out = s.finish();
        r.push_str(&out.reasoning);
        c.push_str(&out.content);
        (r, c)
    }

    fn whole(open: bool, text: &str) -> (String, String) {
        let s = ReasoningSplit::new(open).split_whole(text);
        (s.reasoning, s.content)
    }

    #[test]
    fn no_tags_pass_through() {
        assert_eq!(whole(false, "Paris is the capital."), (String::new(), "Paris is the capital.".into()));
        assert_eq!(whole(false, "  a <think> later is text"), (String::new(), "  a <think> later is text".into()));
        assert_eq!(whole(false, ""), (String::new(), String::new()));
        assert_eq!(whole(false, "<thi"), (String::new(), "<thi".into()));
        assert_eq!(run(false, &["<", "b>bold</b>"]), (String::new(), "<b>bold</b>".into()));
    }

    #[test]
    fn full_tags() {
        let t = "<think>\nThe user asks about France.\n</think>\n\nParis.";
        assert_eq!(whole(false, t), ("The user asks about France.".into(), "Paris.".into()));
        assert_eq!(whole(false, "\n<think>a</think>b"), ("a".into(), "b".into()));
        assert_eq!(whole(false, "<think></think>answer"), (String::new(), "answer".into()));
        // Only the first block is reasoning.
        assert_eq!(whole(false, "<think>a</think>b<think>c</think>"), ("a".into(), "b<think>c</think>".into()));
    }

    #[test]
    fn forced_open() {
        assert_eq!(whole(true, "\nthinking...\n</think>\n\nDone."), ("thinking...".into(), "Done.".into()));
        assert_eq!(whole(true, "x</think>y"), ("x".into(), "y".into()));
        assert!(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        let qwen3 = "{%- if enable_thinking %}<think>{% endif %}";
        assert!(ReasoningFormat::Auto.splitter(qwen3, true).is_some_and(|s| s.state == State::Reasoning));
        assert!(ReasoningFormat::Auto.splitter("chatml", true).is_some_and(|s| s.state == State::Start));
        assert!(ReasoningFormat::Deepseek.splitter("chatml", true).is_some_and(|s| s.state == State::Reasoning));
        assert!(ReasoningFormat::None.splitter(qwen3, true).is_none());
    }

    #[test]
    fn gemma4_thought_channel() {
        let s = ReasoningSplit::with_tags(GEMMA4, false).split_whole("<|channel>thought\nHmm.\n<channel|>Paris.");
        assert_eq!((s.reasoning.as_str(), s.content.as_str()), ("Hmm.", "Paris."));
        let g4 = "{{ '<|channel>thought\\n<channel|>' }}";
        assert_eq!(Tags::for_template(g4), GEMMA4);
        assert!(ReasoningFormat::Auto.splitter(g4, false).is_some_and(|s| s.tags == GEMMA4));
        // Thinking off: the template closes an empty thought at the end of the prompt.
        assert!(!prompt_opens_reasoning("<|turn>model\n<|channel>thought\n<channel|>"));
        assert!(prompt_opens_reasoning("<|turn>model\n<|channel>thought\n"));
    }

    #[test]
    fn harmony_channels() {
        let whole = |t: &str| {
            let s = ReasoningSplit::with_tags(HARMONY, false).split_whole(t);
            (s.reasoning, s.content)
        };
        let t =
            "<|channel|>analysis<|message|>User asks. Easy.<|end|><|start|>assistant<|channel|>final<|message|>Paris.";
        assert_eq!(whole(t), ("User asks. Easy.".into(), "Paris.".into()));
        assert_eq!(whole("<|channel|>final<|message|>Hi."), (String::new(), "Hi.".into()));
        // A tool call after the reasoning stays in the content for the tool parser.
        let call = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}";
        assert_eq!(whole(&format!("<|channel|>analysis<|message|>r<|end|>{call}")), ("r".into(), call.into()));
        // Streamed at every split point.
        for i in (0..=t.len()).filter(|&i| t.is_char_boundary(i)) {
            let mut s = ReasoningSplit::with_tags(HARMONY, false);
            let (mut r, mut c) = (String::new(), String::new());
            for piece in [&t[..i], &t[i..]] {
                let o = s.push(piece);
                r.push_str(&o.reasoning);
                c.push_str(&o.content);
            }
            let o = s.finish();
            r.push_str(&o.reasoning);
            c.push_str(&o.content);
            assert_eq!((r.as_str(), c.as_str()), ("User asks. Easy.", "Paris."), "split at {i}");
        }
    }

    #[test]
    fn unterminated_reasoning_is_all_reasoning() {
        assert_eq!(whole(false, "<think>\nstill going\n"), ("still going".into(), String::new()));
        assert_eq!(whole(true, "cut off mid </thi"), ("cut off mid </thi".into(), String::new()));
        assert_eq!(whole(false, "<think>"), (String::new(), String::new()));
    }

    #[test]
    fn tags_split_across_pieces_at_every_byte() {
        let cases = [
            (false, "<think>\nMaybe é?\n</think>\n\nAnswer: <b>yes</b> é", "Maybe é?", "Answer: <b>yes</b> é"),
            (true, "\nOpen é.\n</think>\n\n</think> kept", "Open é.", "</think> kept"),
            (false, " plain <think> text é", "", " plain <think> text é"),
        ];
        for (open, text, reasoning, content) in cases {
            for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                for j in (i..=text.len()).filter(|&j| text.is_char_boundary(j)) {
                    let got = run(open, &[&text[..i], &text[i..j], &text[j..]]);
                    assert_eq!(got, (reasoning.to_owned(), content.to_owned()), "split at {i},{j} of {text:?}");
                }
            }
            let bytes: Vec<String> = text.chars().map(String::from).collect();
            let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
            assert_eq!(run(open, &refs), (reasoning.to_owned(), content.to_owned()), "char by char");
        }
    }

    #[test]
    fn streaming_never_leaks_a_partial_tag() {
        let mut s = ReasoningSplit::new(false);
        assert_eq!(s.push("<thi"), Split::default());
        assert_eq!(s.push("nk>abc </th"), Split { reasoning: "abc".into(), content: String::new() });
        assert_eq!(s.push("ink>"), Split::default());
        assert_eq!(s.push("\n"), Split::default());
        assert_eq!(s.push("ok <"), Split { reasoning: String::new(), content: "ok <".into() });
        assert_eq!(s.finish(), Split::default());
    }

    #[test]
    fn tool_calls_stay_in_the_content() {
        let call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        let t = format!("<think>I should call f. <tool_call> is how.</think>\n{call}");
        let (r, c) = whole(false, &t);
        assert_eq!(r, "I should call f. <tool_call> is how.");
        assert_eq!(c, call);
        // A bare JSON call opening the reply is content at once (not held as a possible tag).
        let mut s = ReasoningSplit::new(false);
        assert_eq!(s.push("{\"name\"").content, "{\"name\"");
    }

    #[test]
    fn format_names() {
        for f in [ReasoningFormat::None, ReasoningFormat::Deepseek, ReasoningFormat::Auto] {
            assert_eq!(f.as_str().parse::<ReasoningFormat>(), Ok(f));
        }
        assert_eq!("DeepSeek".parse::<ReasoningFormat>(), Ok(ReasoningFormat::Deepseek));
        assert!("deepseek-legacy".parse::<ReasoningFormat>().is_err());
        assert_eq!(ReasoningFormat::default(), ReasoningFormat::Auto);
    }
}
