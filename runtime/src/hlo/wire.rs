//! Just enough of the protocol-buffer wire format to walk XLA's `HloModuleProto`: varints,
//! length-delimited fields and the fixed-width ones (skipped). Nothing here knows XLA's
//! messages; [`super`] names the fields it reads.

/// One field of a message: its number and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field<'a> {
    /// Wire type 0.
    Varint(u32, u64),
    /// Wire type 2: a string, bytes, a nested message or a packed repeated scalar.
    Bytes(u32, &'a [u8]),
    /// Wire types 1 and 5, whose values nothing here reads.
    Fixed(u32),
}

/// Reads a varint at `*at`, advancing past it.
pub(super) fn varint(buf: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf
            .get(*at)
            .ok_or_else(|| format!("a varint runs past the end at byte {at}"))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(format!("a varint longer than 10 bytes ends at byte {at}"))
}

/// The fields of one message, in wire order.
pub(super) fn fields(buf: &[u8]) -> Result<Vec<Field<'_>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let key = varint(buf, &mut at)?;
        let number = u32::try_from(key >> 3).map_err(|_| format!("field number {}", key >> 3))?;
        match key & 7 {
            0 => out.push(Field::Varint(number, varint(buf, &mut at)?)),
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                at = at
                    .checked_add(width)
                    .filter(|&end| end <= buf.len())
                    .ok_or_else(|| format!("field {number} runs past the end"))?;
                out.push(Field::Fixed(number));
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut at)?)
                    .map_err(|_| format!("field {number}: length overflows"))?;
                let end = at
                    .checked_add(len)
                    .filter(|&end| end <= buf.len())
                    .ok_or_else(|| format!("field {number}: {len} bytes run past the end"))?;
                out.push(Field::Bytes(number, &buf[at..end]));
                at = end;
            }
            other => return Err(format!("field {number} has wire type {other} (groups)")),
        }
    }
    Ok(out)
}

/// A repeated integer field, packed (one length-delimited run) or not (one varint each).
pub(super) fn repeated_ints(fields: &[Field<'_>], number: u32) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for field in fields {
        match *field {
            // Two's complement: int64's negative values are 10-byte varints.
            Field::Varint(n, v) if n == number => out.push(v as i64),
            Field::Bytes(n, packed) if n == number => {
                let mut at = 0;
                while at < packed.len() {
                    out.push(varint(packed, &mut at)? as i64);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The last occurrence of a string field (protobuf's rule for a repeated scalar), or "".
pub(super) fn string(fields: &[Field<'_>], number: u32) -> Result<String, String> {
    let bytes = fields.iter().rev().find_map(|f| match *f {
        Field::Bytes(n, b) if n == number => Some(b),
        _ => None,
    });
    match bytes {
        None => Ok(String::new()),
        Some(b) => {
            String::from_utf8(b.to_vec()).map_err(|_| format!("field {number} is not UTF-8"))
        }
    }
}

/// The last occurrence of a varint field, or 0.
pub(super) fn int(fields: &[Field<'_>], number: u32) -> u64 {
    fields
        .iter()
        .rev()
        .find_map(|f| match *f {
            Field::Varint(n, v) if n == number => Some(v),
            _ => None,
        })
        .unwrap_or(0)
}

/// Every occurrence of a message (or bytes) field.
pub(super) fn messages<'a>(fields: &[Field<'a>], number: u32) -> Vec<&'a [u8]> {
    fields
        .iter()
        .filter_map(|f| match *f {
            Field::Bytes(n, b) if n == number => Some(b),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-encoded: field 1 varint 150 (the protobuf guide's example), field 2 the string
    /// "hi", field 3 packed [1, 300], field 3 again unpacked 5, a fixed32 field 4.
    #[test]
    fn hand_encoded_fields_read_back() {
        let buf = [
            0x08, 0x96, 0x01, // 1: 150
            0x12, 0x02, b'h', b'i', // 2: "hi"
            0x1a, 0x03, 0x01, 0xac, 0x02, // 3: packed [1, 300]
            0x18, 0x05, // 3: 5
            0x25, 0, 0, 0, 0, // 4: fixed32
        ];
        let f = fields(&buf).unwrap();
        assert_eq!(int(&f, 1), 150);
        assert_eq!(string(&f, 2).unwrap(), "hi");
        assert_eq!(repeated_ints(&f, 3).unwrap(), [1, 300, 5]);
        assert_eq!(f.last(), Some(&Field::Fixed(4)));
        assert_eq!(int(&f, 9), 0);
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        assert!(fields(&[0x12, 0x05, b'a']).is_err());
        assert!(fields(&[0x08]).is_err());
        assert!(fields(&[0x0b]).is_err(), "groups are refused");
        assert!(fields(&[0x25, 0]).is_err());
        assert!(fields(&[0xff; 11]).is_err());
    }
}
