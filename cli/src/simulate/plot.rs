//! `--plot FILE.svg`: extensions per lease-hour against unreported lapses per
//! strategy, and the distribution of the lead each beat found on the server.

use std::path::Path;

use plotters::prelude::*;

use super::{Kind, Summary};

const COLORS: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
];

pub(super) fn draw(s: &Summary, path: &Path) -> Result<(), String> {
    draw_inner(s, path).map_err(|e| format!("cannot draw {}: {e}", path.display()))
}

fn draw_inner(s: &Summary, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "leasebeat simulate: {} seeded histories (seed {}), every strategy on the same histories",
            s.sequences, s.seed
        ),
        ("sans-serif", 20),
    )?;
    let (left, right) = root.split_horizontally(620);

    // Left: cost against risk.
    let per = |n: u64| n as f64 * 100_000.0 / s.sequences.max(1) as f64;
    let pts: Vec<(f64, f64, &str, RGBColor)> = Kind::ALL
        .iter()
        .zip(&s.tallies)
        .zip(COLORS)
        .map(|((k, t), c)| {
            (
                t.extensions_per_hour(),
                per(t.unreported_lapses),
                k.name(),
                c,
            )
        })
        .collect();
    let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 1.3;
    let xmin = pts.iter().map(|p| p.0).fold(f64::MAX, f64::min).max(0.1) / 1.5;
    let ymax = pts.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&left)
        .caption("cost and risk (lower left is better)", ("sans-serif", 16))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc("extensions per lease-hour (log)")
        .y_desc("unreported lapses per 100,000 histories")
        .draw()?;
    chart.draw_series(pts.iter().map(|(x, y, name, c)| {
        EmptyElement::at((*x, *y))
            + Circle::new((0, 0), 6, c.filled())
            + Text::new(name.to_string(), (9, -14), ("sans-serif", 14).into_font())
    }))?;

    // Right: lead distributions.
    let mut chart = ChartBuilder::on(&right)
        .caption(
            "lead left on the server at each extend (CDF)",
            ("sans-serif", 16),
        )
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((0.01f64..10_000f64).log_scale(), 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("lead in seconds (log)")
        .y_desc("fraction of extends")
        .draw()?;
    for ((k, t), c) in Kind::ALL.iter().zip(&s.tallies).zip(COLORS) {
        if t.leads.is_empty() {
            continue;
        }
        let line: Vec<(f64, f64)> = (0..=400)
            .map(|i| {
                let q = i as f64 / 400.0;
                let v = t.leads.value_at_quantile(q) as f64 / 1000.0;
                (v.clamp(0.01, 10_000.0), q)
            })
            .collect();
        chart
            .draw_series(LineSeries::new(line, c.stroke_width(2)))?
            .label(k.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
