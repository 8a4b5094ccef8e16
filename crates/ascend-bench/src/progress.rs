//! Progress: a bar on a terminal; elsewhere (CI logs, a file) plain lines: one when the
//! steps or the message change (at most one a second), otherwise one every 10 s.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
use parking_lot::Mutex;

use crate::Res;

/// How often an unchanged line is repeated.
const EVERY: Duration = Duration::from_secs(10);

/// A progress bar of `len` steps drawn with `template` (indicatif's syntax, starting with
/// `{elapsed_precise}`), as lines on stderr when stderr is not a terminal.
pub(crate) fn bar(len: u64, template: &str) -> Res<ProgressBar> {
    let pb = ProgressBar::with_draw_target(Some(len), target());
    pb.set_style(
        ProgressStyle::with_template(template)
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    Ok(pb)
}

fn target() -> ProgressDrawTarget {
    if io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::term_like_with_hz(Box::new(Lines::default()), 2)
    }
}

/// A "terminal" that turns redraws into log lines.
#[derive(Debug, Default)]
struct Lines {
    last: Mutex<Option<(String, Instant)>>,
}

impl TermLike for Lines {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.write_str(s)
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        let s = s.trim_end();
        if s.is_empty() {
            return Ok(());
        }
        // The text after the elapsed time and the bar: the step count and the message.
        let key = s
            .rsplit_once(']')
            .map_or(s, |(_, rest)| rest)
            .trim()
            .to_owned();
        let mut last = self.last.lock();
        let due = match &*last {
            Some((k, at)) => {
                at.elapsed() >= EVERY || (*k != key && at.elapsed() >= Duration::from_secs(1))
            }
            None => true,
        };
        if due {
            *last = Some((key, Instant::now()));
            writeln!(io::stderr(), "{s}")?;
        }
        Ok(())
    }
    fn clear_line(&self) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        io::stderr().flush()
    }
}
