//! SVG charts of the report: per table, the speed-up of every competitor against the
//! table's reference column (`Vec`/`Box`/`Global` on the system allocator), or for a
//! table under load its slowdown against the quiet run, one group of horizontal bars
//! per row, on a logarithmic axis (1× is the reference).

use std::path::Path;

use plotters::prelude::*;

use crate::harness::{Ratio, Table};

/// Bar height and gap, in chart units (one unit per bar).
const GROUP_GAP: f64 = 1.5;

/// Writes `table` as an SVG bar chart of its ratios (speed-ups or slowdowns) to `path`. Tables of sizes
/// (peak RSS) and tables without any measured cell are skipped (`Ok(false)`).
pub fn write_speedups(table: &Table, path: &Path) -> Result<bool, String> {
    if table.unit.is_figure() {
        return Ok(false);
    }
    let n = table.columns.len();
    // speed-ups (or slowdowns) [row][col]
    let speed: Vec<Vec<Option<f64>>> = (0..table.rows.len())
        .map(|r| {
            (0..n)
                // Above zero for the log axis; a cell with no ratio gets no bar.
                .map(|c| table.ratio_of(r, c).filter(|&x| x > 0.0))
                .collect()
        })
        .collect();
    let all: Vec<f64> = speed.iter().flatten().flatten().copied().collect();
    if all.is_empty() {
        return Ok(false);
    }
    let lo = all.iter().copied().fold(1.0f64, f64::min).min(0.5) / 1.5;
    let top = all.iter().copied().fold(1.0f64, f64::max).max(2.0) * 1.5;
    // Room on the right for the legend: about a third of the axis.
    let hi = top * (top / lo).powf(0.45);
    let group = n as f64 + GROUP_GAP + 1.0; // bars, a label line, a gap
    let height_units = group * table.rows.len() as f64;
    let px_h = (40.0 + height_units * 14.0).round() as u32 + 60;
    let root = SVGBackend::new(path, (1000, px_h)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&table.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(10)
        .build_cartesian_2d((lo..hi).log_scale(), height_units..0.0)
        .map_err(|e| err(&e))?;
    let reference = table
        .columns
        .get(table.baseline)
        .cloned()
        .unwrap_or_default();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc(match table.ratio {
            Ratio::Slowdown(_) => {
                "slowdown against the quiet run (busy / quiet; log scale; higher is slower)".into()
            }
            Ratio::SpeedUp if table.title.contains("latency") => {
                format!("{reference}'s latency over this one's (log scale; higher is shorter)")
            }
            Ratio::SpeedUp => format!("speed-up against {reference} (log scale; higher is better)"),
        })
        .x_label_formatter(&|x| format!("{x:.2}×"))
        .draw()
        .map_err(|e| err(&e))?;
    // The reference line at 1×.
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(1.0, 0.0), (1.0, height_units)],
            BLACK.stroke_width(1),
        )))
        .map_err(|e| err(&e))?;
    for (ci, name) in table.columns.iter().enumerate() {
        let color = Palette99::pick(ci).mix(0.9);
        let bars: Vec<Rectangle<(f64, f64)>> = speed
            .iter()
            .enumerate()
            .filter_map(|(ri, row)| {
                let s = row.get(ci).copied().flatten()?;
                let y = ri as f64 * group + 1.0 + ci as f64;
                Some(Rectangle::new(
                    [(lo, y + 0.1), (s, y + 0.9)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        // The value at the end of each bar.
        let labels: Vec<Text<'_, (f64, f64), String>> = speed
            .iter()
            .enumerate()
            .filter_map(|(ri, row)| {
                let s = row.get(ci).copied().flatten()?;
                let y = ri as f64 * group + 1.0 + ci as f64;
                Some(Text::new(
                    format!(" {s:.2}×"),
                    (s, y + 0.15),
                    ("sans-serif", 10).into_font(),
                ))
            })
            .collect();
        chart.draw_series(labels).map_err(|e| err(&e))?;
    }
    // Row labels above each group.
    let row_labels: Vec<Text<'_, (f64, f64), String>> = table
        .rows
        .iter()
        .enumerate()
        .map(|(ri, r)| {
            Text::new(
                r.params.join(" · ").replace('`', ""),
                (lo, ri as f64 * group + 0.1),
                ("sans-serif", 12).into_font(),
            )
        })
        .collect();
    chart.draw_series(row_labels).map_err(|e| err(&e))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}
