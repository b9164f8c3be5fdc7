//! Tables as plain text for a terminal: aligned columns (laid out by `comfy-table`),
//! no line longer than [`WIDTH`] characters, no HTML or Markdown marks. The Markdown
//! report keeps the full layout; this is what `cargo run` prints while it runs.
//!
//! Headings and row labels wrap inside their column; a cell shows its median and
//! ratio, with the min–max of the repetitions on the line below it.

use std::fmt::Write as _;

use comfy_table::{
    Cell, CellAlignment, ColumnConstraint, ContentArrangement, TableComponent, Width,
};

use crate::harness::{fmt_cpu, Ratio, Stats, Table, Unit};

/// The longest line this module prints, in characters.
pub const WIDTH: usize = 100;

/// Text without Markdown's code and bold marks.
pub fn unmark(s: &str) -> String {
    s.replace("**", "").replace('`', "")
}

/// `s` wrapped at `width` characters, the first line starting with `first` and the
/// others with `rest` (counted in the width); a word longer than a line is cut.
pub fn wrap(s: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let options = textwrap::Options::new(width)
        .initial_indent(first)
        .subsequent_indent(rest);
    textwrap::wrap(s, options)
        .into_iter()
        .map(|l| l.trim_end().to_string())
        .collect()
}

/// A paragraph of the report (Markdown) as plain lines: headings lose their `#`s.
pub fn paragraph(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        let text = unmark(line.trim_start_matches('#').trim_start());
        for l in wrap(&text, WIDTH, "", "") {
            let _ = writeln!(out, "{l}");
        }
    }
    out
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
    fn plain_cell(&self, row: usize, col: usize, st: Stats) -> String {
        if self.unit.is_figure() {
            return self.fmt_figure(col, st.median);
        }
        let mut s = self.fmt_time(st.median);
        if let Some(x) = self.ratio_text(row, col) {
            let _ = write!(s, " {x}");
        }
        if st.min != st.max {
            // Rates print the slowest run's rate first, as times print the fastest.
            let (lo, hi) = match self.unit {
                Unit::Mops => (st.max, st.min),
                _ => (st.min, st.max),
            };
            let _ = write!(s, "\n{}", spread(&self.fmt_time(lo), &self.fmt_time(hi)));
        }
        if let (Ratio::Slowdown(_), Some(q)) = (&self.ratio, self.reference(row, col)) {
            let _ = write!(s, "\nquiet {}", self.fmt_time(q.median));
        }
        if let Some(c) = st.cpu {
            let _ = write!(s, "\ncpu {}", fmt_cpu(c));
        }
        s
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
        let rule = title.iter().map(|l| l.chars().count()).max().unwrap_or(0);
        let _ = writeln!(s, "{}\n{}", title.join("\n"), "=".repeat(rule));
        if !self.columns.is_empty() {
            let _ = writeln!(s, "{}\n", wrap(&self.legend(), WIDTH, "", "").join("\n"));
            let _ = writeln!(s, "{}", self.plain_body());
        }
        if !self.notes.is_empty() {
            s.push('\n');
            for n in &self.notes {
                let _ = writeln!(s, "{}", wrap(&unmark(n), WIDTH, "- ", "  ").join("\n"));
            }
        }
        s
    }

    /// The table's columns as printed: heading, cells, and whether they are data
    /// (right-aligned): the parameters, then the competitors, then the counts.
    fn plain_columns(&self) -> Vec<(String, Vec<String>, bool)> {
        let mut cols: Vec<(String, Vec<String>, bool)> = Vec::new();
        for (i, name) in self.params.iter().enumerate() {
            let cells = (self.rows.iter())
                .map(|r| unmark(r.params.get(i).map_or("", |p| p)))
                .collect();
            cols.push((unmark(name), cells, false));
        }
        for (k, name) in self.columns.iter().enumerate() {
            let cells = (self.rows.iter().enumerate())
                .map(|(r, row)| match row.cells.get(k).copied().flatten() {
                    Some(st) => self.plain_cell(r, k, st),
                    None => "–".into(),
                })
                .collect();
            cols.push((unmark(name), cells, true));
        }
        for (label, which, count) in self.count_columns() {
            let names: Vec<&str> = which.iter().map(|&i| self.columns[i].as_str()).collect();
            let cells = (self.rows.iter())
                .map(|row| {
                    let w: Vec<String> = (which.iter())
                        .map(|&i| row.cells[i].map_or("–".into(), |st| count(st).to_string()))
                        .collect();
                    w.join(" / ")
                })
                .collect();
            cols.push((
                unmark(&format!("{label} ({})", names.join(" / "))),
                cells,
                true,
            ));
        }
        cols
    }

    /// The columns laid out by comfy-table, stacked in as many tables as it takes to
    /// keep every cell's lines whole within [`WIDTH`], each with the parameter columns:
    /// the fewest tables, with the widest parameter columns (16 to 26) that need no more.
    fn plain_body(&self) -> String {
        let cols = self.plain_columns();
        let params = self.params.len();
        let longest = |lines: &mut dyn Iterator<Item = &str>| {
            lines.map(|l| l.chars().count()).max().unwrap_or(0)
        };
        // A column's width: its longest cell line and heading word; a parameter's at
        // most `cap`, a competitor's what its heading needs to fit in three lines (up
        // to 20). One space of padding and one of rule between columns.
        let layout = |cap: usize| {
            let widths: Vec<usize> = (cols.iter())
                .map(|(head, cells, data)| {
                    let content = longest(&mut cells.iter().flat_map(|c| c.lines()));
                    let mut w = content.max(longest(&mut head.split_whitespace()));
                    if !data {
                        return w.min(cap);
                    }
                    while w < 20 && textwrap::wrap(head, w).len() > 3 {
                        w += 1;
                    }
                    w
                })
                .collect();
            let fixed: usize = widths[..params].iter().map(|w| w + 2).sum();
            let mut groups: Vec<Vec<usize>> = vec![Vec::new()];
            let mut used = fixed;
            for (i, w) in widths.iter().enumerate().skip(params) {
                // The rule under the last heading runs one past its column.
                if used + w >= WIDTH && !groups[groups.len() - 1].is_empty() {
                    groups.push(Vec::new());
                    used = fixed;
                }
                let last = groups.len() - 1;
                groups[last].push(i);
                used += w + 2;
            }
            (widths, groups)
        };
        let (widths, groups) = (16..=26)
            .rev()
            .map(layout)
            .min_by_key(|(_, groups)| groups.len())
            .expect("a non-empty range of widths");
        // Headings sit on the rule (padded above to the part's tallest); rows whose labels
        // wrap to more lines than their figures have a blank line between them.
        let lines = |text: &str, i: usize| textwrap::wrap(text, widths[i]).len();
        let spaced = (0..self.rows.len()).any(|r| {
            let figures = (params..cols.len()).map(|i| cols[i].1[r].lines().count());
            (0..params).any(|i| lines(&cols[i].1[r], i) > figures.clone().max().unwrap_or(1))
        });
        let parts = groups.iter().map(|group| {
            let part: Vec<usize> = (0..params).chain(group.iter().copied()).collect();
            let head_height = part
                .iter()
                .map(|&i| lines(&cols[i].0, i))
                .max()
                .unwrap_or(1);
            let cell = |text: &str, data: bool| {
                let align = if data {
                    CellAlignment::Right
                } else {
                    CellAlignment::Left
                };
                Cell::new(text).set_alignment(align)
            };
            let head = |i: usize| {
                let pad = "\n".repeat(head_height - lines(&cols[i].0, i));
                cell(&format!("{pad}{}", cols[i].0), cols[i].2)
            };
            let mut t = comfy_table::Table::new();
            t.load_preset(comfy_table::presets::NOTHING)
                .set_style(TableComponent::VerticalLines, ' ')
                .set_style(TableComponent::HeaderLines, '-')
                .set_style(TableComponent::MiddleHeaderIntersections, ' ')
                .set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(u16::MAX)
                .set_header(part.iter().map(|&i| head(i)).collect::<Vec<_>>())
                .set_constraints(
                    part.iter()
                        .map(|&i| ColumnConstraint::Absolute(Width::Fixed(widths[i] as u16 + 1))),
                );
            if spaced {
                t.set_style(TableComponent::HorizontalLines, ' ')
                    .set_style(TableComponent::MiddleIntersections, ' ');
            }
            for r in 0..self.rows.len() {
                t.add_row(
                    part.iter()
                        .map(|&i| cell(&cols[i].1[r], cols[i].2))
                        .collect::<Vec<_>>(),
                );
            }
            for c in t.column_iter_mut() {
                c.set_padding((0, 1));
            }
            let lines: Vec<String> = t.lines().map(|l| l.trim_end().to_string()).collect();
            lines.join("\n")
        });
        parts.collect::<Vec<_>>().join("\n\n")
    }
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
            let n = l.chars().count();
            assert!(n <= WIDTH, "{n} characters: {l}\n{text}");
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
    }
}
