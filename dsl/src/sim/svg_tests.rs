//! The timelines of the reference's three configurations (Llama, the nested Qwen3.5 block,
//! DeepSeek-V3's dense→MoE boundary), forward and backward, prefetch off vs on with deferred
//! reduce-scatter: each must parse as SVG with balanced tags and show every op it replayed.
//! Set `STACKSCAN_TIMELINE_DIR` to keep the files for viewing.

use svg::node::element::tag::Type;
use svg::parser::Event;

use super::draw::{lane_name, render};
use super::*;
use crate::plan::{Plan, PlanOptions, Stack};

fn t(forward: f64, gather: f64, reduce_scatter: f64) -> KindTimes {
    // Illustrative times, in seconds: backward (recompute + VJP) is three forwards.
    KindTimes {
        forward,
        backward: 3.0 * forward,
        gather,
        reduce_scatter,
        ..KindTimes::default()
    }
}

fn configurations() -> Vec<(&'static str, Stack, Vec<KindTimes>)> {
    vec![
        (
            "llama",
            Stack::homogeneous("L", 6).unwrap(),
            vec![t(10e-3, 6e-3, 7e-3)],
        ),
        (
            "qwen35",
            Stack::blocks(&["GDN", "GDN", "GDN", "attention"], 2).unwrap(),
            vec![t(8e-3, 5e-3, 6e-3), t(12e-3, 6e-3, 7e-3)],
        ),
        (
            "deepseek3",
            Stack::with_prefix(&["dense", "dense", "dense"], &["MoE"], 4).unwrap(),
            vec![t(9e-3, 3e-3, 4e-3), t(20e-3, 16e-3, 18e-3)],
        ),
    ]
}

/// Parses `doc`, checking it is one balanced `svg` element; returns the text of every
/// `title` element (the bars' tooltips).
fn parse(doc: &str) -> Vec<String> {
    let mut open: Vec<String> = Vec::new();
    let mut titles = Vec::new();
    let mut roots = 0;
    for event in svg::read(doc).unwrap() {
        match event {
            Event::Error(e) => panic!("not SVG: {e}"),
            Event::Tag(name, Type::Start, _) => {
                if open.is_empty() {
                    assert_eq!(name, "svg");
                    roots += 1;
                }
                open.push(name.to_owned());
            }
            Event::Tag(name, Type::End, _) => {
                assert_eq!(open.pop().as_deref(), Some(name), "unbalanced </{name}>");
            }
            Event::Tag(name, Type::Empty, _) => assert!(!open.is_empty(), "<{name}/> outside"),
            Event::Text(text) if open.last().map(String::as_str) == Some("title") => {
                titles.push(text.to_owned());
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "unclosed {open:?}");
    assert_eq!(roots, 1);
    titles
}

#[test]
fn reference_timelines_parse_as_svg_and_show_every_op() {
    let keep = std::env::var_os("STACKSCAN_TIMELINE_DIR").map(std::path::PathBuf::from);
    for (name, stack, times) in configurations() {
        let off = Plan::new(&stack, PlanOptions::baseline()).unwrap();
        let on = Plan::new(&stack, PlanOptions::prefetch_deferred()).unwrap();
        for (pass, a, b) in [
            ("forward", &off.forward, &on.forward),
            ("backward", &off.backward, &on.backward),
        ] {
            let sim = SimOptions::default();
            let a = simulate(a, &stack, &times, sim).unwrap();
            let b = simulate(b, &stack, &times, sim).unwrap();
            assert!(
                b.total < a.total,
                "{name} {pass}: prefetch should help here"
            );
            let doc = render(
                &format!("{name}: {pass}"),
                &[
                    ("prefetch off", &a),
                    ("prefetch on, deferred reduce-scatter", &b),
                ],
            );
            let titles = parse(&doc);
            // Drawn panel by panel, lane by lane.
            let expected: Vec<String> = [&a, &b]
                .into_iter()
                .flat_map(|t| Lane::ALL.into_iter().flat_map(move |l| t.lane(l)))
                .map(Bar::label)
                .collect();
            assert_eq!(titles.len(), expected.len());
            for (title, label) in titles.iter().zip(&expected) {
                assert!(
                    title.starts_with(&format!("{label} (")),
                    "{title} vs {label}"
                );
            }
            for lane in Lane::ALL {
                assert!(doc.contains(lane_name(lane)));
            }
            // The legend names the ops drawn: reduce-scatters only in the backward.
            assert!(doc.contains("time (ms)"));
            assert_eq!(
                doc.contains("gradient reduce-scatter"),
                a.lane(Lane::Second).next().is_some() || b.lane(Lane::Second).next().is_some()
            );
            if let Some(dir) = &keep {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(dir.join(format!("{name}-{pass}.svg")), &doc).unwrap();
            }
        }
    }
}

#[test]
fn titles_are_escaped() {
    let stack = Stack::homogeneous("L", 1).unwrap();
    let plan = Plan::new(&stack, PlanOptions::baseline()).unwrap();
    let tl = simulate(
        &plan.forward,
        &stack,
        &[t(1.0, 1.0, 1.0)],
        SimOptions::default(),
    )
    .unwrap();
    let doc = render("a <b> & \"c\"", &[("x < y", &tl)]);
    parse(&doc);
    assert!(doc.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
}
