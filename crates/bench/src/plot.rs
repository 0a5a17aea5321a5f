//! `--plot PATH.svg`: throughput over time per engine, one panel per job
//! of each scenario, with time and GiB/s axes and a legend. Each second's
//! bandwidth is drawn as a step over that second (each interval's, for a
//! job with a finer timeline). The `scaling` scenario's jobs are drawn
//! instead as throughput against threads: a panel per workload, a line
//! per engine through its bandwidth at each thread count.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::report::{RunRecord, ScenarioReport};
use crate::units::{fmt_size, GIB_F64 as GIB};

const WIDTH: u32 = 1000;
const PANEL_HEIGHT: u32 = 340;
/// Line colours (Tableau 10), distinct on white.
const COLORS: [RGBColor; 8] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// One line: an engine's label and its points (x, bytes/s).
type Series = (String, Vec<(f64, f64)>);

/// One panel: a title, what its x axis is, and a line per engine.
struct Panel {
    title: String,
    x_desc: &'static str,
    series: Vec<Series>,
}

impl Panel {
    /// Adds `line` to the panel titled `title` in `out`, making it first
    /// if there is none.
    fn add(out: &mut Vec<Panel>, title: String, x_desc: &'static str, line: Series) {
        match out.iter_mut().find(|p| p.title == title) {
            Some(p) => p.series.push(line),
            None => out.push(Panel {
                title,
                x_desc,
                series: vec![line],
            }),
        }
    }
}

/// The start of the title of `r`'s panel: its scenario, how it reads or
/// writes, and its block size.
fn title(sc: &ScenarioReport, r: &RunRecord) -> String {
    format!("{}: {} bs={}", sc.name, r.job.rw, fmt_size(r.job.bs))
}

/// The `scaling` scenario's panels: one per workload (its jobs' reads or
/// writes), each engine's bandwidth against the job's threads.
fn scaling_panels(sc: &ScenarioReport, out: &mut Vec<Panel>) {
    for r in &sc.results {
        let cold = if r.job.cold { " cold" } else { "" };
        let title = format!("{}{cold}, throughput against threads", title(sc, r));
        let point = (r.job.numjobs as f64, r.perf.bw_bytes);
        match out
            .iter_mut()
            .find(|p| p.title == title)
            .and_then(|p| p.series.iter_mut().find(|(e, _)| *e == r.engine))
        {
            Some((_, points)) => points.push(point),
            None => Panel::add(out, title, "threads", (r.engine.clone(), vec![point])),
        }
    }
}

fn panels(scenarios: &[ScenarioReport]) -> Vec<Panel> {
    let mut out: Vec<Panel> = Vec::new();
    for sc in scenarios {
        if sc.name == "scaling" {
            scaling_panels(sc, &mut out);
            continue;
        }
        for r in &sc.results {
            let hot = if r.hot.is_some() {
                " beside a hot reader"
            } else {
                ""
            };
            let title = format!("{} numjobs={}{hot}", title(sc, r), r.job.numjobs);
            let (tl, step) = match &r.timing.fine_timeline {
                Some(t) if !t.bw_bytes.is_empty() => (&t.bw_bytes, t.interval_s),
                _ => (&r.timing.timeline_bw_bytes, 1.0),
            };
            // Each interval's bandwidth as a step over it.
            let steps = tl
                .iter()
                .enumerate()
                .flat_map(|(s, &v)| {
                    let x = s as f64 * step;
                    [(x, v), (x + step, v)]
                })
                .collect();
            Panel::add(&mut out, title, "time (s)", (r.engine.clone(), steps));
        }
    }
    out
}

/// Draws the chart of `scenarios` to `path` (SVG).
///
/// # Errors
/// No results to draw, or the file cannot be written.
pub fn draw(path: &Path, scenarios: &[ScenarioReport]) -> Result<()> {
    let panels = panels(scenarios);
    if panels.is_empty() {
        return Err(anyhow!("no results to plot"));
    }
    let height = PANEL_HEIGHT * panels.len() as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len(), 1));
    for (area, panel) in areas.iter().zip(&panels) {
        let right = panel
            .series
            .iter()
            .flat_map(|(_, p)| p.iter())
            .fold(0.0f64, |m, &(x, _)| m.max(x));
        let right = if right > 0.0 { right } else { 1.0 };
        let top = panel
            .series
            .iter()
            .flat_map(|(_, p)| p.iter())
            .fold(0.0f64, |m, &(_, v)| m.max(v / GIB));
        let top = if top > 0.0 { top * 1.15 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..right, 0.0..top)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(panel.x_desc)
            .y_desc("throughput (GiB/s)")
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (label, points)) in panel.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let line = points.iter().map(|&(x, v)| (x, v / GIB));
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
