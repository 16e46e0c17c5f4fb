//! Download progress bars (indicatif), hidden unless stderr is a terminal.

use std::io::IsTerminal;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::options::ProgressMode;

/// A set of progress bars, one per file being downloaded.
#[derive(Debug, Clone)]
pub struct Progress {
    multi: MultiProgress,
}

impl Progress {
    /// Bars drawn on stderr according to `mode` (`Auto`: only when stderr is a terminal).
    pub fn new(mode: ProgressMode) -> Self {
        let visible = match mode {
            ProgressMode::Always => true,
            ProgressMode::Never => false,
            ProgressMode::Auto => std::io::stderr().is_terminal(),
        };
        let target = if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        Progress { multi: MultiProgress::with_draw_target(target) }
    }

    /// A new bar for `name`, sized when the total is known, a spinner with a byte count otherwise.
    pub fn bar(&self, name: &str, total: Option<u64>) -> ProgressBar {
        let bar = match total {
            Some(t) => ProgressBar::new(t).with_style(
                ProgressStyle::with_template(
                    "{msg:40!} [{bar:30.cyan/blue}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{msg:40!} {spinner} {bytes} {bytes_per_sec}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        let bar = self.multi.add(bar);
        bar.set_message(name.rsplit('/').next().unwrap_or(name).to_string());
        bar
    }
}
