//! Typed errors of chat-template parsing and rendering.

use minijinja::ErrorKind;

/// Everything that can go wrong parsing or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template does not parse.
    #[error("chat template syntax error at line {line}: {message}")]
    Syntax {
        /// 1-based line of the template source.
        line: usize,
        /// What the parser complained about.
        message: String,
    },
    /// The template called `raise_exception(message)`, i.e. it rejected the conversation
    /// (typically: roles not alternating, an unsupported role, a system message in the wrong place).
    #[error("chat template rejected the conversation: {message}")]
    Raised {
        /// The message the template passed to `raise_exception`.
        message: String,
    },
    /// Rendering executed more template instructions than the fuel budget allows
    /// (an endless or absurdly long loop).
    #[error("chat template ran out of fuel after {fuel} instructions (endless or very long loop?)")]
    OutOfFuel {
        /// The configured budget.
        fuel: u64,
    },
    /// The rendered prompt would be longer than the configured output limit.
    #[error("chat template output exceeds the limit of {limit} bytes")]
    OutputTooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// Macros, includes or nested blocks recursed deeper than the recursion limit.
    #[error("chat template recursion limit of {limit} exceeded")]
    RecursionLimit {
        /// The configured limit.
        limit: usize,
    },
    /// Any other failure while rendering: a type error, an unknown filter, a bad argument.
    #[error("chat template failed{}: {message}", line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Render {
        /// 1-based template line where it happened, if known.
        line: Option<usize>,
        /// What went wrong.
        message: String,
    },
    /// The request cannot be turned into template input (e.g. a kwarg shadows a reserved name
    /// with a value of the wrong shape).
    #[error("invalid chat request: {0}")]
    Request(String),
    /// Reading the template or special tokens from GGUF metadata failed.
    #[error("chat template metadata: {0}")]
    Metadata(#[from] infr_gguf::GgufError),
}

/// Marker carried as the source of the error `raise_exception` returns, so that the message
/// can be told apart from engine errors after minijinja has propagated it.
#[derive(Debug)]
pub(crate) struct RaisedException(pub(crate) String);

impl std::fmt::Display for RaisedException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedException {}

/// The message of a minijinja error without its `(in template:line)` suffix.
fn message_of(err: &minijinja::Error) -> String {
    match err.detail() {
        Some(detail) => format!("{}: {detail}", err.kind()),
        None => err.kind().to_string(),
    }
}

/// Looks for a marker of type `T` in the error's source chain.
fn find_source<T: std::error::Error + 'static>(err: &minijinja::Error) -> Option<&T> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        cur = e.source();
    }
    None
}

/// Converts a parse-time error.
pub(crate) fn from_parse_error(err: &minijinja::Error) -> ChatTemplateError {
    if err.kind() == ErrorKind::SyntaxError {
        ChatTemplateError::Syntax { line: err.line().unwrap_or(1), message: message_of(err) }
    } else {
        ChatTemplateError::Render { line: err.line(), message: message_of(err) }
    }
}

/// Converts a render-time error, recognising `raise_exception`, fuel and recursion limits
/// (the output limit is detected by the writer itself).
pub(crate) fn from_render_error(
    err: &minijinja::Error,
    fuel: Option<u64>,
    recursion_limit: usize,
) -> ChatTemplateError {
    if let Some(raised) = find_source::<RaisedException>(err) {
        return ChatTemplateError::Raised { message: raised.0.clone() };
    }
    match err.kind() {
        ErrorKind::OutOfFuel => ChatTemplateError::OutOfFuel { fuel: fuel.unwrap_or(0) },
        ErrorKind::InvalidOperation if err.detail().is_some_and(|d| d.contains("recursion limit")) => {
            ChatTemplateError::RecursionLimit { limit: recursion_limit }
        }
        ErrorKind::SyntaxError => ChatTemplateError::Syntax { line: err.line().unwrap_or(1), message: message_of(err) },
        _ => ChatTemplateError::Render { line: err.line(), message: message_of(err) },
    }
}
