//! Timelines as SVG: replayed passes drawn one above the other on a shared time axis, three
//! lanes each (TensorCore, FSDP SparseCore 0, SparseCore 1, as the reference labels them),
//! bars labelled by op and layer (`AG W3`, `fwd L3`, `vjp L3`, `RS dW3`, `A2A L3`) and a
//! legend of the ops drawn, so
//! prefetch off and on can be compared at a glance in a browser.
//!
//! Written as text rather than through a drawing crate: the document is a few hundred
//! rectangles and labels, and every attribute is ours to escape.

use std::fmt::Write as _;

use super::{Lane, OpKind, Timeline};

const LANE_H: f64 = 26.0;
const LANE_GAP: f64 = 4.0;
const PANEL_GAP: f64 = 34.0;
const LEFT: f64 = 150.0;
const PLOT_W: f64 = 1100.0;
const TOP: f64 = 48.0;
/// Width in pixels below which a bar's label is left to its tooltip.
const MIN_LABEL_W: f64 = 34.0;

/// The name the reference gives a lane.
pub fn lane_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Compute => "TensorCore",
        Lane::Fsdp => "FSDP SparseCore 0",
        Lane::Second => "SparseCore 1",
    }
}

fn colour(op: OpKind) -> &'static str {
    match op {
        OpKind::Forward => "#4c78a8",
        OpKind::Vjp => "#2f5d8a",
        OpKind::Gather => "#f58518",
        OpKind::ReduceScatter => "#54a24b",
        OpKind::AllToAll => "#b279a2",
        OpKind::CarryCopy => "#9d755d",
    }
}

fn op_name(op: OpKind) -> &'static str {
    match op {
        OpKind::Forward => "forward (fwd L)",
        OpKind::Vjp => "recompute + VJP (vjp L)",
        OpKind::Gather => "weight all-gather (AG W)",
        OpKind::ReduceScatter => "gradient reduce-scatter (RS dW)",
        OpKind::AllToAll => "token all-to-all (A2A L)",
        OpKind::CarryCopy => "loop-carry copy (copy L)",
    }
}

/// Escapes text for an XML attribute or element.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A tick step of 1, 2 or 5 × 10ⁿ milliseconds giving about eight ticks over `span_ms`.
fn tick_step(span_ms: f64) -> f64 {
    let raw = (span_ms / 8.0).max(f64::MIN_POSITIVE);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
}

/// Renders `panels` (a caption and a replayed pass each, e.g. prefetch off then on) under
/// `title`, every panel on the same scale so their lengths compare. Times are seconds; the
/// axis is in milliseconds.
pub fn render(title: &str, panels: &[(&str, &Timeline)]) -> String {
    let span = panels
        .iter()
        .map(|(_, t)| t.total)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let x = |t: f64| LEFT + t / span * PLOT_W;
    let panel_h = 18.0 + Lane::ALL.len() as f64 * (LANE_H + LANE_GAP);
    let axis_y = TOP + panels.len() as f64 * (panel_h + PANEL_GAP);
    let height = axis_y + 40.0 + 24.0 * 2.0;
    let width = LEFT + PLOT_W + 30.0;
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    for (i, (caption, t)) in panels.iter().enumerate() {
        let y0 = TOP + i as f64 * (panel_h + PANEL_GAP);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{:.1}" font-weight="bold">{} — {:.3} ms, exposed communication {:.3} ms</text>"#,
            y0 + 12.0,
            escape(caption),
            t.total * 1e3,
            t.exposed_communication * 1e3
        );
        for (r, lane) in Lane::ALL.into_iter().enumerate() {
            let y = y0 + 18.0 + r as f64 * (LANE_H + LANE_GAP);
            let _ = writeln!(
                s,
                r##"<rect x="{LEFT}" y="{y:.1}" width="{PLOT_W}" height="{LANE_H}" fill="#f2f2f2"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT - 8.0,
                y + LANE_H / 2.0 + 4.0,
                lane_name(lane)
            );
            for b in t.lane(lane) {
                let (bx, bw) = (x(b.start), (x(b.end) - x(b.start)).max(0.5));
                let label = b.label();
                let _ = writeln!(
                    s,
                    r#"<rect x="{bx:.2}" y="{:.1}" width="{bw:.2}" height="{:.1}" fill="{}" stroke="white" stroke-width="{}"><title>{} ({:.3}–{:.3} ms)</title></rect>"#,
                    y + 2.0,
                    LANE_H - 4.0,
                    colour(b.op),
                    // A separating edge would hide a bar narrower than a few pixels.
                    if bw >= 3.0 { 0.5 } else { 0.0 },
                    escape(&label),
                    b.start * 1e3,
                    b.end * 1e3
                );
                if bw >= MIN_LABEL_W {
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.2}" y="{:.1}" fill="white" text-anchor="middle">{}</text>"#,
                        bx + bw / 2.0,
                        y + LANE_H / 2.0 + 4.0,
                        escape(&label)
                    );
                }
            }
        }
    }
    // The time axis.
    let step = tick_step(span * 1e3);
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}" stroke="black"/>"#,
        LEFT + PLOT_W
    );
    let mut k = 0u32;
    loop {
        let ms = f64::from(k) * step;
        if ms > span * 1e3 * (1.0 + 1e-9) {
            break;
        }
        let tx = x(ms / 1e3);
        let _ = writeln!(
            s,
            r#"<line x1="{tx:.2}" y1="{axis_y:.1}" x2="{tx:.2}" y2="{:.1}" stroke="black"/><text x="{tx:.2}" y="{:.1}" text-anchor="middle">{}</text>"#,
            axis_y + 5.0,
            axis_y + 17.0,
            trim(ms)
        );
        k += 1;
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (ms)</text>"#,
        LEFT + PLOT_W / 2.0,
        axis_y + 32.0
    );
    // The legend.
    let ly = axis_y + 52.0;
    let drawn = |op: OpKind| {
        panels
            .iter()
            .any(|(_, t)| t.bars.iter().any(|b| b.op == op))
    };
    for (i, op) in [
        OpKind::Forward,
        OpKind::Vjp,
        OpKind::Gather,
        OpKind::ReduceScatter,
        OpKind::AllToAll,
        OpKind::CarryCopy,
    ]
    .into_iter()
    .filter(|&op| drawn(op))
    .enumerate()
    {
        let lx = LEFT + i as f64 * 250.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="14" height="14" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            ly - 11.0,
            colour(op),
            lx + 20.0,
            ly,
            op_name(op)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A tick value without trailing zeros.
fn trim(ms: f64) -> String {
    let t = format!("{ms:.3}");
    t.trim_end_matches('0').trim_end_matches('.').to_owned()
}
