//! The loss curve of a run as an SVG (`--plot FILE`): loss against step, with labelled axes
//! and "nice" ticks. Written by hand: a polyline and a few text elements need no plotting
//! crate (plotters would add tens of crates to a CI build from scratch).

use std::fmt::Write as _;

/// Plot width and height in pixels, and the margins that hold the axis labels.
const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Tick positions covering `lo..=hi` at a 1-2-5 step, about `n` of them.
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(f64::EPSILON);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    (0..)
        .map(|i| first + i as f64 * step)
        .take_while(|t| *t <= hi + step * 1e-9)
        .collect()
}

/// Escapes text for an SVG element.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG of `points` (step, loss); non-finite losses are left out of the curve.
pub fn loss_curve(title: &str, points: &[(usize, f32)]) -> String {
    let finite: Vec<(f64, f64)> = points
        .iter()
        .filter(|(_, l)| l.is_finite())
        .map(|&(s, l)| (s as f64, f64::from(l)))
        .collect();
    let (x0, x1) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
    let (y0, y1) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
    let (x0, x1) = if finite.is_empty() {
        (0.0, 1.0)
    } else {
        (x0, x1.max(x0 + 1.0))
    };
    // A little head room, so the curve does not touch the frame.
    let pad = ((y1 - y0) * 0.05).max(1e-3);
    let (y0, y1) = if finite.is_empty() {
        (0.0, 1.0)
    } else {
        (y0 - pad, y1 + pad)
    };
    let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    let (gx0, gx1, gy0, gy1) = (LEFT, W - RIGHT, TOP, H - BOTTOM);
    let _ = writeln!(
        s,
        r##"<rect x="{gx0}" y="{gy0}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        gx1 - gx0,
        gy1 - gy0
    );
    for t in ticks(x0, x1, 8) {
        let x = px(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{gy1}" x2="{x:.1}" y2="{}" stroke="#444"/><text x="{x:.1}" y="{}" text-anchor="middle">{t}</text>"##,
            gy1 + 5.0,
            gy1 + 19.0
        );
    }
    for t in ticks(y0, y1, 6) {
        let y = py(t);
        let _ = writeln!(
            s,
            r##"<line x1="{gx0}" y1="{y:.1}" x2="{gx1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            gx0 - 6.0,
            y + 4.0,
            format_tick(t)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">step</text>"#,
        (gx0 + gx1) / 2.0,
        H - 12.0
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">loss</text>"#,
        (gy0 + gy1) / 2.0,
        (gy0 + gy1) / 2.0
    );
    let pts: Vec<String> = finite
        .iter()
        .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
        .collect();
    let _ = writeln!(
        s,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{}"/>"##,
        pts.join(" ")
    );
    s.push_str("</svg>\n");
    s
}

/// A tick label with as many decimals as the tick spacing needs (at most 3).
fn format_tick(t: f64) -> String {
    let s = format!("{t:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(1.0, 30.0, 8), [5.0, 10.0, 15.0, 20.0, 25.0, 30.0]);
        let t = ticks(5.14, 6.31, 6);
        assert!(t.first().is_some_and(|v| (v - 5.2).abs() < 1e-9), "{t:?}");
        assert!(t.iter().all(|v| (5.14..=6.31).contains(v)), "{t:?}");
        assert_eq!(format_tick(5.2), "5.2");
        assert_eq!(format_tick(10.0), "10");
    }

    #[test]
    fn the_curve_maps_first_and_last_step_to_the_frame() {
        let svg = loss_curve("a <b>", &[(1, 6.0), (2, f32::NAN), (3, 5.0)]);
        let points = svg
            .split("points=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("a polyline");
        let pts: Vec<&str> = points.split(' ').collect();
        // The NaN step is left out; step 1 at the left edge, step 3 at the right.
        assert_eq!(pts.len(), 2);
        assert!(pts[0].starts_with(&format!("{LEFT:.1},")), "{points}");
        assert!(
            pts[1].starts_with(&format!("{:.1},", W - RIGHT)),
            "{points}"
        );
        assert!(svg.contains("a &lt;b&gt;"));
    }
}
