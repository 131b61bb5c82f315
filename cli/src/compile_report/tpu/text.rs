//! The TPU side of a report as `compile-report` prints it: the slice, HBM per device against
//! the chip's, the live peak, libtpu's refusal, the collectives and each layer loop's spans.

use super::{CollectiveSpans, TpuReport};

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl std::fmt::Display for TpuReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "TPU slice         {} ({} devices, {}){}",
            self.topology,
            self.slice_devices,
            self.device_kind,
            match self.gathers_decomposed {
                true => ", whole-slice gathers left to libtpu to decompose",
                false => "",
            }
        )?;
        write!(
            f,
            "HBM per device    arguments {:.1} MiB + outputs {:.1} - aliased {:.1} + temp {:.1} \
             = {:.1} MiB",
            mib(self.arguments),
            mib(self.outputs),
            mib(self.alias),
            mib(self.temp),
            mib(self.total)
        )?;
        match (self.hbm_bytes, self.headroom) {
            (Some(hbm), Some(left)) if left >= 0 => writeln!(
                f,
                " of {:.1} GiB: fits, {:.1} GiB left",
                mib(hbm) / 1024.0,
                mib(left) / 1024.0
            )?,
            (Some(hbm), Some(left)) => writeln!(
                f,
                " of {:.1} GiB: does NOT fit, over by {:.1} GiB",
                mib(hbm) / 1024.0,
                mib(-left) / 1024.0
            )?,
            _ => writeln!(f, " (the chip's HBM is not reported)")?,
        }
        if let Some(p) = &self.live_peak {
            writeln!(
                f,
                "temporaries live {:.1} MiB at most at once (at {}), of the {:.1} MiB allocated",
                mib(p.bytes as i64),
                p.at,
                mib(p.allocation as i64)
            )?;
            for (name, bytes, shape) in &p.largest {
                writeln!(f, "  {:>10.2} MiB  {name}  {shape}", mib(*bytes as i64))?;
            }
        }
        if let Some(why) = &self.out_of_memory {
            writeln!(
                f,
                "the TPU compiler refused the step (the temporaries are those it names, the \
                 arguments and outputs the program's own): {why}"
            )?;
        }
        for c in &self.collectives {
            let kind = match &c.stands_for {
                Some(of) => format!("{} as {of}", c.kind),
                None => c.kind.clone(),
            };
            writeln!(
                f,
                "{:<28}{:>5} {:>4} ({} asynchronous) {:>10.2} MiB written per device",
                kind,
                c.dtype,
                c.count,
                c.asynchronous,
                mib(c.bytes as i64)
            )?;
        }
        writeln!(
            f,
            "\n{:>8}  {:>30}  {:>30}  loop (as the TPU compiler scheduled it)",
            "products", "gathers n/async/overlap span", "scatters n/async/overlap span"
        )?;
        writeln!(
            f,
            "          (span: fewest-most products a collective is in flight across; in\n           \
             brackets, fewest-most compute instructions)"
        )?;
        for l in &self.loops {
            let cell = |c: &CollectiveSpans| {
                format!(
                    "{}/{}/{} span {}-{} ({}-{})",
                    c.count,
                    c.asynchronous,
                    c.overlapping,
                    c.min_span,
                    c.max_span,
                    c.min_compute,
                    c.max_compute
                )
            };
            writeln!(
                f,
                "{:>8}  {:>30}  {:>30}  {}",
                l.products,
                cell(&l.gathers),
                cell(&l.scatters),
                l.label
            )?;
        }
        writeln!(f)
    }
}
