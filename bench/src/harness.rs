//! The measuring machinery every scenario shares: run configuration, a small
//! deterministic random generator, interleaved repetitions with median and
//! spread, the mimalloc allocator handles, and the Markdown tables.

use std::fmt::Write as _;
use std::time::Duration;

use crate::ratio::{fmt_ratio, ratio};

/// How big and how often: chosen once on the command line.
#[derive(Clone, Debug)]
pub struct Config {
    /// Multiplies every published iteration count (1.0 with `--full`).
    pub scale: f64,
    /// Repetitions per timing; the table shows their median and min–max.
    pub reps: usize,
    /// `--quick` or `--full`, for the headings.
    pub mode: &'static str,
    /// Number of CPUs seen by this process.
    pub cores: usize,
    /// Whether to add the peak-RSS tables (children processes; `--no-rss` turns them off).
    pub rss: bool,
    /// With `--procs N` (N > 0), the rows that take nanoseconds with a small working set
    /// (ring-alloc's, shared-arena's allocate + drop and churn) time every cell in N
    /// child processes instead of `reps` runs in this one: see [`measure_in_children`].
    pub procs: usize,
}

impl Config {
    /// Scales a published iteration count, keeping at least `min`.
    pub fn scaled(&self, published: usize, min: usize) -> usize {
        ((published as f64 * self.scale).round() as usize).max(min)
    }

    /// The scale factor as printed in headings, e.g. `1/20`.
    pub fn factor(&self) -> String {
        if self.scale >= 1.0 {
            "1 (published sizes)".to_string()
        } else {
            format!("1/{:.0}", 1.0 / self.scale)
        }
    }
}

/// xorshift64*: deterministic, allocation-free, the same stream for every competitor.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    /// The next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..=hi`.
    #[inline(always)]
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
}

/// `n` random bytes, the payload every competitor copies from.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut rng = Rng::new(0x5eed);
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// One timed run: its duration, and how often a ring had to wait for space.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Wall time of the run.
    pub time: Duration,
    /// Times the producer found its ring full and yielded.
    pub waits: u64,
    /// Times the producer dropped a partial buffer and started its message over.
    pub restarts: u64,
    /// CPU seconds per message of the producer and of the consumer threads, where the
    /// loop measures them (see [`Cpu`]).
    pub cpu: Option<Cpu>,
}

/// CPU time per message of a pipeline's producer and consumer threads
/// (`CLOCK_THREAD_CPUTIME_ID`, summed over a row's threads): what the run cost, which
/// the machine's other work moves less than the wall time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cpu {
    /// Producer seconds per message.
    pub producer: f64,
    /// Consumer seconds per message.
    pub consumer: f64,
}

impl Sample {
    /// A run that never waited nor restarted.
    pub fn timed(time: Duration) -> Self {
        Sample {
            time,
            ..Sample::default()
        }
    }
}

/// Median and spread of the repetitions of one competitor, per operation.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Median seconds per unit of work.
    pub median: f64,
    /// Fastest repetition.
    pub min: f64,
    /// Slowest repetition.
    pub max: f64,
    /// Median of the waits counted per run.
    pub waits: u64,
    /// Median of the restarts counted per run.
    pub restarts: u64,
    /// Medians of the runs' CPU time per message, where every run measured it.
    pub cpu: Option<Cpu>,
}

/// A competitor: its column name and one run of the scenario's loop.
pub type Runner<'a> = (String, Box<dyn FnMut() -> Option<Sample> + 'a>);

/// Runs every competitor `reps` times, interleaved (each repetition runs all of
/// them, starting from a different one), and divides times by `per`. A
/// competitor that cannot run (`None`) gets no stats.
pub fn measure(reps: usize, per: f64, runners: &mut [Runner<'_>]) -> Vec<Option<Stats>> {
    let n = runners.len();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::with_capacity(reps); n];
    for rep in 0..reps {
        for k in 0..n {
            let i = (rep + k) % n;
            if let Some(s) = (runners[i].1)() {
                samples[i].push(s);
            }
            crate::progress::within(rep * n + k + 1, reps * n);
        }
    }
    samples
        .into_iter()
        .map(|v| {
            let secs = v.iter().map(|s| s.time.as_secs_f64() / per).collect();
            let st = Stats::of(secs, median_count(v.iter().map(|s| s.waits)))?;
            Some(Stats {
                restarts: median_count(v.iter().map(|s| s.restarts)),
                cpu: median_cpu(&v),
                ..st
            })
        })
        .collect()
}

/// A cell's CPU time per message, producer + consumer, in nanoseconds: `92+61 ns`.
pub fn fmt_cpu(c: Cpu) -> String {
    format!("{:.0}+{:.0} ns", c.producer * 1e9, c.consumer * 1e9)
}

/// The medians of the samples' CPU times per message, producer and consumer apart;
/// `None` unless every sample has them.
fn median_cpu(v: &[Sample]) -> Option<Cpu> {
    let cpus: Vec<Cpu> = v.iter().map(|s| s.cpu).collect::<Option<_>>()?;
    let mid = |f: fn(&Cpu) -> f64| {
        let mut x: Vec<f64> = cpus.iter().map(f).collect();
        x.sort_by(f64::total_cmp);
        (!x.is_empty()).then(|| median(&x))
    };
    Some(Cpu {
        producer: mid(|c| c.producer)?,
        consumer: mid(|c| c.consumer)?,
    })
}

/// The median of some counts (the upper one of an even number), 0 for none.
fn median_count(counts: impl Iterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = counts.collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

impl Stats {
    /// The median and spread of `secs` (one competitor's runs), with `waits`; `None`
    /// if it has no runs.
    fn of(mut secs: Vec<f64>, waits: u64) -> Option<Stats> {
        if secs.is_empty() {
            return None;
        }
        secs.sort_by(f64::total_cmp);
        Some(Stats {
            median: median(&secs),
            min: secs[0],
            max: secs[secs.len() - 1],
            waits,
            restarts: 0,
            cpu: None,
        })
    }
}

/// [`measure`] across processes: runs row `row` of `scenario` for each of `cols`
/// competitors in `cfg.procs` child processes (this executable with `--rss-child`),
/// one timed run per process after an untimed one, interleaved (each round runs every
/// competitor, starting from a different one), and divides times by `per`. Each
/// process lays out its heap and stack anew (address-space randomisation), which moves
/// rows of a few nanoseconds by up to 20 % between processes of the same binary, two
/// modes apart; one process's repetitions all see the same layout, so their median
/// hides that spread. A competitor whose child fails gets no stats.
pub fn measure_in_children(
    cfg: &Config,
    scenario: &str,
    row: usize,
    cols: usize,
    per: f64,
) -> Vec<Option<Stats>> {
    let mut secs: Vec<Vec<f64>> = vec![Vec::with_capacity(cfg.procs); cols];
    for round in 0..cfg.procs {
        for k in 0..cols {
            let col = (round + k) % cols;
            if let Some(t) = child_time(cfg, scenario, row, col) {
                secs[col].push(t / per);
            }
            crate::progress::within(round * cols + k + 1, cfg.procs * cols);
        }
    }
    secs.into_iter().map(|v| Stats::of(v, 0)).collect()
}

/// One run of row `row`, column `col` of `scenario` in a child process, after an
/// untimed one (a fresh process first touches its heap's memory): its time in seconds.
fn child_time(cfg: &Config, scenario: &str, row: usize, col: usize) -> Option<f64> {
    child_output(cfg, scenario, row, col, &["--warm"])?
        .lines()
        .find_map(|l| l.strip_prefix("time "))?
        .trim()
        .parse()
        .ok()
}

/// What the child running row `row`, column `col` of `scenario` (with `extra`
/// arguments) printed on stdout, if it succeeded.
pub fn child_output(
    cfg: &Config,
    scenario: &str,
    row: usize,
    col: usize,
    extra: &[&str],
) -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe)
        .args([
            "--rss-child",
            scenario,
            &row.to_string(),
            &col.to_string(),
            cfg.mode,
        ])
        .args(extra)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// `x` with three significant digits, at least, and thousands unseparated: `0.412`,
/// `41.2`, `41234`; a whole number (a count) without decimals.
fn figure(x: f64) -> String {
    match x.abs() {
        a if a >= 100.0 || a.fract() == 0.0 => format!("{x:.0}"),
        a if a >= 10.0 => format!("{x:.1}"),
        a if a >= 1.0 => format!("{x:.2}"),
        _ => format!("{x:.3}"),
    }
}

/// How a table prints its times.
#[derive(Clone, Copy, Debug)]
pub enum Unit {
    /// Milliseconds per run (ringal's tables).
    Ms,
    /// Auto-ranged time (ns / µs / ms), criterion-table style.
    Auto,
    /// Millions of operations per second (higher is better).
    Mops,
    /// Mebibytes (peak RSS): one sample, no speed-up.
    Mib,
    /// Figures in the units their rows name (KiB per connection, frames per second):
    /// one sample, no speed-up.
    Figure,
}

impl Unit {
    /// Whether cells are single figures with no ratio (sizes, counts): not timed, no
    /// chart, no verdict.
    pub fn is_figure(self) -> bool {
        matches!(self, Unit::Mib | Unit::Figure)
    }
}

/// One row: its parameters and, per competitor, its stats (None = not run).
pub struct Row {
    /// Values of the parameter columns.
    pub params: Vec<String>,
    /// One entry per competitor column.
    pub cells: Vec<Option<Stats>>,
}

/// The ratio a table prints beside each median.
#[derive(Clone, Debug)]
pub enum Ratio {
    /// Speed-up against the row's cell in the baseline column: baseline / cell (above
    /// 1 = faster).
    SpeedUp,
    /// Slowdown against the same cell of a reference run, one row of cells per table
    /// row: cell / reference (above 1 = slower). The busy tables against their quiet run.
    Slowdown(Vec<Vec<Option<Stats>>>),
}

/// A table in the peer's layout: parameter columns, then one column per competitor.
pub struct Table {
    /// Heading.
    pub title: String,
    /// Names of the parameter columns.
    pub params: Vec<String>,
    /// Competitor column names.
    pub columns: Vec<String>,
    /// Index of the column speed-ups are relative to.
    pub baseline: usize,
    /// What the ratio beside each median compares it with.
    pub ratio: Ratio,
    /// Print unit.
    pub unit: Unit,
    /// Rows.
    pub rows: Vec<Row>,
    /// Columns whose wait counts are printed in a trailing column.
    pub wait_columns: Vec<usize>,
    /// Heading of that trailing column (`waits` unless set).
    pub wait_label: String,
    /// Columns whose restart counts are printed in a second trailing column.
    pub restart_columns: Vec<usize>,
    /// Columns of a figures table whose cells are ratios, printed as `0.95×`.
    pub ratio_columns: Vec<usize>,
    /// Notes printed under the table.
    pub notes: Vec<String>,
}

impl Table {
    /// An empty table.
    pub fn new(title: impl Into<String>, params: &[&str], columns: &[String], unit: Unit) -> Self {
        Table {
            title: title.into(),
            params: params.iter().map(|s| s.to_string()).collect(),
            columns: columns.to_vec(),
            baseline: 0,
            ratio: Ratio::SpeedUp,
            unit,
            rows: Vec::new(),
            wait_columns: Vec::new(),
            wait_label: "waits".into(),
            restart_columns: Vec::new(),
            ratio_columns: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Sets the speed-up reference column by name.
    pub fn baseline(mut self, name: &str) -> Self {
        self.baseline = self.columns.iter().position(|c| c == name).unwrap_or(0);
        self
    }

    /// What cell (`row`, `col`) is compared with: the row's baseline cell, or the
    /// reference run's cell (see [`Ratio`]).
    pub fn reference(&self, row: usize, col: usize) -> Option<Stats> {
        match &self.ratio {
            Ratio::SpeedUp => self.rows.get(row)?.cells.get(self.baseline).copied()?,
            Ratio::Slowdown(reference) => reference.get(row)?.get(col).copied()?,
        }
    }

    /// The ratio printed beside cell (`row`, `col`), from medians of times per
    /// operation (so in every unit): a speed-up or a slowdown, as [`Ratio`] says.
    /// `None` without the cell or what it is compared with, or where their medians
    /// make no ratio ([`ratio`]).
    pub fn ratio_of(&self, row: usize, col: usize) -> Option<f64> {
        let st = self.rows.get(row)?.cells.get(col).copied()??;
        let reference = self.reference(row, col)?;
        match self.ratio {
            Ratio::SpeedUp => ratio(reference.median, st.median),
            Ratio::Slowdown(_) => ratio(st.median, reference.median),
        }
    }

    /// What is printed beside cell (`row`, `col`): its ratio (`1.23×`, `n/a` where the
    /// medians make none), or `None` when the cell has nothing to be compared with.
    pub fn ratio_text(&self, row: usize, col: usize) -> Option<String> {
        self.reference(row, col)?;
        Some(fmt_ratio(self.ratio_of(row, col)))
    }

    /// `min–max` of `st` as printed: the fastest first for times, the slowest run's
    /// rate first for rates.
    fn md_spread(&self, st: Stats) -> String {
        let (lo, hi) = match self.unit {
            Unit::Mops => (st.max, st.min),
            _ => (st.min, st.max),
        };
        format!("{}–{}", self.fmt_time(lo), self.fmt_time(hi))
    }

    pub(crate) fn fmt_time(&self, secs: f64) -> String {
        match self.unit {
            Unit::Ms => format!("{:.1}", secs * 1e3),
            Unit::Mops => format!("{:.2}", 1e-6 / secs),
            Unit::Mib => format!("{secs:.1}"),
            Unit::Figure => figure(secs),
            Unit::Auto => {
                if secs < 1e-6 {
                    format!("{:.2} ns", secs * 1e9)
                } else if secs < 1e-3 {
                    format!("{:.2} µs", secs * 1e6)
                } else {
                    format!("{:.2} ms", secs * 1e3)
                }
            }
        }
    }

    /// A figures table's cell in column `col`: a ratio (`0.95×`) in a
    /// [`Table::ratio_columns`] column, else as its unit prints it.
    pub(crate) fn fmt_figure(&self, col: usize, x: f64) -> String {
        if self.ratio_columns.contains(&col) {
            fmt_ratio(Some(x))
        } else {
            self.fmt_time(x)
        }
    }

    fn head_suffix(&self) -> &'static str {
        match self.unit {
            Unit::Ms => " (ms)",
            Unit::Mops => " (M/s)",
            Unit::Mib => " (MiB)",
            Unit::Figure => "",
            Unit::Auto => "",
        }
    }

    /// Renders the table as Markdown.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "### {}\n", self.title);
        let mut head: Vec<String> = self.params.clone();
        for c in &self.columns {
            head.push(format!("{}{}", c, self.head_suffix()));
        }
        for (label, cols, _) in self.count_columns() {
            let names: Vec<&str> = cols.iter().map(|&i| self.columns[i].as_str()).collect();
            head.push(format!("{label} ({})", names.join(" / ")));
        }
        let _ = writeln!(s, "| {} |", head.join(" | "));
        let _ = writeln!(
            s,
            "|{}",
            head.iter()
                .enumerate()
                .map(|(i, _)| if i < self.params.len() {
                    "---|"
                } else {
                    "---:|"
                })
                .collect::<String>()
        );
        for (r, row) in self.rows.iter().enumerate() {
            let mut cells: Vec<String> = row.params.clone();
            for (c, cell) in row.cells.iter().enumerate() {
                cells.push(match cell {
                    None => "–".to_string(),
                    Some(st) if self.unit.is_figure() => self.fmt_figure(c, st.median),
                    Some(st) => {
                        let ratio = match self.ratio_text(r, c) {
                            Some(x) => match (&self.ratio, self.ratio_of(r, c)) {
                                (Ratio::SpeedUp, Some(v)) if v >= 1.0 => format!(" **{x}**"),
                                (Ratio::SpeedUp, Some(_)) => format!(" *{x}*"),
                                _ => format!(" {x}"),
                            },
                            None => String::new(),
                        };
                        let reference = match (&self.ratio, self.reference(r, c)) {
                            (Ratio::Slowdown(_), Some(q)) => format!(
                                "; quiet {} ({})",
                                self.fmt_time(q.median),
                                self.md_spread(q)
                            ),
                            _ => String::new(),
                        };
                        let cpu = match st.cpu {
                            Some(c) => format!("; cpu {}", fmt_cpu(c)),
                            None => String::new(),
                        };
                        format!(
                            "{}{ratio} <sub>{}{reference}{cpu}</sub>",
                            self.fmt_time(st.median),
                            self.md_spread(*st),
                        )
                    }
                });
            }
            for (_, cols, count) in self.count_columns() {
                let w: Vec<String> = cols
                    .iter()
                    .map(|&i| row.cells[i].map_or("–".into(), |st| count(st).to_string()))
                    .collect();
                cells.push(w.join(" / "));
            }
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
        if !self.notes.is_empty() {
            s.push('\n');
            for n in &self.notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        s
    }

    /// The trailing count columns that have competitors: heading, their columns, and
    /// the count each shows.
    #[allow(clippy::type_complexity)]
    pub(crate) fn count_columns(&self) -> Vec<(&str, &[usize], fn(Stats) -> u64)> {
        let waits: fn(Stats) -> u64 = |st| st.waits;
        let restarts: fn(Stats) -> u64 = |st| st.restarts;
        [
            (self.wait_label.as_str(), &self.wait_columns[..], waits),
            ("restarts", &self.restart_columns[..], restarts),
        ]
        .into_iter()
        .filter(|c| !c.1.is_empty())
        .collect()
    }
}

/// Thousands separators, as the peers print counts.
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Implements an allocator-api2 `Allocator` that forwards to mimalloc's
/// `GlobalAlloc` methods, so `Vec<u8, Mi>` measures mimalloc in this process
/// while the global allocator stays the system one.
macro_rules! mimalloc_handle {
    ($api:ident) => {
        unsafe impl $api::alloc::Allocator for Mi {
            #[inline]
            fn allocate(
                &self,
                layout: std::alloc::Layout,
            ) -> Result<std::ptr::NonNull<[u8]>, $api::alloc::AllocError> {
                if layout.size() == 0 {
                    // An address without provenance, aligned for `layout` (as
                    // `ptr::without_provenance_mut`, which is newer than the MSRV).
                    let dangling = std::ptr::null_mut::<u8>().wrapping_add(layout.align());
                    let dangling =
                        std::ptr::NonNull::new(dangling).ok_or($api::alloc::AllocError)?;
                    return Ok(std::ptr::NonNull::slice_from_raw_parts(dangling, 0));
                }
                // SAFETY: `layout` has a non-zero size, checked above.
                let p = unsafe { std::alloc::GlobalAlloc::alloc(&mimalloc::MiMalloc, layout) };
                std::ptr::NonNull::new(p)
                    .map(|p| std::ptr::NonNull::slice_from_raw_parts(p, layout.size()))
                    .ok_or($api::alloc::AllocError)
            }

            #[inline]
            unsafe fn deallocate(&self, ptr: std::ptr::NonNull<u8>, layout: std::alloc::Layout) {
                if layout.size() != 0 {
                    // SAFETY: the caller passes a block this allocator returned for
                    // `layout`, and non-zero sizes came from `MiMalloc::alloc`.
                    unsafe {
                        std::alloc::GlobalAlloc::dealloc(&mimalloc::MiMalloc, ptr.as_ptr(), layout)
                    };
                }
            }

            #[inline]
            unsafe fn grow(
                &self,
                ptr: std::ptr::NonNull<u8>,
                old: std::alloc::Layout,
                new: std::alloc::Layout,
            ) -> Result<std::ptr::NonNull<[u8]>, $api::alloc::AllocError> {
                if old.size() == 0 || old.align() != new.align() {
                    let fresh = self.allocate(new)?;
                    // SAFETY: `ptr` holds `old.size()` readable bytes (caller contract),
                    // `fresh` holds at least `new.size() >= old.size()` and is a new block.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            ptr.as_ptr(),
                            fresh.as_ptr().cast::<u8>(),
                            old.size(),
                        );
                        self.deallocate(ptr, old);
                    }
                    return Ok(fresh);
                }
                // SAFETY: `ptr` was allocated by mimalloc with `old` (non-zero size, same
                // alignment as `new`), and `new.size()` is non-zero (it is >= old.size()).
                let p = unsafe {
                    std::alloc::GlobalAlloc::realloc(
                        &mimalloc::MiMalloc,
                        ptr.as_ptr(),
                        old,
                        new.size(),
                    )
                };
                std::ptr::NonNull::new(p)
                    .map(|p| std::ptr::NonNull::slice_from_raw_parts(p, new.size()))
                    .ok_or($api::alloc::AllocError)
            }
        }
    };
}

/// mimalloc as an allocator-api2 allocator (both API generations the peers use).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mi;

mimalloc_handle!(allocator_api2_02);
mimalloc_handle!(allocator_api2_04);

/// Peak resident set size of this process so far, in MiB (Linux `VmHWM`).
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Runs row `row`, column `col` of scenario `scenario` once in a child process (this
/// executable with `--rss-child`) and returns the child's peak RSS in MiB. `col` =
/// `usize::MAX` runs nothing: the baseline of an idle child.
pub fn rss_child(cfg: &Config, scenario: &str, row: usize, col: usize) -> Option<f64> {
    child_output(cfg, scenario, row, col, &[])?
        .lines()
        .find_map(|l| l.strip_prefix("rss "))?
        .trim()
        .parse()
        .ok()
}

/// A peak-RSS table: each `(label, row)` of the scenario run once per column, each
/// in its own child process; the trailing column is an idle child.
pub fn rss_table(
    cfg: &Config,
    scenario: &str,
    title: &str,
    columns: &[String],
    rows: &[(String, usize)],
) -> Option<Table> {
    if !cfg.rss {
        return None;
    }
    let mut cols = columns.to_vec();
    cols.push("idle child".into());
    let mut t = Table::new(title, &["case"], &cols, Unit::Mib);
    let idle = rss_child(cfg, scenario, 0, usize::MAX);
    for (label, row) in rows {
        crate::progress::case(&format!("peak RSS: {label}"));
        let mut cells: Vec<Option<Stats>> = (0..columns.len())
            .map(|c| {
                crate::progress::within(c, columns.len());
                rss_child(cfg, scenario, *row, c).map(mib_stats)
            })
            .collect();
        cells.push(idle.map(mib_stats));
        t.rows.push(Row {
            params: vec![label.clone()],
            cells,
        });
    }
    t.notes = vec![
        "Peak resident set (`VmHWM`) of a child process (this binary, `--rss-child`) that runs the case once for one competitor, \
         in MiB, the process's own baseline included (see `idle child`: the same child running nothing). One run each; `–`: not applicable."
            .into(),
    ];
    Some(t)
}

/// Median, least and greatest of `xs` (`None` for none).
pub fn spread(xs: &[f64]) -> Option<Stats> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = match n {
        0 => return None,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    };
    Some(Stats {
        median,
        min: v[0],
        max: v[n - 1],
        waits: 0,
        restarts: 0,
        cpu: None,
    })
}

/// A one-run cell of MiB (an RSS figure): no spread, no waits.
pub fn mib_stats(m: f64) -> Stats {
    Stats {
        median: m,
        min: m,
        max: m,
        waits: 0,
        restarts: 0,
        cpu: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(median: f64) -> Option<Stats> {
        Some(Stats {
            median,
            min: median,
            max: median,
            waits: 0,
            restarts: 0,
            cpu: None,
        })
    }

    #[test]
    fn a_median_of_zero_prints_no_ratio() {
        let columns: Vec<String> = ["Vec (glibc)", "ringmem"].map(String::from).to_vec();
        let mut t = Table::new("t", &["Size"], &columns, Unit::Ms);
        t.rows.push(Row {
            params: vec!["64".into()],
            cells: vec![ms(2.0), ms(0.0)],
        });
        t.rows.push(Row {
            params: vec!["128".into()],
            cells: vec![ms(2.0), ms(1.0)],
        });
        assert_eq!(t.ratio_of(0, 1), None);
        assert_eq!(t.ratio_text(0, 1).as_deref(), Some("n/a"));
        assert_eq!(t.ratio_text(1, 1).as_deref(), Some("2.00×"));
        let md = t.render();
        assert!(
            md.contains("| 64 | 2000.0 **1.00×** <sub>2000.0–2000.0</sub> | 0.0 n/a <sub>"),
            "{md}"
        );
        assert!(!md.contains("inf"), "{md}");
        // Nothing to compare with: nothing printed beside the cell.
        t.rows[0].cells[0] = None;
        assert_eq!(t.ratio_text(0, 1), None);
    }
}
