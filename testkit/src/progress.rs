//! [`Progress`]: the progress of a long operation (a drill, a benchmark
//! run) on stderr. On a terminal, an `indicatif` bar redrawn in place; on
//! anything else (CI logs, files), one plain line every `every` seconds and
//! at the end, so a log shows the run advancing without a line per second.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    label: String,
    len: u64,
    unit: String,
    every: Duration,
    last_line: Option<Instant>,
}

impl Progress {
    /// Progress over `len` of `unit` (`"s"` for a timed run), called
    /// `label`.
    pub fn new(label: &str, len: u64, unit: &str, every: Duration) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let template = format!("{{prefix}} [{{bar:30}}] {{pos:>4}}/{{len}}{unit}  {{msg}}");
            let style = ProgressStyle::with_template(&template)
                .expect("a valid template")
                .progress_chars("=> ");
            ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
                .with_style(style)
                .with_prefix(label.to_string())
        });
        Progress {
            bar,
            label: label.to_string(),
            len,
            unit: unit.to_string(),
            every,
            last_line: None,
        }
    }

    /// The run is at `pos` of `len`, and `msg` says what it did so far.
    pub fn update(&mut self, pos: u64, msg: String) {
        let pos = pos.min(self.len);
        match &self.bar {
            Some(bar) => {
                bar.set_position(pos);
                bar.set_message(msg);
            }
            None => {
                let due = self.last_line.is_none_or(|t| t.elapsed() >= self.every);
                if due || pos == self.len {
                    eprintln!("{} {pos:>4}/{}{}  {msg}", self.label, self.len, self.unit);
                    self.last_line = Some(Instant::now());
                }
            }
        }
    }

    /// The run is over: clear the bar (a plain log keeps its lines).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A timed run's progress, shown until this drops: `msg` (what the run did
/// so far) is asked once a second.
pub struct Ticker(tokio::task::JoinHandle<()>);

impl Ticker {
    pub fn start(label: &str, secs: u64, msg: impl Fn() -> String + Send + 'static) -> Ticker {
        let mut p = Progress::new(label, secs, "s", Duration::from_secs(10));
        let start = Instant::now();
        Ticker(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                p.update(start.elapsed().as_secs(), msg());
            }
        }))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}
