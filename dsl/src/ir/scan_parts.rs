//! [`ScanParts`]: a scan's fields, taken apart in one place.

use super::{Function, Op};
use crate::error::Error;

/// The fields of an [`Op::Scan`], borrowed, so the passes that treat scans specially (the
/// scan lowering, autodiff's forward replay and its reverse scan) take a scan apart in one
/// place and pass it around as one value instead of six loose arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScanParts<'a> {
    /// The step function.
    pub body: &'a Function,
    /// Number of steps.
    pub length: usize,
    /// Carried values.
    pub num_carry: usize,
    /// Scanned inputs.
    pub num_xs: usize,
    /// Run from the last slice to the first.
    pub reverse: bool,
    /// Frontend attributes of the emitted loop.
    pub frontend_attributes: &'a [(String, String)],
}

impl<'a> ScanParts<'a> {
    /// The parts of `op`, if it is a scan.
    pub fn of(op: &'a Op) -> Option<ScanParts<'a>> {
        match op {
            Op::Scan {
                body,
                length,
                num_carry,
                num_xs,
                reverse,
                frontend_attributes,
            } => Some(ScanParts {
                body,
                length: *length,
                num_carry: *num_carry,
                num_xs: *num_xs,
                reverse: *reverse,
                frontend_attributes,
            }),
            _ => None,
        }
    }

    /// The same scan around another step function: a pass that rewrites the body (lowering
    /// nested scans, saving residuals) keeps every other field as it was.
    pub fn with_body(&self, body: Function) -> Op {
        Op::Scan {
            body: Box::new(body),
            length: self.length,
            num_carry: self.num_carry,
            num_xs: self.num_xs,
            reverse: self.reverse,
            frontend_attributes: self.frontend_attributes.to_vec(),
        }
    }

    /// A scan's operands (or anything laid out like them) split as `[carry…]`, `[xs…]`,
    /// `[consts…]`. Panics if there are fewer than `num_carry + num_xs`, which a node that
    /// passed shape inference never has.
    pub fn split_operands<'t, T>(&self, operands: &'t [T]) -> (&'t [T], &'t [T], &'t [T]) {
        let (carry, rest) = operands.split_at(self.num_carry);
        let (xs, consts) = rest.split_at(self.num_xs);
        (carry, xs, consts)
    }
}

impl<'a> TryFrom<&'a Op> for ScanParts<'a> {
    type Error = Error;

    /// The parts of a scan; any other op is an internal error naming it.
    fn try_from(op: &'a Op) -> Result<ScanParts<'a>, Error> {
        ScanParts::of(op).ok_or_else(|| Error::invalid(op.name(), "not a scan"))
    }
}
