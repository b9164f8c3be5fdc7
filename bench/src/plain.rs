//! Tables as plain text for a terminal: aligned columns, no line longer than
//! [`WIDTH`], no HTML or Markdown marks. The Markdown report keeps the full layout;
//! this is what `cargo run` prints while it runs.
//!
//! A table whose columns do not fit side by side is printed as several stacked
//! tables, each with the parameter columns again. Long headings and row labels wrap
//! inside their column; a cell shows its median and speed-up, with the min–max of the
//! repetitions on the line below it.

use std::fmt::Write as _;

use crate::harness::{fmt_cpu, Ratio, Stats, Table, Unit};

/// The longest line this module prints.
pub const WIDTH: usize = 100;

/// The widest a parameter column gets before its values wrap.
const PARAM_WIDTH: usize = 26;

/// The narrowest a parameter column gets to save a stacked table.
const MIN_PARAM_WIDTH: usize = 16;

/// The widest a competitor column gets to keep its heading within [`HEAD_LINES`].
const COLUMN_WIDTH: usize = 20;

/// Heading lines a column aims for; up to [`MAX_HEAD_LINES`] to save a stacked table.
const HEAD_LINES: usize = 3;

/// See [`HEAD_LINES`].
const MAX_HEAD_LINES: usize = 5;

/// Space between two columns.
const GAP: &str = "  ";

/// Text without Markdown's code and bold marks.
pub fn unmark(s: &str) -> String {
    s.replace("**", "").replace('`', "")
}

/// `s` wrapped at `width` on spaces (a longer word is cut), the first line starting
/// with `first` and the others with `rest` (counted in the width). Widths count bytes,
/// which are never fewer than characters: a line fits however its reader counts.
pub fn wrap(s: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in s.split_whitespace() {
        let mut word = word;
        loop {
            let sep = usize::from(!empty);
            if line.len() + sep + word.len() <= width {
                if !empty {
                    line.push(' ');
                }
                line.push_str(word);
                empty = false;
                break;
            }
            if empty {
                // A word longer than a whole line: cut it (one character at least).
                let room = width.saturating_sub(line.len());
                let cut = word
                    .char_indices()
                    .map(|(i, c)| i + c.len_utf8())
                    .take_while(|&end| end <= room)
                    .last()
                    .unwrap_or_else(|| word.chars().next().map_or(0, char::len_utf8));
                line.push_str(&word[..cut]);
                word = &word[cut..];
                if word.is_empty() {
                    empty = false;
                    break;
                }
            }
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            empty = true;
        }
    }
    if !empty || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// A heading wrapped at `width` bytes: on spaces, and after the `::` of a path
/// (`ring_alloc::` over `OneRingAlloc`). A piece longer than the width is not cut: the
/// column is at least that wide.
fn wrap_head(head: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in head.split_whitespace() {
        for (i, piece) in word.split_inclusive("::").enumerate() {
            let glue = if i == 0 { " " } else { "" };
            match lines.last_mut() {
                Some(l) if l.len() + glue.len() + piece.len() <= width => {
                    l.push_str(glue);
                    l.push_str(piece);
                }
                _ => lines.push(piece.to_string()),
            }
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// A paragraph of the report (Markdown) as plain lines: headings lose their `#`s.
pub fn paragraph(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        let text = unmark(line.trim_start_matches('#').trim_start());
        for l in wrap(&text, WIDTH, "", "") {
            let _ = writeln!(out, "{}", l.trim_end());
        }
    }
    out
}

/// One column as printed: heading, alignment, and per row its lines.
struct Column {
    head: String,
    right: bool,
    cells: Vec<Vec<String>>,
    /// In characters, as the terminal shows them.
    width: usize,
    /// The most bytes a line of the column has beyond its characters (`×`, `–`, `µ`).
    extra: usize,
}

impl Column {
    fn new(head: &str, right: bool, cells: Vec<Vec<String>>) -> Self {
        let longest = |s: &str| {
            s.split_whitespace()
                .flat_map(|w| w.split_inclusive("::"))
                .map(str::len)
                .max()
                .unwrap_or(0)
        };
        let content = cells.iter().flatten().map(|l| len(l)).max().unwrap_or(0);
        let extra = cells
            .iter()
            .flatten()
            .map(|l| l.len() - len(l))
            .max()
            .unwrap_or(0)
            .max(head.len() - len(head));
        Column {
            head: head.to_string(),
            right,
            cells,
            width: content.max(longest(head)),
            extra,
        }
    }

    /// Widens a column (up to `max`) until its heading fits in `lines` lines.
    fn fit_head(&mut self, max: usize, lines: usize) {
        while self.width < max && self.head_lines().len() > lines {
            self.width += 1;
        }
    }

    fn head_lines(&self) -> Vec<String> {
        wrap_head(&self.head, self.width)
    }

    /// The bytes the column takes in a line, with the gap after it.
    fn room(&self) -> usize {
        self.width + self.extra + GAP.len()
    }

    fn pad(&self, s: &str) -> String {
        let fill = " ".repeat(self.width.saturating_sub(len(s)));
        if self.right {
            format!("{fill}{s}")
        } else {
            format!("{s}{fill}")
        }
    }
}

/// Greedy groups of `data` columns (indices) that fit beside `params` in [`WIDTH`].
fn stack(params: &[Column], data: &[Column]) -> Vec<Vec<usize>> {
    let fixed: usize = params.iter().map(Column::room).sum();
    let mut groups: Vec<Vec<usize>> = vec![Vec::new()];
    let mut used = fixed;
    for (i, c) in data.iter().enumerate() {
        // The last gap is trimmed from the line.
        if used + c.room() - GAP.len() > WIDTH && !groups[groups.len() - 1].is_empty() {
            groups.push(Vec::new());
            used = fixed;
        }
        let last = groups.len() - 1;
        groups[last].push(i);
        used += c.room();
    }
    groups
}

fn len(s: &str) -> usize {
    s.chars().count()
}

/// `min–max`, with one unit when both ends have the same (`1.20–1.31 ms`).
fn spread(lo: &str, hi: &str) -> String {
    match (lo.rsplit_once(' '), hi.rsplit_once(' ')) {
        (Some((a, ua)), Some((b, ub))) if ua == ub => format!("{a}–{b} {ub}"),
        _ => format!("{lo}–{hi}"),
    }
}

impl Table {
    /// Cell (`row`, `col`) as lines: median with its ratio (see [`Ratio`]), then the
    /// min–max of the repetitions when they differ, then, for a slowdown, the median
    /// it is relative to.
    fn plain_cell(&self, row: usize, col: usize, st: Stats) -> Vec<String> {
        if self.unit.is_figure() {
            return vec![self.fmt_figure(col, st.median)];
        }
        let mut first = self.fmt_time(st.median);
        if let Some(x) = self.ratio_text(row, col) {
            let _ = write!(first, " {x}");
        }
        let mut lines = vec![first];
        if st.min != st.max {
            // Rates print the slowest run's rate first, as times print the fastest.
            let (lo, hi) = match self.unit {
                Unit::Mops => (st.max, st.min),
                _ => (st.min, st.max),
            };
            lines.push(spread(&self.fmt_time(lo), &self.fmt_time(hi)));
        }
        if let (Ratio::Slowdown(_), Some(q)) = (&self.ratio, self.reference(row, col)) {
            lines.push(format!("quiet {}", self.fmt_time(q.median)));
        }
        if let Some(c) = st.cpu {
            lines.push(format!("cpu {}", fmt_cpu(c)));
        }
        lines
    }

    /// What the numbers are, in one line under the title.
    fn legend(&self) -> String {
        let base = self.columns.get(self.baseline).map_or("", |c| c.as_str());
        let what = match self.unit {
            Unit::Mib => return "MiB; – not measured.".into(),
            Unit::Figure => return "Figures in the units their rows name; – not measured.".into(),
            Unit::Ms => "Time per run in ms",
            Unit::Auto => "Time",
            Unit::Mops => "Millions per second (higher is better)",
        };
        match self.ratio {
            Ratio::SpeedUp => format!("{what}: median and speed-up against {base}; min–max below."),
            Ratio::Slowdown(_) => format!(
                "{what} under load: median and slowdown against the quiet run (busy / quiet); \
                 min–max, then the quiet median, below."
            ),
        }
    }

    /// The table as aligned plain text, no line longer than [`WIDTH`].
    pub fn render_plain(&self) -> String {
        let mut s = String::new();
        let title = wrap(&unmark(&self.title), WIDTH, "", "");
        let rule = title.iter().map(|l| len(l)).max().unwrap_or(0);
        for l in &title {
            let _ = writeln!(s, "{l}");
        }
        let _ = writeln!(s, "{}", "=".repeat(rule));
        if !self.columns.is_empty() {
            for l in wrap(&self.legend(), WIDTH, "", "") {
                let _ = writeln!(s, "{l}");
            }
            s.push('\n');
            self.plain_body(&mut s);
        }
        if !self.notes.is_empty() {
            s.push('\n');
            for n in &self.notes {
                for l in wrap(&unmark(n), WIDTH, "- ", "  ") {
                    let _ = writeln!(s, "{}", l.trim_end());
                }
            }
        }
        s
    }

    /// The parameter columns, their values wrapped at `cap`.
    fn param_columns(&self, cap: usize) -> Vec<Column> {
        self.params
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let cells = self
                    .rows
                    .iter()
                    .map(|r| {
                        let v = unmark(r.params.get(i).map_or("", |p| p.as_str()));
                        wrap(&v, cap, "", "")
                    })
                    .collect();
                let mut c = Column::new(&unmark(name), false, cells);
                c.width = c.width.min(cap);
                c.fit_head(cap, HEAD_LINES);
                c
            })
            .collect()
    }

    /// The competitor columns, then the count columns, their headings in about
    /// `head_lines` lines.
    fn data_columns(&self, head_lines: usize) -> Vec<Column> {
        let mut data: Vec<Column> = self
            .columns
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let cells = self
                    .rows
                    .iter()
                    .enumerate()
                    .map(|(r, row)| match row.cells.get(k).copied().flatten() {
                        Some(st) => self.plain_cell(r, k, st),
                        None => vec!["–".into()],
                    })
                    .collect();
                Column::new(&unmark(name), true, cells)
            })
            .collect();
        for (label, cols, count) in self.count_columns() {
            let names: Vec<&str> = cols.iter().map(|&i| self.columns[i].as_str()).collect();
            let cells = self
                .rows
                .iter()
                .map(|r| {
                    let w: Vec<String> = cols
                        .iter()
                        .map(|&i| r.cells[i].map_or("–".into(), |st| count(st).to_string()))
                        .collect();
                    vec![w.join(" / ")]
                })
                .collect();
            let head = format!("{label} ({})", names.join(" / "));
            data.push(Column::new(&unmark(&head), true, cells));
        }
        for c in &mut data {
            c.fit_head(COLUMN_WIDTH, head_lines);
        }
        data
    }

    /// The columns, stacked in as many tables as it takes to keep within [`WIDTH`]:
    /// the fewest, with the shortest headings and then the widest parameter columns
    /// that need no more.
    fn plain_body(&self, s: &mut String) {
        let (params, data, groups) = (HEAD_LINES..=MAX_HEAD_LINES)
            .flat_map(|lines| {
                (MIN_PARAM_WIDTH..=PARAM_WIDTH).rev().map(move |cap| {
                    let (params, data) = (self.param_columns(cap), self.data_columns(lines));
                    let groups = stack(&params, &data);
                    (params, data, groups)
                })
            })
            .min_by_key(|(_, _, groups)| groups.len())
            .expect("a non-empty range of widths");
        // Lines of row `r` in `cols`.
        let height =
            |cols: &[&Column], r: usize| cols.iter().map(|c| c.cells[r].len()).max().unwrap_or(1);
        // Labels that wrap to more lines than their cells: a blank line between rows.
        let all: Vec<&Column> = data.iter().collect();
        let spaced =
            (0..self.rows.len()).any(|r| params.iter().any(|p| p.cells[r].len() > height(&all, r)));
        for (g, group) in groups.iter().enumerate() {
            if g > 0 {
                s.push('\n');
            }
            let cols: Vec<&Column> = params
                .iter()
                .chain(group.iter().map(|&i| &data[i]))
                .collect();
            let heads: Vec<Vec<String>> = cols.iter().map(|c| c.head_lines()).collect();
            let head_height = heads.iter().map(Vec::len).max().unwrap_or(1);
            // Headings sit on the rule, their first lines padded above.
            for line in 0..head_height {
                let cells = cols.iter().zip(&heads).map(|(c, h)| {
                    let k = (line + h.len()).checked_sub(head_height);
                    c.pad(k.map_or("", |k| h[k].as_str()))
                });
                push_line(s, cells);
            }
            push_line(s, cols.iter().map(|c| "-".repeat(c.width)));
            for r in 0..self.rows.len() {
                if spaced && r > 0 {
                    s.push('\n');
                }
                for line in 0..height(&cols, r) {
                    let cells = cols
                        .iter()
                        .map(|c| c.pad(c.cells[r].get(line).map_or("", |l| l.as_str())));
                    push_line(s, cells);
                }
            }
        }
    }
}

fn push_line(s: &mut String, cells: impl Iterator<Item = String>) {
    let line = cells.collect::<Vec<_>>().join(GAP);
    let _ = writeln!(s, "{}", line.trim_end());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Row;

    fn st(median: f64, min: f64, max: f64) -> Option<Stats> {
        Some(Stats {
            median,
            min,
            max,
            waits: 3,
            restarts: 1,
            cpu: None,
        })
    }

    /// Whether `l` holds an HTML tag such as `<sub>` or `</sub>` (`Vec<u8>` is none).
    fn has_tag(l: &str) -> bool {
        l.split('<').skip(1).any(|after| {
            let name = after.strip_prefix('/').unwrap_or(after);
            let letters = name.chars().take_while(char::is_ascii_lowercase).count();
            letters > 0 && name[letters..].starts_with('>')
        })
    }

    fn check(text: &str) {
        for l in text.lines() {
            // Bytes: never fewer than characters, and what `awk length` counts in C.
            assert!(l.len() <= WIDTH, "{} bytes: {l}\n{text}", l.len());
            assert!(!has_tag(l), "HTML in: {l}");
            assert!(!l.contains('`') && !l.contains("**"), "Markdown in: {l}");
        }
    }

    /// The widest table the bench makes: ringal's, with every column, three
    /// parameters and both count columns, and a long note.
    fn ringal_like() -> Table {
        let columns = crate::ringal_fixed::columns();
        let mut t = Table::new(
            "ringal: extendable buffers, full-size write_all, restart on failure (iterations × 1/20 / 4)",
            &["Iterations", "Buffer Size", "Max Buffers"],
            &columns,
            Unit::Ms,
        )
        .baseline("Vec (glibc)");
        t.wait_columns = vec![0, 1];
        t.restart_columns = vec![0, 1, 2];
        for (i, size) in [64, 1024, 65_536].into_iter().enumerate() {
            t.rows.push(Row {
                params: vec![
                    "5,000,000".into(),
                    crate::harness::thousands(size),
                    "64".into(),
                ],
                cells: (0..columns.len())
                    .map(|c| {
                        let m = 1000.0 / (c + i + 1) as f64 * 1e-3;
                        (c != 5).then(|| st(m, m * 0.9, m * 1.3)).flatten()
                    })
                    .collect(),
            });
        }
        t.notes = vec!["`Vec (mimalloc)` is allocator-api2's `Vec<u8, Mi>` whose allocator calls `mimalloc::MiMalloc`'s `GlobalAlloc` methods directly, in this process; **bold** words.".repeat(3)];
        t
    }

    /// buffer_sv2's: long row labels, long column names, a long count heading.
    fn sv2_like() -> Table {
        let columns = crate::buffer_sv2::columns();
        let mut t = Table::new(
            "buffer_sv2: 1,000 × 2 messages of 4–16 KiB written 10 bytes at a time",
            &["loop"],
            &columns,
            Unit::Auto,
        )
        .baseline("buffer_sv2 BufferFromSystemMemory");
        t.wait_columns = vec![1];
        t.wait_label = "heap fallbacks of 2,000".into();
        for label in [
            "single thread (\"with pool\" / \"without pool\")",
            "published \"without pool threaded 1\" (writes to a pool, empty slices)",
        ] {
            t.rows.push(Row {
                params: vec![label.into()],
                cells: (0..columns.len())
                    .map(|c| st(1e-3 * (c + 1) as f64, 0.9e-3, 2e-2))
                    .collect(),
            });
        }
        t
    }

    /// ring-alloc's: the most competitor columns, times in ns with unit per cell.
    fn ring_alloc_like() -> Table {
        let columns = crate::ring_alloc::columns();
        let mut t = Table::new(
            "ring-alloc: warm-up, allocation, vec (time per iteration)",
            &["benchmark"],
            &columns,
            Unit::Auto,
        )
        .baseline("Global (glibc)");
        for (i, label) in [
            "`alloc 4 bytes x 65535`",
            "`vec push and reserve_exact(1) x 17453`",
        ]
        .into_iter()
        .enumerate()
        {
            t.rows.push(Row {
                params: vec![label.into()],
                cells: (0..columns.len())
                    .map(|c| {
                        let m = [999e-9, 123.45e-6, 12.5e-3][(c + i) % 3];
                        st(m, m * 0.95, m * 1.2)
                    })
                    .collect(),
            });
        }
        t
    }

    /// many-threads': rates, two parameters, a count column.
    fn many_threads_like() -> Table {
        let columns: Vec<String> = [
            "ringal",
            "ringmem",
            "Vec (glibc)",
            "Vec (mimalloc)",
            "Vec (mimalloc global)",
            "control",
        ]
        .map(String::from)
        .to_vec();
        let mut t = Table::new(
            "many threads",
            &["producers", "threads"],
            &columns,
            Unit::Mops,
        )
        .baseline("Vec (glibc)");
        t.wait_columns = vec![0, 1];
        t.rows.push(Row {
            params: vec!["2".into(), "4".into()],
            cells: (0..columns.len())
                .map(|c| st(1e-7 * (c + 1) as f64, 0.9e-7, 1e-6))
                .collect(),
        });
        t
    }

    #[test]
    fn the_widest_tables_fit_in_a_hundred_columns_without_html() {
        let mut cols = crate::ring_alloc::columns();
        cols.push("idle child".into());
        let mut mib = Table::new(
            "ring-alloc: peak RSS per competitor",
            &["case"],
            &cols,
            Unit::Mib,
        );
        mib.rows.push(Row {
            params: vec!["`free 4 bytes x 65535 in order (ringmem's own)`".into()],
            cells: (0..cols.len())
                .map(|c| Some(crate::harness::mib_stats(c as f64 * 10.5)))
                .collect(),
        });
        for t in [
            ringal_like(),
            sv2_like(),
            ring_alloc_like(),
            many_threads_like(),
            mib,
        ] {
            let text = t.render_plain();
            check(&text);
            // Every competitor is named somewhere in the stacked tables.
            for c in &t.columns {
                let words = c.split_whitespace().flat_map(|w| w.split("::"));
                let last = words.last().unwrap();
                assert!(text.contains(last), "{c} missing:\n{text}");
            }
        }
        let text = ringal_like().render_plain();
        assert!(text.contains("900.0–1300.0"), "{text}");
        assert!(text.contains("bold words"), "{text}");
        let text = ring_alloc_like().render_plain();
        assert!(text.contains("949.05 ns–1.20 µs"), "{text}");
        assert!(text.contains("117.28–148.14 µs"), "{text}");
        // Rates: the slowest run's rate first.
        let text = many_threads_like().render_plain();
        assert!(text.contains("1.00–11.11"), "{text}");
    }

    #[test]
    fn a_table_under_load_shows_slowdowns_and_the_quiet_medians() {
        let mut t = ringal_like();
        let half = |st: Stats| Stats {
            median: st.median / 2.0,
            min: st.min / 2.0,
            max: st.max / 2.0,
            ..st
        };
        let quiet = t
            .rows
            .iter()
            .map(|r| r.cells.iter().map(|c| c.map(half)).collect())
            .collect();
        t.ratio = Ratio::Slowdown(quiet);
        let text = t.render_plain();
        check(&text);
        assert!(text.contains("1000.0 2.00×"), "{text}");
        assert!(text.contains("quiet 500.0"), "{text}");
        assert!(text.contains("slowdown against the quiet run"), "{text}");
        let md = t.render();
        assert!(
            md.contains("1000.0 2.00× <sub>900.0–1300.0; quiet 500.0 (450.0–650.0)</sub>"),
            "{md}"
        );
    }

    #[test]
    fn a_wide_table_is_stacked_with_its_parameters_in_each_part() {
        let text = ringal_like().render_plain();
        let rules = text.lines().filter(|l| l.starts_with("----------")).count();
        assert!(rules >= 2, "{text}");
        assert_eq!(text.matches("5,000,000").count(), 3 * rules, "{text}");
    }

    #[test]
    fn a_table_without_columns_prints_its_notes() {
        let mut t = Table::new("framed reading", &["frames"], &[], Unit::Mib);
        t.notes = vec!["Not measured: no child.".into()];
        let text = t.render_plain();
        check(&text);
        assert!(text.contains("- Not measured: no child."), "{text}");
    }

    #[test]
    fn a_cell_with_no_ratio_says_n_a() {
        let columns: Vec<String> = ["Vec (glibc)", "ringmem"].map(String::from).to_vec();
        let mut t = Table::new("t", &["Size"], &columns, Unit::Ms);
        t.rows.push(Row {
            params: vec!["64".into()],
            cells: vec![st(2e-3, 2e-3, 2e-3), st(0.0, 0.0, 0.0)],
        });
        let text = t.render_plain();
        check(&text);
        assert!(text.contains("0.0 n/a"), "{text}");
        assert!(!text.contains("inf"), "{text}");
    }

    #[test]
    fn the_markdown_has_the_tags_the_plain_text_lacks() {
        assert!(sv2_like().render().lines().any(has_tag));
        assert!(!has_tag("Vec<u8, Mi> and Box<T>"));
    }

    #[test]
    fn wrap_cuts_words_longer_than_a_line() {
        assert_eq!(wrap("ab cdefgh i", 4, "", ""), ["ab", "cdef", "gh i"]);
        assert_eq!(
            wrap("one two three", 9, "- ", "  "),
            ["- one two", "  three"]
        );
        assert_eq!(wrap("", 9, "", ""), [""]);
        assert_eq!(
            wrap_head("ring_alloc::OneRingAlloc x", 14),
            ["ring_alloc::", "OneRingAlloc x"]
        );
        assert_eq!(wrap_head("Vec (glibc)", 11), ["Vec (glibc)"]);
    }
}
