//! XLA's slow-compile notice, recognised in the stream of the plugin's log bytes.
//!
//! When one compilation runs past two minutes, a timer thread in every XLA plugin logs, at
//! ERROR level and as one write, a block of four lines:
//!
//! ```text
//! E1205 12:00:00.000000  4242 slow_operation_alarm.cc:73]
//! ********************************
//! [Compiling module jit_step] Very slow compile? If you want to file a bug, run with …
//! ********************************
//! ```
//!
//! It is advice to XLA's developers, not a fault of the user's run, and no plugin option turns
//! it off; the threshold that hides it (`TF_CPP_MIN_LOG_LEVEL=3`) would also hide every other
//! ERROR line, such as a collective that waits on a stuck peer. [`AlarmFilter`] drops exactly
//! that block, and absl's note that logging was not initialised (printed once by every plugin
//! at its first log line), and passes every other byte through unchanged and in order.

/// What marks the block's first line: the alarm's source file.
const SOURCE: &[u8] = b"slow_operation_alarm.cc:";

/// The one line absl prints when a plugin logs before anything initialised absl's logging
/// (no host program of a PJRT plugin does): a note about absl, not about the run.
const ABSL_NOTICE: &[u8] =
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR";

/// Lines libtpu prints on every load without a TPU (a compile-only run): no topology of the
/// machine's own to look up, and a notice that its text could not be remapped to huge pages.
/// Neither is about the run. Matched on their text, after any log prefix.
pub const LIBTPU_NOTICES: [&[u8]; 2] = [
    b"Failed to find host bounds for accelerator type: ",
    b"hugepage_text.cc:",
];

/// Whether `line` is one of [`LIBTPU_NOTICES`].
pub fn is_libtpu_notice(line: &[u8]) -> bool {
    line.starts_with(LIBTPU_NOTICES[0])
        || (line.starts_with(b"E") && contains(line, LIBTPU_NOTICES[1]) && contains(line, b"RAW:"))
}

/// Drops XLA's slow-compile block from a byte stream fed in arbitrary pieces.
///
/// Complete lines are examined one at a time. A line that could open the block (the alarm's
/// source file with nothing after the log prefix) is held with the lines after it until the
/// block is either complete, and dropped, or shown not to be the block, and passed on. Bytes
/// after the last newline are passed on at once (a progress bar redrawn with `\r` is not
/// delayed), unless they could be the start of the block's first line (an ERROR line whose
/// prefix has not arrived in full).
#[derive(Debug, Default)]
pub struct AlarmFilter {
    /// Bytes of a line not yet complete, held because they may open the block.
    partial: Vec<u8>,
    /// The complete lines of a block that may be the alarm, in order.
    held: Vec<Vec<u8>>,
}

impl AlarmFilter {
    /// Feeds the next `input` bytes; appends what should be shown to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.partial.extend_from_slice(input);
        let mut start = 0;
        while let Some(end) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let line = self.partial[start..start + end + 1].to_vec();
            self.line(line, out);
            start += end + 1;
        }
        self.partial.drain(..start);
        if self.held.is_empty() && !may_open_block(&self.partial) {
            out.append(&mut self.partial);
        }
    }

    /// The end of the stream: whatever is still held is shown.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.release(out);
        out.append(&mut self.partial);
    }

    fn line(&mut self, line: Vec<u8>, out: &mut Vec<u8>) {
        if self.held.is_empty() {
            if line.trim_ascii_end() == ABSL_NOTICE || is_libtpu_notice(&line) {
                return;
            }
            if opens_block(&line) {
                self.held.push(line);
            } else {
                out.extend_from_slice(&line);
            }
            return;
        }
        self.held.push(line);
        let last = &self.held[self.held.len() - 1];
        match self.held.len() {
            2 if is_rule(last) => {}
            3 if contains(&last.to_ascii_lowercase(), b"slow compile?") => {}
            4 if is_rule(last) => self.held.clear(),
            _ => self.release(out),
        }
    }

    fn release(&mut self, out: &mut Vec<u8>) {
        for line in self.held.drain(..) {
            out.extend_from_slice(&line);
        }
    }
}

/// The block's first line: the log prefix naming the alarm's source, then nothing.
fn opens_block(line: &[u8]) -> bool {
    let Some(at) = find(line, SOURCE) else {
        return false;
    };
    let rest = &line[at..];
    match rest.iter().position(|&b| b == b']') {
        Some(close) => rest[close + 1..].iter().all(u8::is_ascii_whitespace),
        None => false,
    }
}

/// Whether the start of a line may still grow into a line the filter drops: the block's first
/// line or a notice.
fn may_open_block(start: &[u8]) -> bool {
    let notice = |n: &[u8]| n.starts_with(start) || start.starts_with(n);
    if !start.is_empty() && (notice(ABSL_NOTICE) || notice(LIBTPU_NOTICES[0])) {
        return true;
    }
    match start.iter().position(|&b| b == b']') {
        // An ERROR line's prefix, held until it shows which file logged it.
        None => start.first() == Some(&b'E'),
        Some(close) => {
            (contains(start, SOURCE) && start[close + 1..].iter().all(u8::is_ascii_whitespace))
                || contains(&start[..close], LIBTPU_NOTICES[1])
        }
    }
}

/// A line of asterisks between the block's text and the log's other lines.
fn is_rule(line: &[u8]) -> bool {
    let trimmed = line.trim_ascii();
    !trimmed.is_empty() && trimmed.iter().all(|&b| b == b'*')
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALARM: &str = "E1205 12:00:00.123456    4242 slow_operation_alarm.cc:73] \n\
        ********************************\n\
        [Compiling module jit_step] Very slow compile? If you want to file a bug, run with \
        envvar XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.\n\
        ********************************\n";

    /// Feeds `input` in pieces of `piece` bytes and returns what is shown.
    fn filtered(input: &str, piece: usize) -> String {
        let mut filter = AlarmFilter::default();
        let mut out = Vec::new();
        for chunk in input.as_bytes().chunks(piece) {
            filter.feed(chunk, &mut out);
        }
        filter.finish(&mut out);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn drops_the_slow_compile_block_and_nothing_else() {
        let before = "E1205 12:00:00.000001 4242 collective_ops_utils.cc:10] stuck\n";
        let after = "step 1 loss 2.5\n";
        let input = format!("{before}{ALARM}{after}");
        for piece in [1, 2, 7, 64, input.len()] {
            assert_eq!(
                filtered(&input, piece),
                format!("{before}{after}"),
                "{piece}"
            );
        }
    }

    #[test]
    fn drops_absls_note_about_its_own_logging() {
        let input = format!(
            "{}\nI0000 pjrt_c_api_cpu_internal.cc:59] 4 devices\n",
            std::str::from_utf8(ABSL_NOTICE).expect("ascii")
        );
        for piece in [1, 10, input.len()] {
            assert_eq!(
                filtered(&input, piece),
                "I0000 pjrt_c_api_cpu_internal.cc:59] 4 devices\n"
            );
        }
        // Only the whole line: a line that merely starts like it is kept.
        assert_eq!(filtered("WARNING: All log\n", 3), "WARNING: All log\n");
    }

    #[test]
    fn keeps_the_debug_build_wording_out_too() {
        let debug = ALARM.replace("Very slow compile?", "Slow compile?");
        assert_eq!(filtered(&format!("{debug}done\n"), 5), "done\n");
    }

    #[test]
    fn passes_other_alarms_and_look_alikes_through() {
        // Another alarm of the same file with a message on its first line.
        let one_line =
            "E1205 12:00:00.1 1 slow_operation_alarm.cc:73] Constant folding is slow\nnext\n";
        assert_eq!(filtered(one_line, 3), one_line);
        // The header with an unrelated block after it.
        let other = "E1205 12:00:00.1 1 slow_operation_alarm.cc:73] \n\
            ********************************\nSomething else\n****\nnext\n";
        assert_eq!(filtered(other, 4), other);
        // The header, then not a rule.
        let short = "E1205 12:00:00.1 1 slow_operation_alarm.cc:73] \nplain\n";
        assert_eq!(filtered(short, 100), short);
        // A block cut short by the end of the stream is shown.
        let cut = &ALARM[..ALARM.len() - 10];
        assert_eq!(filtered(cut, 9), cut);
    }

    #[test]
    fn drops_libtpus_notices_without_a_tpu() {
        let input = "Failed to find host bounds for accelerator type: WARNING: could not \
                     determine TPU accelerator type\n\
                     E1206 23:33:07.100220   24683 hugepage_text.cc:373] RAW: File offset \
                     incorrectly aligned for file-backed THP\n\
                     error: unknown topology\n\
                     E1206 23:33:07.100220   24683 other.cc:1] hugepage_text.cc: mentioned\n";
        for piece in [1, 7, 1000] {
            assert_eq!(
                filtered(input, piece),
                "error: unknown topology\n\
                 E1206 23:33:07.100220   24683 other.cc:1] hugepage_text.cc: mentioned\n"
            );
        }
    }

    #[test]
    fn shows_a_partial_line_at_once() {
        let mut filter = AlarmFilter::default();
        let mut out = Vec::new();
        filter.feed(b"\rstep 3/10", &mut out);
        assert_eq!(out, b"\rstep 3/10");
        out.clear();
        // An ERROR line's prefix is held until it shows which file logged it.
        filter.feed(b"E1 slow_operation_alarm.cc:7", &mut out);
        assert!(out.is_empty());
        filter.feed(b"3] x", &mut out);
        assert_eq!(out, b"E1 slow_operation_alarm.cc:73] x");
        out.clear();
        filter.feed(b"\nE1 other.cc:", &mut out);
        assert_eq!(out, b"\n");
        filter.feed(b"9] y", &mut out);
        assert_eq!(out, b"\nE1 other.cc:9] y");
    }
}
