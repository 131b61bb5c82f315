//! Ops that make values from nothing: `constant` and `iota`, and the literal text every
//! constant the writer makes (reduction seeds, for one) goes through.
//!
//! Neither has operands, so neither has a derivative to speak of: their VJP is empty.

use std::fmt::{self, Write as _};

use crate::dtype::DType;
use crate::emit::text::{OpLine, Site, Writer, signature};
use crate::error::{Error, Result};
use crate::family::operands::{Operands, check_axis};
use crate::ir::{Literal, Op};
use crate::types::TensorType;

pub(crate) fn infer_constant(a: &Operands<'_>, lit: &Literal) -> Result<Vec<TensorType>> {
    a.exactly::<0>()?;
    let t = a.target()?;
    if !lit.fits(t.dtype) {
        return Err(Error::invalid(
            a.op,
            format!("{lit:?} cannot hold {}", t.dtype),
        ));
    }
    if lit.len() != 1 && lit.len() != t.num_elements() {
        return Err(Error::invalid(
            a.op,
            format!(
                "{} values for {t} ({} elements)",
                lit.len(),
                t.num_elements()
            ),
        ));
    }
    if let (Literal::Int(v), DType::I32) = (lit, t.dtype)
        && let Some(bad) = v.iter().find(|&&x| i32::try_from(x).is_err())
    {
        return Err(Error::invalid(a.op, format!("{bad} does not fit {t}")));
    }
    Ok(vec![t])
}

pub(crate) fn infer_iota(a: &Operands<'_>, dim: usize) -> Result<Vec<TensorType>> {
    a.exactly::<0>()?;
    let t = a.target()?;
    check_axis(a.op, dim, &t)?;
    Ok(vec![t])
}

pub(crate) fn write_constant(w: &mut Writer, s: &Site<'_>, lit: &Literal) -> fmt::Result {
    let ty = &s.f.values[s.node.results[0]];
    w.simple(s, &value_props(lit, ty))
}

/// Writes `lhs = constant` of `lit` at type `ty`, for constants the writer makes itself.
pub(crate) fn write_literal(
    w: &mut Writer,
    depth: usize,
    lhs: &str,
    lit: Literal,
    ty: &TensorType,
) -> fmt::Result {
    let props = value_props(&lit, ty);
    w.op(
        depth,
        OpLine {
            lhs,
            name: Op::Constant(lit).name(),
            props: &props,
            types: &signature(&[], std::slice::from_ref(ty)),
            ..OpLine::default()
        },
    )
}

fn value_props(lit: &Literal, ty: &TensorType) -> String {
    format!("value = {} : {ty}", literal_text(lit, ty))
}

pub(crate) fn write_iota(w: &mut Writer, s: &Site<'_>, dim: usize) -> fmt::Result {
    w.simple(s, &iota_props(dim))
}

/// Writes `lhs = iota` along `dim` of type `ty`, for iotas the writer makes itself.
pub(crate) fn write_iota_of(
    w: &mut Writer,
    depth: usize,
    lhs: &str,
    dim: usize,
    ty: &TensorType,
) -> fmt::Result {
    w.op(
        depth,
        OpLine {
            lhs,
            name: Op::Iota { dim }.name(),
            props: &iota_props(dim),
            types: &signature(&[], std::slice::from_ref(ty)),
            ..OpLine::default()
        },
    )
}

fn iota_props(dim: usize) -> String {
    format!("iota_dimension = {dim} : i64")
}

/// Zero of a type: the identity of `add`.
pub(crate) fn zero(dtype: DType) -> Literal {
    match dtype {
        DType::I32 | DType::I64 => Literal::Int(vec![0]),
        DType::Bool => Literal::Bool(vec![false]),
        _ => Literal::Float(vec![0.0]),
    }
}

/// The identity of `max` for a type: −∞ for floats, the minimum for integers.
pub(crate) fn lowest(dtype: DType) -> Literal {
    match dtype {
        DType::I32 => Literal::Int(vec![i64::from(i32::MIN)]),
        DType::I64 => Literal::Int(vec![i64::MIN]),
        DType::Bool => Literal::Bool(vec![false]),
        _ => Literal::Float(vec![f64::NEG_INFINITY]),
    }
}

/// MLIR text of a float constant: decimal when it round-trips, else the bit pattern.
fn float_text(v: f64, dtype: DType) -> String {
    // Whether the value is finite in the target type: 1e39 is an f64 but infinite in f32.
    let narrowed = match dtype {
        DType::F64 => v,
        DType::BF16 => f64::from(bf16_value(v as f32)),
        _ => f64::from(v as f32),
    };
    if !narrowed.is_finite() {
        return match dtype {
            DType::F64 => format!("0x{:016X}", v.to_bits()),
            DType::BF16 => format!("0x{:04X}", bf16_bits(v as f32)),
            _ => format!("0x{:08X}", (v as f32).to_bits()),
        };
    }
    let mut s = if dtype == DType::F64 {
        format!("{v:?}")
    } else {
        format!("{:?}", v as f32)
    };
    if !s.contains('.') {
        match s.find('e') {
            Some(p) => s.insert_str(p, ".0"),
            None => s.push_str(".0"),
        }
    }
    s
}

/// The f32 value of the bfloat16 nearest to `f`.
fn bf16_value(f: f32) -> f32 {
    f32::from_bits(u32::from(bf16_bits(f)) << 16)
}

/// bfloat16 bits of an f32, rounded to nearest even.
fn bf16_bits(f: f32) -> u16 {
    if f.is_nan() {
        return 0x7FC0;
    }
    let bits = f.to_bits();
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7FFF + lsb) >> 16) as u16
}

/// `dense<…>` of a literal: the value for a splat, little-endian hex bytes otherwise.
fn literal_text(lit: &Literal, ty: &TensorType) -> String {
    let splat = lit.len() == 1;
    match lit {
        Literal::Float(v) if splat => format!("dense<{}>", float_text(v[0], ty.dtype)),
        Literal::Int(v) if splat => format!("dense<{}>", v[0]),
        Literal::Bool(v) if splat => format!("dense<{}>", v[0]),
        _ => {
            let mut hex = String::from("0x");
            let mut push = |bytes: &[u8]| {
                for b in bytes {
                    let _ = write!(hex, "{b:02X}");
                }
            };
            match lit {
                Literal::Float(v) => v.iter().for_each(|&x| match ty.dtype {
                    DType::F64 => push(&x.to_le_bytes()),
                    DType::BF16 => push(&bf16_bits(x as f32).to_le_bytes()),
                    _ => push(&(x as f32).to_le_bytes()),
                }),
                Literal::Int(v) => v.iter().for_each(|&x| match ty.dtype {
                    DType::I64 => push(&x.to_le_bytes()),
                    _ => push(&(x as i32).to_le_bytes()),
                }),
                Literal::Bool(v) => v.iter().for_each(|&x| push(&[u8::from(x)])),
            }
            format!("dense<\"{hex}\">")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_always_have_a_point_or_are_hex() {
        assert_eq!(float_text(1.0, DType::F32), "1.0");
        assert_eq!(float_text(1e-10, DType::F32), "1.0e-10");
        assert_eq!(float_text(-2.5, DType::F64), "-2.5");
        assert_eq!(float_text(f64::NEG_INFINITY, DType::F32), "0xFF800000");
        assert_eq!(float_text(f64::INFINITY, DType::BF16), "0x7F80");
        // Finite in f64, infinite once narrowed.
        assert_eq!(float_text(-1e39, DType::F32), "0xFF800000");
        assert_eq!(float_text(3.4e38, DType::BF16), "0x7F80");
        assert_eq!(float_text(3.0e38, DType::F32), "3.0e38");
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_bits(1.0), 0x3F80);
        // 1 + 2^-8 lies exactly between two bf16 values; ties go to the even one (1.0).
        assert_eq!(bf16_bits(1.0 + 1.0 / 256.0), 0x3F80);
        assert_eq!(bf16_bits(1.0 + 3.0 / 256.0), 0x3F82);
    }
}
