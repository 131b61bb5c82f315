//! The optimized program a plugin compiled, read back from its serialized `HloModuleProto`
//! ([`crate::Executable::optimized_program`]): every computation (the entry, loop bodies and
//! conditions, fused computations, reducers) with each instruction's opcode, result shape and
//! the computations it calls.
//!
//! This is how a claim about what XLA made of a program is checked rather than inferred from
//! what stackscan emitted: that an all-gather moves bf16, how many instructions a loop body
//! holds after fusion, which op kinds dominate a slow compile. Only the fields those questions
//! need are read; the rest of the message is skipped.

mod schedule;
mod wire;

pub use schedule::{ComputationSchedule, ScheduledCollective};

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// `HloInstructionProto.id`.
const INSTRUCTION_ID: u32 = 35;
/// `HloInstructionProto.operand_ids`.
const OPERAND_IDS: u32 = 36;
/// `HloInstructionProto.called_computation_ids`.
const CALLED_COMPUTATION_IDS: u32 = 38;
/// `HloModuleProto.schedule` (an `HloScheduleProto`: field 1 maps a computation id, key 1,
/// to an `InstructionSequence`, value 2, whose field 1 lists instruction ids in order).
const SCHEDULE: u32 = 7;
/// `HloInstructionProto.metadata` (an `OpMetadata`, whose field 2 is the op's name in the
/// program the compiler was given: `call.1/all-gather.16`).
const METADATA: u32 = 7;
/// `HloInstructionProto.backend_config`.
const BACKEND_CONFIG: u32 = 43;
/// `HloInstructionProto.frontend_attributes` (a `FrontendAttributes`, whose field 1 is its
/// map, each entry a message of key 1 and value 2).
const FRONTEND_ATTRIBUTES: u32 = 68;

/// One shape: an array's element type and dimensions, or a tuple of shapes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HloShape {
    /// XLA's `PrimitiveType` number (`F32` 11, `BF16` 16, `TUPLE` 13, …).
    pub element_type: i32,
    /// The array's dimensions (empty for a scalar or a tuple).
    pub dims: Vec<i64>,
    /// A tuple's element shapes.
    pub tuple: Vec<HloShape>,
}

/// XLA's `PrimitiveType` numbers this module names.
pub mod primitive {
    /// The name XLA's HLO text gives an element type (`f32`, `bf16`, …), or its number.
    pub fn name(element_type: i32) -> String {
        match element_type {
            1 => "pred".into(),
            2 => "s8".into(),
            3 => "s16".into(),
            4 => "s32".into(),
            5 => "s64".into(),
            6 => "u8".into(),
            7 => "u16".into(),
            8 => "u32".into(),
            9 => "u64".into(),
            10 => "f16".into(),
            11 => "f32".into(),
            12 => "f64".into(),
            16 => "bf16".into(),
            other => format!("type {other}"),
        }
    }
    /// `F32`.
    pub const F32: i32 = 11;
    /// `BF16`.
    pub const BF16: i32 = 16;
    /// `TUPLE`.
    pub const TUPLE: i32 = 13;
}

impl HloShape {
    /// Bytes of one element of this array type; `None` for a tuple, a token or a type this
    /// module does not size.
    pub fn element_bytes(&self) -> Option<u64> {
        Some(match self.element_type {
            1 | 2 | 6 => 1,       // PRED, S8, U8
            3 | 7 | 10 | 16 => 2, // S16, U16, F16, BF16
            4 | 8 | 11 => 4,      // S32, U32, F32
            5 | 9 | 12 | 15 => 8, // S64, U64, F64, C64
            18 => 16,             // C128
            _ => return None,
        })
    }

    /// Bytes of the whole value: an array's elements, a tuple's parts summed (0 for what
    /// [`HloShape::element_bytes`] does not size).
    pub fn bytes(&self) -> u64 {
        if self.element_type == primitive::TUPLE {
            return self.tuple.iter().map(HloShape::bytes).sum();
        }
        let elements: u64 = self.dims.iter().map(|&d| d.max(0) as u64).product();
        elements * self.element_bytes().unwrap_or(0)
    }

    fn parse(buf: &[u8]) -> std::result::Result<Self, String> {
        let f = wire::fields(buf)?;
        Ok(HloShape {
            element_type: wire::int(&f, 2) as i32,
            dims: wire::repeated_ints(&f, 3)?,
            tuple: wire::messages(&f, 4)
                .into_iter()
                .map(HloShape::parse)
                .collect::<std::result::Result<_, _>>()?,
        })
    }
}

/// One instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HloInstruction {
    /// Its id, unique in the module, what [`operands`](Self::operands) and a schedule name.
    pub id: i64,
    /// Its name in the module (`fusion.12`, `all-gather-start.3`).
    pub name: String,
    /// XLA's opcode (`fusion`, `while`, `all-gather`, `dot`, …).
    pub opcode: String,
    /// Its result shape.
    pub shape: HloShape,
    /// The ids of the computations it calls (a fusion's, a loop's body and condition, a
    /// reduction's reducer).
    pub called: Vec<i64>,
    /// The ids of its operands, in order.
    pub operands: Vec<i64>,
    /// Its frontend attributes (stackscan's loop labels, scheduling tags), in wire order.
    pub frontend_attributes: Vec<(String, String)>,
    /// Its backend configuration, a JSON text on the CPU and GPU compilers ("" when none).
    pub backend_config: String,
    /// The name, in the program the compiler was given, of the op it was made from
    /// (`call.1/all-gather.16`: an all-reduce the compiler built from an all-gather keeps the
    /// gather's name); "" when the compiler kept none.
    pub op_name: String,
}

impl HloInstruction {
    /// The value of frontend attribute `key`.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.frontend_attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A loop's trip count, where XLA's analysis knew it (`known_trip_count` in the backend
    /// configuration it gives a `while`).
    pub fn known_trip_count(&self) -> Option<u64> {
        let key = "\"known_trip_count\":{\"n\":\"";
        let at = self.backend_config.find(key)? + key.len();
        let digits: String = self.backend_config[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    }
}

/// One computation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HloComputation {
    /// Its name.
    pub name: String,
    /// Its id, what [`HloInstruction::called`] refers to.
    pub id: i64,
    /// Its instructions in the module's order.
    pub instructions: Vec<HloInstruction>,
    /// The order the compiler's scheduler gave its instructions (ids), where the module
    /// carries a schedule (accelerator compilers do; a CPU module may not).
    pub schedule: Option<Vec<i64>>,
}

impl HloComputation {
    /// Its instructions in the order they run: the schedule's where there is one, else the
    /// module's (a topological order).
    pub fn in_order(&self) -> Vec<&HloInstruction> {
        match &self.schedule {
            Some(ids) => {
                let by_id: BTreeMap<i64, &HloInstruction> =
                    self.instructions.iter().map(|i| (i.id, i)).collect();
                ids.iter().filter_map(|id| by_id.get(id).copied()).collect()
            }
            None => self.instructions.iter().collect(),
        }
    }
}

/// The optimized module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptimizedModule {
    /// The module's name.
    pub name: String,
    /// The entry computation's name.
    pub entry: String,
    /// Every computation.
    pub computations: Vec<HloComputation>,
}

impl OptimizedModule {
    /// Reads what [`crate::Executable::optimized_program`] returned: `format` `hlo` (an
    /// `HloModuleProto`) or `hlo_with_config` (one wrapped with its compile configuration).
    pub fn parse(format: &str, bytes: &[u8]) -> Result<Self> {
        let fail = |reason: String| Error::OptimizedProgram {
            format: format.to_owned(),
            reason,
        };
        let module = match format {
            "hlo" => bytes,
            "hlo_with_config" => {
                let f = wire::fields(bytes).map_err(fail)?;
                wire::messages(&f, 1)
                    .pop()
                    .ok_or_else(|| fail("no `hlo_module` field".to_owned()))?
            }
            other => return Err(fail(format!("format `{other}` is not one stackscan reads"))),
        };
        Self::parse_module(module).map_err(fail)
    }

    fn parse_module(buf: &[u8]) -> std::result::Result<Self, String> {
        let f = wire::fields(buf)?;
        let mut computations = Vec::new();
        for c in wire::messages(&f, 3) {
            let cf = wire::fields(c)?;
            let mut instructions = Vec::new();
            for i in wire::messages(&cf, 2) {
                let inf = wire::fields(i)?;
                let shape = match wire::messages(&inf, 3).pop() {
                    Some(s) => HloShape::parse(s)?,
                    None => HloShape::default(),
                };
                let mut frontend_attributes = Vec::new();
                for attrs in wire::messages(&inf, FRONTEND_ATTRIBUTES) {
                    for entry in wire::messages(&wire::fields(attrs)?, 1) {
                        let e = wire::fields(entry)?;
                        frontend_attributes.push((wire::string(&e, 1)?, wire::string(&e, 2)?));
                    }
                }
                instructions.push(HloInstruction {
                    id: wire::int(&inf, INSTRUCTION_ID) as i64,
                    operands: wire::repeated_ints(&inf, OPERAND_IDS)?,
                    name: wire::string(&inf, 1)?,
                    opcode: wire::string(&inf, 2)?,
                    shape,
                    called: wire::repeated_ints(&inf, CALLED_COMPUTATION_IDS)?,
                    frontend_attributes,
                    backend_config: wire::string(&inf, BACKEND_CONFIG)?,
                    op_name: match wire::messages(&inf, METADATA).pop() {
                        Some(m) => wire::string(&wire::fields(m)?, 2)?,
                        None => String::new(),
                    },
                });
            }
            computations.push(HloComputation {
                name: wire::string(&cf, 1)?,
                id: wire::int(&cf, 5) as i64,
                instructions,
                schedule: None,
            });
        }
        for schedule in wire::messages(&f, SCHEDULE) {
            for entry in wire::messages(&wire::fields(schedule)?, 1) {
                let e = wire::fields(entry)?;
                let id = wire::int(&e, 1) as i64;
                let mut order = Vec::new();
                for sequence in wire::messages(&e, 2) {
                    order.extend(wire::repeated_ints(&wire::fields(sequence)?, 1)?);
                }
                if let Some(c) = computations.iter_mut().find(|c| c.id == id) {
                    c.schedule = Some(order);
                }
            }
        }
        let module = OptimizedModule {
            name: wire::string(&f, 1)?,
            entry: wire::string(&f, 2)?,
            computations,
        };
        if module
            .computations
            .iter()
            .all(|c| c.instructions.is_empty())
        {
            return Err("the module has no instructions".to_owned());
        }
        if module.instructions().any(|i| i.opcode.is_empty()) {
            return Err("an instruction has no opcode".to_owned());
        }
        Ok(module)
    }

    /// Every instruction of every computation.
    pub fn instructions(&self) -> impl Iterator<Item = &HloInstruction> {
        self.computations.iter().flat_map(|c| &c.instructions)
    }

    /// The computations that are a fusion's body (called by a `fusion` instruction): what
    /// a count of the program's own instructions leaves out, as XLA's HLO text prints them
    /// apart.
    pub fn fused_computations(&self) -> std::collections::BTreeSet<i64> {
        self.instructions()
            .filter(|i| i.opcode == "fusion")
            .flat_map(|i| i.called.iter().copied())
            .collect()
    }

    /// How many instructions of each opcode the module holds outside fused computations,
    /// and (second) inside them.
    pub fn opcode_counts(&self) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
        let fused = self.fused_computations();
        let (mut outer, mut inner) = (BTreeMap::new(), BTreeMap::new());
        for c in &self.computations {
            let counts = if fused.contains(&c.id) {
                &mut inner
            } else {
                &mut outer
            };
            for i in &c.instructions {
                *counts.entry(i.opcode.clone()).or_insert(0) += 1;
            }
        }
        (outer, inner)
    }

    /// Bytes the collectives of the module write, by opcode (asynchronous starts counted as
    /// their collective: `all-gather-start` as `all-gather`) and element type: the buffers
    /// XLA allocates for gathered weights, scattered gradients and exchanged tokens, after its
    /// own passes (which may combine collectives or change their element type). A start's
    /// shape is `(operands, results)`; its results are counted.
    pub fn collective_bytes(&self) -> BTreeMap<(String, i32), u64> {
        const KINDS: [&str; 5] = [
            "all-gather",
            "reduce-scatter",
            "all-reduce",
            "all-to-all",
            "collective-permute",
        ];
        fn add(out: &mut BTreeMap<(String, i32), u64>, kind: &str, s: &HloShape) {
            if s.element_type == primitive::TUPLE {
                s.tuple.iter().for_each(|t| add(out, kind, t));
            } else if s.element_bytes().is_some() {
                *out.entry((kind.to_owned(), s.element_type)).or_insert(0) += s.bytes();
            }
        }
        let mut out = BTreeMap::new();
        for kind in KINDS {
            for i in self.collectives(kind) {
                match i.shape.tuple.last() {
                    Some(results) if i.opcode.ends_with("-start") => add(&mut out, kind, results),
                    _ => add(&mut out, kind, &i.shape),
                }
            }
        }
        out
    }

    /// The instructions whose opcode is `opcode` or its asynchronous start (`all-gather` finds
    /// `all-gather-start` too), outside fused computations.
    pub fn collectives<'a>(&'a self, opcode: &'a str) -> impl Iterator<Item = &'a HloInstruction> {
        let fused = self.fused_computations();
        let start = format!("{opcode}-start");
        self.computations
            .iter()
            .filter(move |c| !fused.contains(&c.id))
            .flat_map(|c| &c.instructions)
            .filter(move |i| i.opcode == opcode || i.opcode == start)
    }
}

#[cfg(test)]
mod tests;
