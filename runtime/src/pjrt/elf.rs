//! A check of a shared library's ELF headers against the file's size, before `dlopen` maps it.
//!
//! The dynamic loader maps a library's segments straight from the file. When the file is
//! shorter than its headers say (an interrupted copy or download), the mapping extends past
//! the end of the file and the first touch of that memory kills the process with SIGBUS, inside
//! `dlopen`, before any error can be returned. Reading the headers first turns that into a
//! typed error that says what is wrong with the file.
//!
//! Only what the loader relies on is checked: the identification bytes, the file type, the
//! program-header table and every segment's file extent, and the section-header table. Both
//! ELF classes and byte orders are read; whether the machine matches is left to `dlopen`,
//! whose own message says so.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// `ET_DYN`: a shared object (or position-independent executable).
const ET_DYN: u16 = 3;
/// Program header types whose file extent the loader reads.
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;

/// Why a file cannot be a loadable shared library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NotLoadable(pub String);

/// The layout facts of one ELF class and byte order.
#[derive(Clone, Copy)]
struct Layout {
    wide: bool,
    little: bool,
}

impl Layout {
    fn u16(self, b: &[u8], at: usize) -> Option<u64> {
        let s: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
        Some(u64::from(if self.little {
            u16::from_le_bytes(s)
        } else {
            u16::from_be_bytes(s)
        }))
    }

    fn u32(self, b: &[u8], at: usize) -> Option<u64> {
        let s: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(u64::from(if self.little {
            u32::from_le_bytes(s)
        } else {
            u32::from_be_bytes(s)
        }))
    }

    fn u64(self, b: &[u8], at: usize) -> Option<u64> {
        let s: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
        Some(if self.little {
            u64::from_le_bytes(s)
        } else {
            u64::from_be_bytes(s)
        })
    }

    /// An address-sized field: 8 bytes in ELF64, 4 in ELF32.
    fn word(self, b: &[u8], at: usize) -> Option<u64> {
        if self.wide {
            self.u64(b, at)
        } else {
            self.u32(b, at)
        }
    }

    fn header_size(self) -> usize {
        if self.wide { 64 } else { 52 }
    }

    fn program_header_size(self) -> u64 {
        if self.wide { 56 } else { 32 }
    }

    fn section_header_size(self) -> u64 {
        if self.wide { 64 } else { 40 }
    }
}

/// Checks that the file at `path` is a complete ELF shared object.
pub(crate) fn check_shared_object(path: &Path) -> Result<(), NotLoadable> {
    let mut file =
        std::fs::File::open(path).map_err(|e| NotLoadable(format!("it cannot be opened: {e}")))?;
    let size = file
        .metadata()
        .map_err(|e| NotLoadable(format!("its size cannot be read: {e}")))?
        .len();
    let mut header = [0u8; 64];
    let read = read_up_to(&mut file, &mut header)
        .map_err(|e| NotLoadable(format!("it cannot be read: {e}")))?;
    let header = &header[..read];
    if header.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(NotLoadable(format!(
            "it is not an ELF shared library (no ELF magic in its first bytes; {size} bytes)"
        )));
    }
    let layout = match (header.get(4), header.get(5)) {
        (Some(1), Some(1)) => Layout {
            wide: false,
            little: true,
        },
        (Some(1), Some(2)) => Layout {
            wide: false,
            little: false,
        },
        (Some(2), Some(1)) => Layout {
            wide: true,
            little: true,
        },
        (Some(2), Some(2)) => Layout {
            wide: true,
            little: false,
        },
        _ => {
            return Err(NotLoadable(
                "its ELF class or byte order is invalid".to_owned(),
            ));
        }
    };
    let truncated = |what: &str, end: u128| {
        NotLoadable(format!(
            "the file is truncated: {what} ends at byte {end} but the file has {size} bytes"
        ))
    };
    if header.len() < layout.header_size() {
        return Err(truncated("the ELF header", layout.header_size() as u128));
    }
    let field = |at32: usize, at64: usize, width: u8| -> u64 {
        let at = if layout.wide { at64 } else { at32 };
        let v = match width {
            2 => layout.u16(header, at),
            4 => layout.u32(header, at),
            _ => layout.word(header, at),
        };
        // In range: the header's length was checked just above.
        v.unwrap_or(0)
    };
    let e_type = field(16, 16, 2);
    if e_type != u64::from(ET_DYN) {
        return Err(NotLoadable(format!(
            "it is an ELF file of type {e_type}, not a shared library (type {ET_DYN})"
        )));
    }
    let (phoff, shoff) = (field(28, 32, 0), field(32, 40, 0));
    let (phentsize, phnum) = (field(42, 54, 2), field(44, 56, 2));
    let (shentsize, shnum) = (field(46, 58, 2), field(48, 60, 2));

    if phnum == 0 {
        return Err(NotLoadable("it has no program headers".to_owned()));
    }
    if phentsize < layout.program_header_size() {
        return Err(NotLoadable(format!(
            "its program headers are {phentsize} bytes each, fewer than the {} the format needs",
            layout.program_header_size()
        )));
    }
    let table_end = u128::from(phoff) + u128::from(phentsize) * u128::from(phnum);
    if table_end > u128::from(size) {
        return Err(truncated("the program-header table", table_end));
    }
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    file.seek(SeekFrom::Start(phoff))
        .and_then(|_| file.read_exact(&mut table))
        .map_err(|e| NotLoadable(format!("its program headers cannot be read: {e}")))?;
    let mut loads = 0;
    for (i, entry) in table.chunks_exact(phentsize as usize).enumerate() {
        let p_type = layout.u32(entry, 0).unwrap_or(0) as u32;
        if p_type != PT_LOAD && p_type != PT_DYNAMIC {
            continue;
        }
        loads += usize::from(p_type == PT_LOAD);
        let (offset, filesz) = if layout.wide {
            (layout.u64(entry, 8), layout.u64(entry, 32))
        } else {
            (layout.u32(entry, 4), layout.u32(entry, 16))
        };
        let end = u128::from(offset.unwrap_or(0)) + u128::from(filesz.unwrap_or(0));
        if end > u128::from(size) {
            let kind = if p_type == PT_LOAD {
                "loadable"
            } else {
                "dynamic"
            };
            return Err(truncated(&format!("its {kind} segment {i}"), end));
        }
    }
    if loads == 0 {
        return Err(NotLoadable("it has no loadable segments".to_owned()));
    }
    if shoff != 0 && shnum != 0 {
        if shentsize < layout.section_header_size() {
            return Err(NotLoadable(format!(
                "its section headers are {shentsize} bytes each, fewer than the {} the format needs",
                layout.section_header_size()
            )));
        }
        let end = u128::from(shoff) + u128::from(shentsize) * u128::from(shnum);
        if end > u128::from(size) {
            return Err(truncated("the section-header table", end));
        }
    }
    Ok(())
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_up_to(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 little-endian shared object: the header, one program-header table of
    /// `segments` (type, offset, file size) and `extra` bytes of contents.
    fn elf(
        segments: &[(u32, u64, u64)],
        section_table: Option<(u64, u16)>,
        extra: usize,
    ) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[16..18].copy_from_slice(&ET_DYN.to_le_bytes());
        b[18..20].copy_from_slice(&62u16.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        if let Some((off, n)) = section_table {
            b[40..48].copy_from_slice(&off.to_le_bytes());
            b[58..60].copy_from_slice(&64u16.to_le_bytes());
            b[60..62].copy_from_slice(&n.to_le_bytes());
        }
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&(segments.len() as u16).to_le_bytes());
        for &(ty, off, filesz) in segments {
            let mut p = [0u8; 56];
            p[..4].copy_from_slice(&ty.to_le_bytes());
            p[8..16].copy_from_slice(&off.to_le_bytes());
            p[32..40].copy_from_slice(&filesz.to_le_bytes());
            b.extend_from_slice(&p);
        }
        b.extend(std::iter::repeat_n(0u8, extra));
        b
    }

    fn check_bytes(name: &str, bytes: &[u8]) -> Result<(), NotLoadable> {
        let dir = std::env::temp_dir().join(format!("stackscan-elf-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lib.so");
        std::fs::write(&path, bytes).unwrap();
        let r = check_shared_object(&path);
        std::fs::remove_dir_all(dir).unwrap();
        r
    }

    #[test]
    fn a_complete_object_passes() {
        let b = elf(&[(PT_LOAD, 0, 120 + 100)], None, 100);
        assert_eq!(check_bytes("ok", &b), Ok(()));
    }

    #[test]
    fn a_segment_past_the_end_is_truncation() {
        let b = elf(&[(PT_LOAD, 0, 100), (PT_LOAD, 4096, 4096)], None, 100);
        let err = check_bytes("seg", &b).unwrap_err().0;
        assert!(
            err.contains("truncated") && err.contains("segment 1"),
            "{err}"
        );
        assert!(
            err.contains("8192") && err.contains(&b.len().to_string()),
            "{err}"
        );
    }

    #[test]
    fn a_section_table_past_the_end_is_truncation() {
        let b = elf(&[(PT_LOAD, 0, 100)], Some((1000, 30)), 100);
        let err = check_bytes("sec", &b).unwrap_err().0;
        assert!(err.contains("section-header table"), "{err}");
    }

    #[test]
    fn headers_cut_short_are_truncation() {
        let b = elf(&[(PT_LOAD, 0, 100)], None, 0);
        let err = check_bytes("cut", &b[..100]).unwrap_err().0;
        assert!(err.contains("program-header table"), "{err}");
        let err = check_bytes("tiny", &b[..20]).unwrap_err().0;
        assert!(err.contains("ELF header"), "{err}");
    }

    #[test]
    fn huge_header_fields_do_not_overflow() {
        let mut b = elf(&[(PT_LOAD, u64::MAX, u64::MAX)], None, 0);
        assert!(check_bytes("huge", &b).unwrap_err().0.contains("truncated"));
        b[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(
            check_bytes("phoff", &b)
                .unwrap_err()
                .0
                .contains("truncated")
        );
    }

    #[test]
    fn other_files_are_named_for_what_they_are() {
        let err = check_bytes("text", b"#!/bin/sh\necho hi\n").unwrap_err().0;
        assert!(err.contains("not an ELF"), "{err}");
        let mut exec = elf(&[(PT_LOAD, 0, 100)], None, 100);
        exec[16] = 2;
        let err = check_bytes("exec", &exec).unwrap_err().0;
        assert!(err.contains("type 2"), "{err}");
        let err = check_bytes("empty", b"").unwrap_err().0;
        assert!(err.contains("not an ELF"), "{err}");
    }

    #[test]
    fn this_test_binary_reads_as_complete() {
        // The running test executable is a position-independent ELF (type DYN on Linux).
        let exe = std::env::current_exe().unwrap();
        if let Err(e) = check_shared_object(&exe) {
            assert!(e.0.contains("type 2"), "{}", e.0);
        }
    }
}
