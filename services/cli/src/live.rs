//! The live status display: a spinner line per task on a terminal
//! (`indicatif`, drawn on stderr), plain lines when stdout is not a terminal.

use std::{collections::HashMap, io::IsTerminal, time::Duration};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use presa_client::{Status, Task};

/// Where plain status lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlainTo {
    /// For `call`: stdout carries the result.
    Stderr,
    /// For `watch`: the lines are the output.
    Stdout,
}

#[derive(Debug)]
pub(crate) struct Live {
    fancy: Option<MultiProgress>,
    bars: HashMap<String, ProgressBar>,
    /// The last (status, message) line printed per task, in plain mode.
    last: HashMap<String, String>,
    plain_to: PlainTo,
    /// No status lines at all (`--json`, where stdout is for JSON only).
    quiet: bool,
    verbose: bool,
}

/// Whether a person is looking: stdout and stderr are terminals.
pub(crate) fn interactive_output() -> bool {
    std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

impl Live {
    pub(crate) fn new(plain_to: PlainTo, quiet: bool, verbose: bool) -> Live {
        let fancy = interactive_output().then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Live { fancy, bars: HashMap::new(), last: HashMap::new(), plain_to, quiet, verbose }
    }

    fn line(task: &Task) -> String {
        match task.status_message() {
            Some(m) if !m.is_empty() => format!("{}: {m}", task.status()),
            _ => task.status().to_string(),
        }
    }

    /// Show a snapshot.
    pub(crate) fn update(&mut self, task: &Task) {
        let line = Self::line(task);
        let id = task.id().to_string();
        if let Some(mp) = &self.fancy {
            let bar = self.bars.entry(id.clone()).or_insert_with(|| {
                let bar = mp.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(id.clone());
                bar.enable_steady_tick(Duration::from_millis(100));
                bar
            });
            if task.status().is_terminal() {
                let mark = match task.status() {
                    Status::Completed if task.result().is_some_and(|r| r["isError"] == true) => "✗",
                    Status::Completed => "✔",
                    _ => "✗",
                };
                bar.set_style(
                    ProgressStyle::with_template("{prefix:.bold} {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.finish_with_message(format!("{mark} {line}"));
            } else {
                bar.set_message(line);
            }
            return;
        }
        if self.quiet || self.last.get(&id) == Some(&line) {
            return;
        }
        let text = format!("{id} {line}");
        self.last.insert(id, line);
        match self.plain_to {
            PlainTo::Stdout => println!("{text}"),
            PlainTo::Stderr => eprintln!("{text}"),
        }
    }

    /// A remark on stderr (above the spinners), shown always.
    pub(crate) fn say(&self, text: &str) {
        match &self.fancy {
            Some(mp) => {
                let _ = mp.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    /// A transport remark, shown with `--verbose`.
    pub(crate) fn note(&self, text: &str) {
        if self.verbose {
            self.say(&format!("presa: {text}"));
        }
    }

    /// Run `f` (a prompt) with the spinners hidden.
    pub(crate) fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.fancy {
            Some(mp) => mp.suspend(f),
            None => f(),
        }
    }

    /// Stop every spinner (before printing the result).
    pub(crate) fn finish(&mut self) {
        for bar in self.bars.values() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
        self.bars.clear();
    }
}
