//! SVG plots of a sweep, one per thread count: per scenario, the ratios to Main on our runtime
//! (left panel, log scale, 95% intervals as bars) and the absolute median times of both
//! engines (right panel, log scale), so a large ratio on a microsecond program is seen as such.

use super::report::groups;
use super::{MachineInfo, Row};
use std::path::Path;

/// An SVG plot per thread count: ratios by scenario and absolute times (see the module docs).
pub fn plot(path: &Path, rows: &[&Row], threads: usize, info: &MachineInfo) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let owned: Vec<Row> = rows.iter().map(|r| (*r).clone()).collect();
    let gs = groups(&owned, threads);
    let n = gs.len().max(1);
    let mut lo: f64 = 0.5;
    let mut hi: f64 = 2.0;
    for (_, g) in &gs {
        for r in [g.sm_pot, g.sm_cost, g.nhwc].into_iter().flatten() {
            if let (Some(l), Some(h)) = (r.ci_low, r.ci_high) {
                lo = lo.min(l);
                hi = hi.max(h);
            }
        }
    }
    let (lo, hi) = ((lo * 0.8).max(1e-3), (hi * 1.25).min(1e4));
    let labels: Vec<String> = gs.iter().map(|(k, _)| format!("{} {} {}", k.0, k.1, k.2)).collect();
    let height = 120 + 18 * n as u32;
    let root = SVGBackend::new(path, (1700, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (left, right) = root.split_horizontally(1100);
    let title = format!(
        "ratio vs Main at {threads} thread(s){} - {}",
        if threads > info.cores { " (oversubscribed)" } else { "" },
        info.commit
    );
    let mut chart = ChartBuilder::on(&left)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(300)
        .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..(n as f64 - 0.5))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 0.01 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc("time / Main time (below 1 = faster than before), log scale, bars = 95% interval")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .draw_series(LineSeries::new(vec![(1.0, -0.5), (1.0, n as f64 - 0.5)], BLACK.stroke_width(1)))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let series: [(&str, RGBColor, f64); 3] = [
        ("StaticMean, per-output tasks", RGBColor(214, 39, 40), -0.22),
        ("StaticMean, cost model", RGBColor(31, 119, 180), 0.0),
        ("NhwcAware, cost model", RGBColor(44, 160, 44), 0.22),
    ];
    for (si, (name, color, off)) in series.into_iter().enumerate() {
        let pts: Vec<(f64, f64, f64, f64)> = gs
            .iter()
            .enumerate()
            .filter_map(|(i, (_, g))| {
                let r = [g.sm_pot, g.sm_cost, g.nhwc][si]?;
                Some((
                    r.ratio_vs_main?.clamp(lo, hi),
                    i as f64 + off,
                    r.ci_low?.clamp(lo, hi),
                    r.ci_high?.clamp(lo, hi),
                ))
            })
            .collect();
        chart
            .draw_series(pts.iter().map(|&(_, y, l, h)| PathElement::new(vec![(l, y), (h, y)], color.stroke_width(2))))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .draw_series(pts.iter().map(|&(x, y, _, _)| Circle::new((x, y), 3, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(name)
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    times(&right, &owned, &gs, threads)?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// The right panel: median times in microseconds of both engines, on the left panel's rows.
fn times<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    rows: &[Row],
    gs: &[((String, String, String), super::report::Group<'_>)],
    threads: usize,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let n = gs.len().max(1);
    let find = |k: &(String, String, String), engine: &str, mode: &str, policy: Option<&str>| {
        super::versus::find(rows, (&k.0, &k.1, &k.2), engine, mode, policy, threads)
            .and_then(|r| r.median_ns)
            .map(|ns| ns / 1000.0)
    };
    // (legend, engine, mode, policy, colour, offset).
    type Series<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, RGBColor, f64);
    let series: [Series; 4] = [
        ("ours Main", "ours", "main", None, RGBColor(150, 150, 150), -0.24),
        ("XNNPACK Main", "xnnpack", "main", None, RGBColor(0, 0, 0), -0.08),
        ("ours StaticMean, cost model", "ours", "static_mean", Some("cost_model"), RGBColor(31, 119, 180), 0.08),
        ("XNNPACK StaticMean", "xnnpack", "static_mean", None, RGBColor(255, 127, 14), 0.24),
    ];
    let pts: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|&(_, e, m, p, _, off)| {
            gs.iter().enumerate().filter_map(|(i, (k, _))| Some((find(k, e, m, p)?, i as f64 + off))).collect()
        })
        .collect();
    let all: Vec<f64> = pts.iter().flatten().map(|p| p.0).collect();
    let lo = all.iter().cloned().fold(f64::INFINITY, f64::min).min(1.0) * 0.7;
    let hi = all.iter().cloned().fold(0.0, f64::max).max(10.0) * 1.4;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("median time at {threads} thread(s), us"), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(10)
        .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..(n as f64 - 0.5))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .y_labels(0)
        .x_desc("microseconds per run (log scale)")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (si, &(name, _, _, _, color, _)) in series.iter().enumerate() {
        chart
            .draw_series(pts[si].iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(name)
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
