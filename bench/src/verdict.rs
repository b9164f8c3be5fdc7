//! Who won a timed table, in one sentence for the terminal, from the table's own
//! medians and spreads: ringmem's best column against the best peer in each row,
//! counted as wins, ties (their min–max ranges overlap) and losses, with the ratios;
//! then ringmem's built-in waits against its hand-rolled retry. A table under load
//! says instead how much each column slowed down against its quiet run, where
//! ringmem slowed down more than ringal, `Vec (glibc)` or the bounded control, and
//! whether it stayed ahead of ringal.

use crate::harness::{Ratio, Stats, Table};
use crate::plain::{wrap, WIDTH};
use crate::ratio::{fmt_ratio, ratio};

/// What happened in one row between two sides.
enum Outcome {
    /// The first side was faster, its range clear of the other's: by this ratio
    /// (`None` where the medians make none), against this column.
    Won(Option<f64>, usize),
    /// The ranges overlap.
    Tied,
    /// The other side was faster, clear of the first: by this ratio, this column.
    Lost(Option<f64>, usize),
}

/// The subject of a table for its verdict: the scenario id, and when the scenario has
/// several timed tables the subject of the title (after `: `, before ` (` or ` —`).
pub fn subject(id: &str, table: &Table, several: bool) -> String {
    if !several {
        return id.to_string();
    }
    let subject = table
        .title
        .split_once(": ")
        .map_or(&table.title[..], |t| t.1);
    let end = [" (", " —"].iter().filter_map(|p| subject.find(p)).min();
    format!("{id}, {}", &subject[..end.unwrap_or(subject.len())])
}

/// The best (lowest median time per operation) of `cols` in a row.
fn best(cells: &[Option<Stats>], cols: &[usize]) -> Option<(usize, Stats)> {
    cols.iter()
        .filter_map(|&c| cells.get(c).copied().flatten().map(|st| (c, st)))
        .min_by(|a, b| a.1.median.total_cmp(&b.1.median))
}

/// `a` against `b`: times per operation in every unit (`Mops` prints their inverse).
fn compare(a: Stats, b: (usize, Stats)) -> Outcome {
    let (col, b) = b;
    if a.min <= b.max && b.min <= a.max {
        Outcome::Tied
    } else if a.median < b.median {
        Outcome::Won(ratio(b.median, a.median), col)
    } else {
        Outcome::Lost(ratio(a.median, b.median), col)
    }
}

/// `1.23×` or `1.10–2.05×`; `n/a` if a row has no ratio (a range that leaves a row
/// out would claim more than was measured).
fn ratios(r: &[Option<f64>]) -> String {
    let Some(r) = r.iter().copied().collect::<Option<Vec<f64>>>() else {
        return fmt_ratio(None);
    };
    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = r.iter().copied().fold(0.0, f64::max);
    if format!("{lo:.2}") == format!("{hi:.2}") {
        fmt_ratio(Some(lo))
    } else {
        format!("{lo:.2}–{hi:.2}×")
    }
}

/// The names of `cols`, most frequent first, at most two and then `…`.
fn names(table: &Table, cols: &[usize]) -> String {
    let mut counts: Vec<(usize, usize)> = Vec::new();
    for &c in cols {
        match counts.iter_mut().find(|e| e.0 == c) {
            Some(e) => e.1 += 1,
            None => counts.push((c, 1)),
        }
    }
    counts.sort_by_key(|e| std::cmp::Reverse(e.1));
    let mut s: Vec<&str> = counts
        .iter()
        .take(2)
        .map(|e| table.columns[e.0].as_str())
        .collect();
    if counts.len() > 2 {
        s.push("…");
    }
    s.join(", ")
}

/// The verdict on a timed table, wrapped at [`WIDTH`] (continuation lines indented):
/// e.g. `ringal-fixed: ringmem fastest in 4 of 5 rows (1.20–2.10× ringal); tied in 1`.
/// Rows count where ringmem and a peer both ran; the `control` columns (floors that
/// allocate nothing) compete with no one. A table without ringmem columns says which
/// competitor was fastest how often. A table with ringmem's waiting columns adds how
/// they fared against the hand-rolled retry ([`waits_against_retry`]); a table under
/// load is judged by [`under_load`] instead. `None` for a peak-RSS table or one with
/// no row of two timed competitors.
pub fn verdict(label: &str, table: &Table) -> Option<String> {
    if table.unit.is_figure() {
        return None;
    }
    let competing: Vec<usize> = (0..table.columns.len())
        .filter(|&c| !table.columns[c].ends_with("control"))
        .collect();
    let (ours, peers): (Vec<usize>, Vec<usize>) = competing
        .iter()
        .partition(|&&c| table.columns[c].contains("ringmem"));
    let mut sentence = match &table.ratio {
        Ratio::Slowdown(quiet) => under_load(table, quiet)?,
        Ratio::SpeedUp if ours.is_empty() || peers.is_empty() => fastest(table, &competing)?,
        Ratio::SpeedUp => ringmem_against_peers(table, &ours, &peers)?,
    };
    if let Some(w) = waits_against_retry(table) {
        sentence.push_str(if sentence.ends_with('.') { " " } else { ". " });
        sentence.push_str(&w);
    }
    Some(wrap(&format!("{label}: {sentence}"), WIDTH, "", "  ").join("\n"))
}

/// ringmem's best column against the best peer, row by row.
fn ringmem_against_peers(table: &Table, ours: &[usize], peers: &[usize]) -> Option<String> {
    let (mut won, mut won_by, mut lost, mut lost_to) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut rows, mut tied) = (0, 0);
    for row in &table.rows {
        let (Some((_, us)), Some(them)) = (best(&row.cells, ours), best(&row.cells, peers)) else {
            continue;
        };
        rows += 1;
        match compare(us, them) {
            Outcome::Won(r, c) => {
                won.push(r);
                won_by.push(c);
            }
            Outcome::Tied => tied += 1,
            Outcome::Lost(r, c) => {
                lost.push(r);
                lost_to.push(c);
            }
        }
    }
    if rows == 0 {
        return None;
    }
    let who = if ours.len() == 1 {
        table.columns[ours[0]].clone()
    } else {
        format!("ringmem (best of {})", ours.len())
    };
    // The first count that is not zero says of how many rows.
    let mut parts: Vec<String> = Vec::new();
    if !won.is_empty() {
        parts.push(format!(
            "fastest in {} ({} {})",
            won.len(),
            ratios(&won),
            names(table, &won_by)
        ));
    }
    if tied > 0 {
        let with = if parts.is_empty() {
            " with the best peer"
        } else {
            ""
        };
        parts.push(format!("tied{with} within the spread in {tied}"));
    }
    if !lost.is_empty() {
        parts.push(format!(
            "behind in {} ({} {} faster)",
            lost.len(),
            names(table, &lost_to),
            ratios(&lost)
        ));
    }
    let first = parts[0].find(" (").unwrap_or(parts[0].len());
    parts[0].insert_str(first, &format!(" of {rows} rows"));
    let s = format!("{who} {}", parts.join("; "));
    Some(s)
}

/// Without ringmem columns: who was fastest how often, and the rows too close to call.
fn fastest(table: &Table, competing: &[usize]) -> Option<String> {
    let mut wins: Vec<usize> = Vec::new();
    let (mut rows, mut tied) = (0, 0);
    for row in &table.rows {
        let Some((c, first)) = best(&row.cells, competing) else {
            continue;
        };
        let others: Vec<usize> = competing.iter().copied().filter(|&o| o != c).collect();
        let Some(second) = best(&row.cells, &others) else {
            continue;
        };
        rows += 1;
        match compare(first, second) {
            Outcome::Tied => tied += 1,
            _ => wins.push(c),
        }
    }
    if rows == 0 {
        return None;
    }
    let mut counts: Vec<(usize, usize)> = Vec::new();
    for &c in &wins {
        match counts.iter_mut().find(|e| e.0 == c) {
            Some(e) => e.1 += 1,
            None => counts.push((c, 1)),
        }
    }
    counts.sort_by_key(|e| std::cmp::Reverse(e.1));
    let mut parts: Vec<String> = counts
        .iter()
        .map(|&(c, n)| format!("{} fastest in {n}", table.columns[c]))
        .collect();
    if tied > 0 {
        parts.push(format!("too close to call in {tied}"));
    }
    Some(format!("of {rows} rows, {}", parts.join("; ")))
}

/// The rows of a table, for a verdict: the fewest parameters that still tell them apart
/// (dropped from the last: ringal's iterations follow from its buffer size), as the
/// names of those parameters and each row's values, e.g. `Buffer Size × Max Buffers`
/// and `64 × 64`; or no name when the table's one parameter has words for values.
struct RowNames {
    /// The parameters kept, joined by ` × `; empty for words.
    heading: String,
    /// Each row's values of those parameters, in the same order.
    values: Vec<String>,
}

impl RowNames {
    fn of(table: &Table) -> RowNames {
        let value = |r: usize, k: usize| table.rows[r].params.get(k).map_or("", |p| p.as_str());
        let mut keep: Vec<usize> = (0..table.params.len()).collect();
        for drop in (0..table.params.len()).rev() {
            let trial: Vec<usize> = keep.iter().copied().filter(|&k| k != drop).collect();
            let key = |r: usize| trial.iter().map(|&k| value(r, k)).collect::<Vec<_>>();
            let apart = (0..table.rows.len()).all(|a| (0..a).all(|b| key(a) != key(b)));
            if !trial.is_empty() && apart {
                keep = trial;
            }
        }
        let words = (0..table.rows.len()).any(|r| {
            keep.iter()
                .any(|&k| value(r, k).chars().any(char::is_alphabetic))
        });
        let heading = if words && table.params.len() == 1 {
            String::new()
        } else {
            let names: Vec<&str> = keep.iter().map(|&k| table.params[k].as_str()).collect();
            names.join(" × ")
        };
        let values = (0..table.rows.len())
            .map(|r| {
                let v: Vec<&str> = keep.iter().map(|&k| value(r, k)).collect();
                v.join(" × ")
            })
            .collect();
        RowNames { heading, values }
    }

    /// `(Buffer Size × Max Buffers 64 × 64, 1,024 × 64)`: the rows `items` describe
    /// (each a row and what to say after its values), in brackets.
    fn list(&self, items: &[(usize, String)]) -> String {
        let each: Vec<String> = items
            .iter()
            .map(|(r, more)| format!("{}{more}", self.values[*r]))
            .collect();
        if self.heading.is_empty() {
            format!("({})", each.join("; "))
        } else {
            format!("({} {})", self.heading, each.join(", "))
        }
    }
}

/// `none` for 0, else the number.
fn count(n: usize) -> String {
    if n == 0 {
        "none".into()
    } else {
        n.to_string()
    }
}

/// ringmem's built-in waits (every `ringmem (…wait…)` column) against its hand-rolled
/// retry (the `ringmem` column), row by row: at least as fast (faster, or their ranges
/// overlap), or slower beyond the spread, with the rows and ratios. `None` without
/// both kinds of column.
pub fn waits_against_retry(table: &Table) -> Option<String> {
    let retry = table.columns.iter().position(|c| c == "ringmem")?;
    let waiting: Vec<usize> = (0..table.columns.len())
        .filter(|&c| table.columns[c].starts_with("ringmem (") && table.columns[c].contains("wait"))
        .collect();
    let names = RowNames::of(table);
    let mut parts: Vec<String> = Vec::new();
    for w in waiting {
        let (mut rows, mut faster) = (0, 0);
        let mut slower: Vec<(usize, String)> = Vec::new();
        for (r, row) in table.rows.iter().enumerate() {
            let (Some(a), Some(b)) = (row.cells[w], row.cells[retry]) else {
                continue;
            };
            rows += 1;
            match compare(a, (retry, b)) {
                Outcome::Won(..) => faster += 1,
                Outcome::Tied => {}
                Outcome::Lost(x, _) => slower.push((r, format!(" by {}", fmt_ratio(x)))),
            }
        }
        if rows == 0 {
            continue;
        }
        let name = &table.columns[w];
        let ahead = if faster > 0 {
            format!(", faster beyond the spread in {faster}")
        } else {
            String::new()
        };
        parts.push(if slower.is_empty() {
            format!("{name} at least as fast in every row{ahead}")
        } else {
            format!(
                "{name} at least as fast in {} of {rows} rows{ahead}, slower in {} {}",
                count(rows - slower.len()),
                slower.len(),
                names.list(&slower)
            )
        });
    }
    if parts.is_empty() {
        return None;
    }
    Some(format!(
        "Built-in wait against the hand-rolled retry (ringmem): {}.",
        parts.join("; ")
    ))
}

/// The slowdown (busy / quiet) of one cell: median, and the range its repetitions
/// allow (fastest busy run over slowest quiet run, to slowest over fastest).
#[derive(Clone, Copy)]
struct Slowdown {
    median: f64,
    lo: f64,
    hi: f64,
}

impl Slowdown {
    /// `None` where the times make no ratio: the cell is left out like one not run.
    fn of(busy: Stats, quiet: Stats) -> Option<Slowdown> {
        Some(Slowdown {
            median: ratio(busy.median, quiet.median)?,
            lo: ratio(busy.min, quiet.max)?,
            hi: ratio(busy.max, quiet.min)?,
        })
    }
}

/// The verdict on a table under load (cells busy, `quiet` the same cells without the
/// load): each column's median slowdowns over the rows; where each ringmem column
/// slowed down more than ringal, `Vec (glibc)` or the bounded control (what any ring of
/// that capacity pays) beyond the spread (their slowdown ranges apart); and each
/// ringmem column against ringal under load (and quiet).
fn under_load(table: &Table, quiet: &[Vec<Option<Stats>>]) -> Option<String> {
    let names = RowNames::of(table);
    let slowdown = |r: usize, c: usize| -> Option<Slowdown> {
        let busy = table.rows.get(r)?.cells.get(c).copied()??;
        let q = quiet.get(r)?.get(c).copied()??;
        Slowdown::of(busy, q)
    };
    let rows = table.rows.len();
    let ranges: Vec<String> = (0..table.columns.len())
        .filter_map(|c| {
            let m: Vec<Option<f64>> = (0..rows)
                .filter_map(|r| slowdown(r, c))
                .map(|s| Some(s.median))
                .collect();
            (!m.is_empty()).then(|| format!("{} {}", table.columns[c], ratios(&m)))
        })
        .collect();
    if ranges.is_empty() {
        return None;
    }
    let mut s = format!("slowdown busy / quiet {}", ranges.join(", "));
    let column = |name: &str| table.columns.iter().position(|c| c == name);
    let ours: Vec<usize> = (0..table.columns.len())
        .filter(|&c| table.columns[c].contains("ringmem"))
        .collect();
    let references: Vec<usize> = ["ringal", "Vec (glibc)", "bounded control"]
        .iter()
        .filter_map(|n| column(n))
        .collect();
    for &c in &ours {
        let mut said: Vec<String> = Vec::new();
        for &r in &references {
            let (mut compared, mut worse) = (0, Vec::new());
            for row in 0..rows {
                let (Some(a), Some(b)) = (slowdown(row, c), slowdown(row, r)) else {
                    continue;
                };
                compared += 1;
                if a.lo > b.hi {
                    worse.push((row, String::new()));
                }
            }
            if compared > 0 {
                said.push(if worse.is_empty() {
                    format!("than {} in none of {compared} rows", table.columns[r])
                } else {
                    format!(
                        "than {} in {} of {compared} {}",
                        table.columns[r],
                        worse.len(),
                        names.list(&worse)
                    )
                });
            }
        }
        if !said.is_empty() {
            s.push_str(&format!(
                ". {} slowed down more beyond the spread {}",
                table.columns[c],
                said.join(", ")
            ));
        }
    }
    if let Some(ringal) = column("ringal") {
        let mut said: Vec<String> = Vec::new();
        for &c in &ours {
            // Rows ahead, tied and behind under load; rows ahead when quiet.
            let (mut busy, mut ahead_quiet, mut compared) = ([0; 3], 0, 0);
            for (r, row) in table.rows.iter().enumerate() {
                let (Some(a), Some(b)) = (row.cells[c], row.cells[ringal]) else {
                    continue;
                };
                compared += 1;
                busy[match compare(a, (ringal, b)) {
                    Outcome::Won(..) => 0,
                    Outcome::Tied => 1,
                    Outcome::Lost(..) => 2,
                }] += 1;
                let q = |col: usize| quiet.get(r).and_then(|q| q.get(col).copied().flatten());
                if let (Some(qa), Some(qb)) = (q(c), q(ringal)) {
                    if matches!(compare(qa, (ringal, qb)), Outcome::Won(..)) {
                        ahead_quiet += 1;
                    }
                }
            }
            if compared > 0 {
                said.push(format!(
                    "{} ahead in {}, tied within the spread in {}, behind in {} of {compared} rows (quiet: ahead in {})",
                    table.columns[c],
                    count(busy[0]),
                    count(busy[1]),
                    count(busy[2]),
                    count(ahead_quiet)
                ));
            }
        }
        if !said.is_empty() {
            s.push_str(&format!(". Under load against ringal: {}", said.join("; ")));
        }
    }
    s.push('.');
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{Row, Unit};

    fn st(median: f64, spread: f64) -> Option<Stats> {
        Some(Stats {
            median,
            min: median - spread,
            max: median + spread,
            waits: 0,
            restarts: 0,
            cpu: None,
        })
    }

    fn table(columns: &[&str], rows: Vec<Vec<Option<Stats>>>) -> Table {
        let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        let mut t = Table::new("t", &["Size"], &columns, Unit::Ms);
        for (i, cells) in rows.into_iter().enumerate() {
            t.rows.push(Row {
                params: vec![i.to_string()],
                cells,
            });
        }
        t
    }

    #[test]
    fn a_clear_win_names_the_peer_and_the_ratios() {
        let t = table(
            &["ringal", "ringmem", "control"],
            vec![
                vec![st(3.0, 0.1), st(2.0, 0.1), st(0.5, 0.0)],
                vec![st(4.0, 0.1), st(2.0, 0.1), st(0.5, 0.0)],
            ],
        );
        let v = verdict("ringal-fixed", &t).unwrap();
        assert_eq!(
            v,
            "ringal-fixed: ringmem fastest in 2 of 2 rows (1.50–2.00× ringal)"
        );
    }

    #[test]
    fn overlapping_ranges_are_a_tie_not_a_win() {
        let t = table(
            &["Vec (glibc)", "ringmem", "ringmem (wait)"],
            vec![
                vec![st(2.1, 0.2), st(2.0, 0.2), st(2.5, 0.1)],
                vec![st(3.0, 0.1), st(2.0, 0.1), st(1.0, 0.1)],
            ],
        );
        let v = verdict("x", &t).unwrap();
        assert_eq!(
            v.replace("\n ", ""),
            "x: ringmem (best of 2) fastest in 1 of 2 rows (3.00× Vec (glibc)); tied within the spread in 1. \
             Built-in wait against the hand-rolled retry (ringmem): ringmem (wait) at least as fast in 1 of 2 \
             rows, faster beyond the spread in 1, slower in 1 (Size 0 by 1.25×)."
        );
    }

    #[test]
    fn each_waiting_column_is_judged_against_the_retry_row_by_row() {
        let t = table(
            &[
                "ringmem",
                "ringmem (wait)",
                "ringmem (wait_timeout)",
                "ringal",
            ],
            vec![
                vec![st(2.0, 0.1), st(2.1, 0.1), st(2.0, 0.1), st(3.0, 0.1)],
                vec![st(2.0, 0.1), st(3.0, 0.1), st(2.1, 0.2), st(3.0, 0.1)],
            ],
        );
        assert_eq!(
            waits_against_retry(&t).unwrap(),
            "Built-in wait against the hand-rolled retry (ringmem): ringmem (wait) at least as fast in 1 of 2 \
             rows, slower in 1 (Size 1 by 1.50×); ringmem (wait_timeout) at least as fast in every row."
        );
        let no_retry = table(
            &["ringmem (wait)", "ringal"],
            vec![vec![st(1.0, 0.0), st(2.0, 0.0)]],
        );
        assert!(waits_against_retry(&no_retry).is_none());
    }

    #[test]
    fn rows_are_named_by_the_fewest_parameters_that_tell_them_apart() {
        let columns = vec!["ringal".to_string()];
        let mut t = Table::new(
            "t",
            &["Iterations", "Buffer Size", "Max Buffers"],
            &columns,
            Unit::Ms,
        );
        for (i, s, m) in [
            ("500", "64", "64"),
            ("500", "1,024", "64"),
            ("500", "1,024", "1,024"),
            ("50", "65,536", "64"),
        ] {
            t.rows.push(Row {
                params: vec![i.into(), s.into(), m.into()],
                cells: vec![None],
            });
        }
        let names = RowNames::of(&t);
        assert_eq!(names.heading, "Buffer Size × Max Buffers");
        assert_eq!(
            names.values,
            ["64 × 64", "1,024 × 64", "1,024 × 1,024", "65,536 × 64"]
        );
        assert_eq!(
            names.list(&[(0, String::new()), (3, " by 2.00×".into())]),
            "(Buffer Size × Max Buffers 64 × 64, 65,536 × 64 by 2.00×)"
        );
        let mut t = Table::new("t", &["producers", "threads"], &columns, Unit::Mops);
        for n in [1, 2] {
            t.rows.push(Row {
                params: vec![n.to_string(), (2 * n).to_string()],
                cells: vec![None],
            });
        }
        assert_eq!(
            RowNames::of(&t).list(&[(1, String::new())]),
            "(producers 2)"
        );
        let mut t = Table::new(
            "t",
            &["Buffer Size", "Max Buffers", "Ring"],
            &columns,
            Unit::Ms,
        );
        for (s, r) in [
            ("64", "2× (8 KiB)"),
            ("64", "4× (16 KiB)"),
            ("1,024", "2× (128 KiB)"),
        ] {
            t.rows.push(Row {
                params: vec![s.into(), "64".into(), r.into()],
                cells: vec![None],
            });
        }
        assert_eq!(
            RowNames::of(&t).list(&[(0, String::new())]),
            "(Ring 2× (8 KiB))"
        );
        let mut t = Table::new("t", &["loop"], &columns, Unit::Auto);
        for l in ["single thread", "threaded"] {
            t.rows.push(Row {
                params: vec![l.into()],
                cells: vec![None],
            });
        }
        let names = RowNames::of(&t);
        assert_eq!(
            names.list(&[(0, String::new()), (1, String::new())]),
            "(single thread; threaded)"
        );
    }

    #[test]
    fn under_load_it_names_the_larger_slowdowns_and_who_stayed_ahead() {
        let mut t = table(
            &["ringal", "ringmem", "Vec (glibc)", "control"],
            vec![
                // Row 0: ringmem slows down 3×, ringal and glibc 2×, ranges apart.
                vec![st(4.0, 0.1), st(3.0, 0.1), st(4.0, 0.1), st(1.0, 0.0)],
                // Row 1: all 2×; ringmem ahead of ringal under load and quiet.
                vec![st(4.0, 0.1), st(2.0, 0.1), st(4.0, 0.1), st(1.0, 0.0)],
            ],
        );
        t.ratio = Ratio::Slowdown(vec![
            vec![st(2.0, 0.1), st(1.0, 0.1), st(2.0, 0.1), st(0.5, 0.0)],
            vec![st(2.0, 0.1), st(1.0, 0.1), st(2.0, 0.1), st(0.5, 0.0)],
        ]);
        let v = verdict("busy", &t).unwrap();
        assert!(v.lines().all(|l| l.chars().count() <= WIDTH), "{v}");
        assert_eq!(
            v.replace("\n ", ""),
            "busy: slowdown busy / quiet ringal 2.00×, ringmem 2.00–3.00×, Vec (glibc) 2.00×, control 2.00×. \
             ringmem slowed down more beyond the spread than ringal in 1 of 2 (Size 0), than Vec (glibc) in 1 \
             of 2 (Size 0). Under load against ringal: ringmem ahead in 2, tied within the spread in none, \
             behind in none of 2 rows (quiet: ahead in 2)."
        );
    }

    #[test]
    fn a_loss_says_who_was_faster_and_by_how_much() {
        let t = table(
            &["mimalloc", "ringmem::RingAlloc", "bumpalo::Bump"],
            vec![
                vec![st(1.0, 0.0), st(2.0, 0.0), st(1.5, 0.0)],
                vec![st(2.0, 0.0), st(2.5, 0.0), st(2.2, 0.0)],
                vec![st(3.0, 0.0), st(1.0, 0.0), st(2.0, 0.0)],
            ],
        );
        let v = verdict("ring-alloc", &t).unwrap();
        assert!(v.lines().all(|l| l.chars().count() <= WIDTH), "{v}");
        assert_eq!(
            v.replace("\n ", ""),
            "ring-alloc: ringmem::RingAlloc fastest in 1 of 3 rows (2.00× bumpalo::Bump); behind in 2 \
             (mimalloc 1.25–2.00× faster)"
        );
    }

    #[test]
    fn without_ringmem_columns_it_counts_each_winner() {
        let t = table(
            &["tokio_util", "peer", "control"],
            vec![
                vec![st(1.0, 0.1), st(2.0, 0.1), st(0.1, 0.0)],
                vec![st(1.0, 0.5), st(1.2, 0.5), None],
                vec![None, st(1.0, 0.1), None],
            ],
        );
        let v = verdict("framed", &t).unwrap();
        let ties = table(&["peer", "ringmem"], vec![vec![st(1.0, 0.5), st(1.1, 0.5)]]);
        assert_eq!(
            verdict("y", &ties).unwrap(),
            "y: ringmem tied with the best peer within the spread in 1 of 1 rows"
        );
        assert_eq!(
            v,
            "framed: of 2 rows, tokio_util fastest in 1; too close to call in 1"
        );
    }

    #[test]
    fn a_time_of_zero_makes_no_ratio_in_a_verdict() {
        let t = table(
            &["ringal", "ringmem"],
            vec![
                vec![st(3.0, 0.1), st(0.0, 0.0)],
                vec![st(4.0, 0.1), st(2.0, 0.1)],
            ],
        );
        assert_eq!(
            verdict("x", &t).unwrap(),
            "x: ringmem fastest in 2 of 2 rows (n/a ringal)"
        );
        let mut t = table(
            &["ringal", "ringmem"],
            vec![vec![st(4.0, 0.1), st(3.0, 0.1)]],
        );
        t.ratio = Ratio::Slowdown(vec![vec![st(2.0, 0.1), st(0.0, 0.0)]]);
        let v = verdict("busy", &t).unwrap();
        assert!(
            v.starts_with("busy: slowdown busy / quiet ringal 2.00×."),
            "{v}"
        );
    }

    #[test]
    fn no_verdict_without_two_timed_competitors_or_for_sizes() {
        let t = table(
            &["ringmem", "control"],
            vec![vec![st(1.0, 0.0), st(0.5, 0.0)]],
        );
        assert!(verdict("x", &t).is_none());
        let mut t = table(&["ringmem", "peer"], vec![vec![st(1.0, 0.0), st(2.0, 0.0)]]);
        t.unit = Unit::Mib;
        assert!(verdict("x", &t).is_none());
    }
}
