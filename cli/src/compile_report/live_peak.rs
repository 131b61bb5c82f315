//! The most temporary bytes a TPU program holds at once, read from libtpu's buffer
//! assignment (`compile-report --dump DIR`).
//!
//! The compiled memory statistics give the size of the temporary allocation, which is how
//! libtpu packed its temporaries, not what the program needs: values whose live ranges do
//! not overlap may still sit side by side. The dump has both halves of the answer: each
//! value of the temporary allocation with its offset and size
//! (`*after_optimizations-buffer-assignment.txt`) and each value's live range over the
//! flattened schedule (`*after_optimizations-live-range.txt`). The peak is the largest
//! number of allocation bytes covered by live values at one position (values sharing bytes
//! counted once). It is what the prefetch's memory is bounded by: one more gathered layer
//! live at once, where the allocation may grow by more.
//!
//! The loop-carried values, which libtpu's buffer assignment marks `(phi)`, count like any
//! other: the weights a step gathers for the next and the gradient it defers are carries, so a
//! reading without them misses exactly what prefetch and deferral hold.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use super::CompileReportError;

/// The busiest point of the temporaries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LivePeak {
    /// The temporary allocation's size in bytes (libtpu's packing).
    pub allocation: u64,
    /// The most of it live at one position of the schedule.
    pub bytes: u64,
    /// The instruction at that position.
    pub at: String,
    /// The largest values live there, largest first (at most [`SHOWN`]): name, bytes and
    /// shape.
    pub largest: Vec<(String, u64, String)>,
}

/// How many of the values live at the peak a report lists.
pub const SHOWN: usize = 8;

/// The live peak of the compile dumped in `dir`.
pub fn read(dir: &Path) -> Result<LivePeak, CompileReportError> {
    let ranges = std::fs::read_to_string(one(dir, "after_optimizations-live-range.txt")?)
        .map_err(|e| dump_error(dir, &e.to_string()))?;
    let buffers = std::fs::read_to_string(one(dir, "after_optimizations-buffer-assignment.txt")?)
        .map_err(|e| dump_error(dir, &e.to_string()))?;
    of(&buffers, &ranges).ok_or_else(|| dump_error(dir, "no temporary allocation in it"))
}

/// The live peak from a buffer assignment's text and its live ranges' text.
pub(crate) fn of(buffers: &str, ranges: &str) -> Option<LivePeak> {
    let (sequence, live) = live_ranges(ranges);
    let (allocation, values) = temporaries(buffers)?;
    // Per position, the values live there.
    let mut at: HashMap<usize, Vec<&Value>> = HashMap::new();
    for v in &values {
        let key = if v.name.contains('{') {
            v.name.clone()
        } else {
            format!("{}{{}}", v.name)
        };
        let Some(&(first, last)) = live.get(&key) else {
            continue;
        };
        for t in first..=last {
            at.entry(t).or_default().push(v);
        }
    }
    let spans = |live: &[&Value]| -> Vec<(u64, u64)> {
        live.iter().map(|v| (v.offset, v.offset + v.size)).collect()
    };
    let (bytes, position) = at
        .iter()
        .map(|(&t, live)| (covered(&spans(live)), t))
        .max_by_key(|&(bytes, t)| (bytes, std::cmp::Reverse(t)))
        .unwrap_or((0, 0));
    let mut largest: Vec<&Value> = at.get(&position).cloned().unwrap_or_default();
    largest.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.name.cmp(&b.name)));
    Some(LivePeak {
        allocation,
        bytes,
        at: sequence.get(&position).cloned().unwrap_or_default(),
        largest: largest
            .iter()
            .take(SHOWN)
            .map(|v| (v.name.clone(), v.size, v.shape.clone()))
            .collect(),
    })
}

/// The one file in `dir` whose name ends with `suffix`.
fn one(dir: &Path, suffix: &str) -> Result<std::path::PathBuf, CompileReportError> {
    let entries = std::fs::read_dir(dir).map_err(|e| dump_error(dir, &e.to_string()))?;
    let found: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    match found.as_slice() {
        [path] => Ok(path.clone()),
        _ => Err(dump_error(
            dir,
            &format!("expected one `*{suffix}`, found {}", found.len()),
        )),
    }
}

fn dump_error(dir: &Path, why: &str) -> CompileReportError {
    CompileReportError::Config(format!("libtpu's dump in {}: {why}", dir.display()))
}

/// Instruction names by schedule position, and each value's first and last position.
fn live_ranges(text: &str) -> (HashMap<usize, String>, HashMap<String, (usize, usize)>) {
    #[derive(PartialEq)]
    enum Section {
        None,
        Sequence,
        Ranges,
    }
    let (mut sequence, mut ranges, mut section) = (HashMap::new(), HashMap::new(), Section::None);
    for line in text.lines() {
        if line.contains("InstructionSequence") {
            section = Section::Sequence;
            continue;
        }
        if line.contains("BufferLiveRange") {
            section = Section::Ranges;
            continue;
        }
        let Some((name, rest)) = line.trim().split_once(':') else {
            continue;
        };
        match section {
            Section::Sequence => {
                if let Ok(position) = name.parse::<usize>() {
                    sequence.insert(position, rest.trim().to_owned());
                }
            }
            Section::Ranges => {
                let span = rest.split_once('-').and_then(|(a, b)| {
                    Some((
                        a.trim().parse::<usize>().ok()?,
                        b.trim().parse::<usize>().ok()?,
                    ))
                });
                if let Some(span) = span {
                    ranges.insert(name.to_owned(), span);
                }
            }
            Section::None => {}
        }
    }
    (sequence, ranges)
}

/// A value of the temporary allocation.
struct Value {
    name: String,
    size: u64,
    offset: u64,
    shape: String,
}

/// The largest temporary allocation (`preallocated-temp`): its size and its values.
fn temporaries(text: &str) -> Option<(u64, Vec<Value>)> {
    let mut allocations: Vec<(u64, Vec<Value>)> = Vec::new();
    let mut in_temp = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("allocation ") {
            in_temp = rest.contains("preallocated-temp");
            if in_temp {
                let size = rest
                    .split_once("size ")
                    .and_then(|(_, s)| s.split(',').next())
                    .and_then(|s| s.trim().parse().ok())?;
                allocations.push((size, Vec::new()));
            }
            continue;
        }
        if !in_temp {
            continue;
        }
        // ` value: <12 fusion.3 @0> (size=1024,offset=2048): f32[256]{0}`
        let Some(value) = line.strip_prefix(" value: <") else {
            continue;
        };
        let name = value.split_whitespace().nth(1)?.to_owned();
        let shape = value.split_once("): ").map_or("", |(_, s)| s).to_owned();
        let field = |key: &str| -> Option<u64> {
            let (_, rest) = value.split_once(key)?;
            rest.split([',', ')']).next()?.parse().ok()
        };
        if let (Some(size), Some(offset), Some(last)) =
            (field("size="), field("offset="), allocations.last_mut())
        {
            last.1.push(Value {
                name,
                size,
                offset,
                shape,
            });
        }
    }
    allocations.into_iter().max_by_key(|(size, _)| *size)
}

/// Bytes covered by the union of `[start, end)` spans.
fn covered(spans: &[(u64, u64)]) -> u64 {
    let mut sorted = spans.to_vec();
    sorted.sort_unstable();
    let (mut total, mut current): (u64, Option<(u64, u64)>) = (0, None);
    for (a, b) in sorted {
        current = match current {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + current.map_or(0, |(s, e)| e - s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three values of a 300-byte allocation: `a` [0, 100) live at 0–1, `b` [100, 200) at
    /// 1–2 (loop-carried, `(phi)`), `c` [0, 100) (sharing `a`'s bytes) at 2–3. The busiest
    /// position is 1 or 2, 200 bytes each (100 if `b` were left out); the first is reported.
    const BUFFERS: &str = "\
allocation 0: size 64, parameter 0, shape |f32[16]| at ShapeIndex {}:
 value: <1 p @0> (size=64,offset=0): f32[16]{0}
allocation 1: size 300, preallocated-temp:
 value: <2 a @0> (size=100,offset=0): f32[25]{0}
 value: <3 b (phi) @0> (size=100,offset=100): f32[25]{0}
 value: <4 c @0> (size=100,offset=0): f32[25]{0}
";
    const RANGES: &str = "\
BufferLiveRange:
  a{}:0-1
  b{}:1-2
  c{}:2-3
InstructionSequence:
  0:a
  1:b
  2:c
  3:ROOT
";

    #[test]
    fn the_peak_counts_shared_bytes_once_and_ignores_other_allocations() {
        let peak = of(BUFFERS, RANGES).unwrap();
        assert_eq!(
            peak,
            LivePeak {
                allocation: 300,
                bytes: 200,
                at: "b".into(),
                largest: vec![
                    ("a".into(), 100, "f32[25]{0}".into()),
                    ("b".into(), 100, "f32[25]{0}".into())
                ],
            }
        );
        assert_eq!(covered(&[(0, 100), (50, 150), (200, 210)]), 160);
        assert!(of("allocation 0: size 8, parameter 0:\n", RANGES).is_none());
    }
}
