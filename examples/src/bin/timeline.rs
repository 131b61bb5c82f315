//! `timeline --model <name> --hardware <profile> --chips N --out DIR`: predicted step time,
//! prefetch off vs on, and the timelines written as SVG and JSON; `timeline --reference`
//! predicts the reference's configurations beside the published figures.

use std::process::ExitCode;

use clap::Parser;
use stackscan_examples::reference;
use stackscan_examples::timeline::{ASSUMPTIONS, TimelineArgs, run};

fn main() -> ExitCode {
    let args = TimelineArgs::parse();
    if args.reference {
        return match reference::predict_all(&args.hardware, args.batch, &args.out) {
            Ok(rows) => {
                print!("{}", reference::table(&rows));
                println!("on {}; assumptions: {ASSUMPTIONS}", args.hardware);
                println!("timelines under {}", args.out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("timeline: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match run(&args) {
        Ok(s) => {
            let (off, on) = (s.off.step_seconds(), s.on.step_seconds());
            println!(
                "{} on {} chips of {}: predicted step {:.2} ms off, {:.2} ms on ({:+.1} %)",
                args.model,
                args.chips,
                args.hardware,
                off * 1e3,
                on * 1e3,
                (on / off - 1.0) * 100.0
            );
            for (name, p) in [("off", &s.off), ("on", &s.on)] {
                println!(
                    "  {name}: forward {:.2} ms (exposed {:.2}), backward {:.2} ms (exposed {:.2}), outer parts and optimizer {:.2} ms",
                    p.forward.total * 1e3,
                    p.forward.exposed_communication * 1e3,
                    p.backward.total * 1e3,
                    p.backward.exposed_communication * 1e3,
                    p.outer * 1e3
                );
            }
            for f in &s.files {
                println!("  wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("timeline: {e}");
            ExitCode::FAILURE
        }
    }
}
