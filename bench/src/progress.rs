//! The whole run's progress on stderr: one bar over every case (a row of a table, run
//! for each competitor) of the selected scenarios, with the time left estimated from
//! the time per case so far. The measuring loops move the bar within a case.
//!
//! Where stderr is not a terminal (CI, a redirect) the bar hides itself and each case
//! prints its line as before (`== scenario`, then one line per case).

use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressState, ProgressStyle};

/// Bar steps per case, so that a case's repetitions move it too.
const STEPS: u64 = 1000;

/// The bar and where the run is in it.
struct Run {
    bar: ProgressBar,
    /// Cases planned up to the end of the current scenario.
    planned: u64,
    /// Bar position (steps) at the start of the current case, once one started.
    case_start: Option<u64>,
    /// Bar position at the start of the current scenario.
    scenario_start: u64,
}

static RUN: Mutex<Option<Run>> = Mutex::new(None);

fn with_run<T>(f: impl FnOnce(&mut Run) -> T) -> Option<T> {
    let mut run = RUN.lock().unwrap_or_else(|e| e.into_inner());
    run.as_mut().map(f)
}

/// Minutes and seconds, e.g. `4m 05s`, or seconds alone under a minute.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Time left at the pace so far: `elapsed × (total − done) / done`.
fn left(done: u64, total: u64, elapsed: Duration) -> Option<Duration> {
    (done > 0).then(|| elapsed.mul_f64(total.saturating_sub(done) as f64 / done as f64))
}

/// Starts the bar over `cases` cases.
pub fn start(cases: u64) {
    let bar = ProgressBar::new(cases * STEPS);
    let style = ProgressStyle::with_template(
        "{prefix} [{bar:25}] {cases} cases, {elapsed_clock} elapsed, {left} left\n  {wide_msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
    .with_key("cases", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
        let _ = write!(w, "{}/{}", s.pos() / STEPS, s.len().unwrap_or(0) / STEPS);
    })
    .with_key(
        "elapsed_clock",
        |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{}", clock(s.elapsed()));
        },
    )
    .with_key("left", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
        let _ = match left(s.pos(), s.len().unwrap_or(0), s.elapsed()) {
            Some(d) => write!(w, "~{}", clock(d)),
            None => write!(w, "?"),
        };
    });
    bar.set_style(style);
    if !bar.is_hidden() {
        // Redraws the clocks while a long case runs.
        bar.enable_steady_tick(Duration::from_millis(500));
    }
    let mut run = RUN.lock().unwrap_or_else(|e| e.into_inner());
    *run = Some(Run {
        bar,
        planned: 0,
        case_start: None,
        scenario_start: 0,
    });
}

/// A scenario of `cases` cases begins.
pub fn scenario(id: &str, cases: u64) {
    let shown = with_run(|r| {
        r.scenario_start = r.planned * STEPS;
        r.planned += cases;
        r.case_start = None;
        r.bar.set_position(r.scenario_start);
        r.bar.set_prefix(id.to_string());
        !r.bar.is_hidden()
    });
    if shown != Some(true) {
        eprintln!("== {id}");
    }
}

/// The next case begins: `what` says which.
pub fn case(what: &str) {
    let shown = with_run(|r| {
        let start = r.case_start.map_or(r.scenario_start, |s| s + STEPS);
        if start >= r.planned * STEPS {
            // More cases than planned: the bar grows rather than overflows.
            r.planned += 1;
            r.bar.inc_length(STEPS);
        }
        r.case_start = Some(start);
        r.bar.set_position(start);
        r.bar.set_message(what.to_string());
        !r.bar.is_hidden()
    });
    if shown != Some(true) {
        eprintln!("  {what}");
    }
}

/// `done` of the current case's `of` runs are finished.
pub fn within(done: usize, of: usize) {
    with_run(|r| {
        if let Some(start) = r.case_start {
            let part = STEPS * done.min(of) as u64 / of.max(1) as u64;
            r.bar.set_position(start + part.min(STEPS - 1));
        }
    });
}

/// The current scenario ended after `elapsed`.
pub fn scenario_done(elapsed: Duration) {
    let shown = with_run(|r| {
        r.bar.set_position(r.planned * STEPS);
        // Above the bar, where it stays on the screen.
        r.bar
            .println(format!("{} done in {}", r.bar.prefix(), clock(elapsed)));
        !r.bar.is_hidden()
    });
    if shown != Some(true) {
        eprintln!("   ({:.1} s)", elapsed.as_secs_f64());
    }
}

/// Runs `f` (which prints) with the bar off the screen.
pub fn suspend<T>(f: impl FnOnce() -> T) -> T {
    let bar = with_run(|r| r.bar.clone());
    match bar {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// Takes the bar off the screen for good.
pub fn finish() {
    with_run(|r| r.bar.finish_and_clear());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_follows_the_pace_so_far() {
        let minute = Duration::from_secs(60);
        assert_eq!(left(0, 10, minute), None);
        assert_eq!(left(5, 10, minute), Some(minute));
        assert_eq!(left(1, 4, minute), Some(3 * minute));
        assert_eq!(left(4, 4, minute), Some(Duration::ZERO));
        assert_eq!(clock(Duration::from_secs(245)), "4m 05s");
        assert_eq!(clock(Duration::from_secs(9)), "9s");
    }
}
