//! The graph IR: functions of nodes over typed values, with nested functions as regions.
//!
//! A [`Function`] is isolated: its nodes read only its own parameters and earlier results.
//! Loops hold their bodies as nested functions, and the builder turns any outer value a body
//! uses into an explicit parameter, so every pass (autodiff, lowering, emission) sees plain
//! dataflow.

use crate::dtype::DType;
use crate::types::TensorType;

mod live;
mod scan_parts;

pub use scan_parts::ScanParts;

/// Index of a value in its [`Function`]'s value table.
pub type ValueId = usize;

/// A function: parameters, nodes in dependency order, results.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// Name used when emitted.
    pub name: String,
    /// Type of every value, indexed by [`ValueId`].
    pub values: Vec<TensorType>,
    /// Parameter values, in order.
    pub params: Vec<ValueId>,
    /// Nodes, each reading only parameters and results of earlier nodes.
    pub nodes: Vec<Node>,
    /// Result values, in order.
    pub results: Vec<ValueId>,
}

impl Function {
    /// Parameter types, in order.
    pub fn param_types(&self) -> Vec<TensorType> {
        self.params
            .iter()
            .map(|&v| self.values[v].clone())
            .collect()
    }

    /// Result types, in order.
    pub fn result_types(&self) -> Vec<TensorType> {
        self.results
            .iter()
            .map(|&v| self.values[v].clone())
            .collect()
    }

    /// Number of nodes, counting those inside nested regions.
    pub fn deep_node_count(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| {
                1 + n
                    .op
                    .regions()
                    .iter()
                    .map(|r| r.deep_node_count())
                    .sum::<usize>()
            })
            .sum()
    }
}

/// One operation applied to operands, defining result values.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// What the node computes.
    pub op: Op,
    /// Operand values.
    pub operands: Vec<ValueId>,
    /// Result values.
    pub results: Vec<ValueId>,
    /// Frontend attributes XLA reads on the emitted op (`mhlo.frontend_attributes`), such as
    /// the scheduling tags of an FSDP step; empty for most nodes. See
    /// [`Scope::with_frontend_attributes`](crate::Scope::with_frontend_attributes).
    pub attributes: Vec<(String, String)>,
}

impl Op {
    /// Whether a node of this op takes the frontend attributes of the scope it is built in.
    /// Loops carry their own (and hold nodes that carry theirs); constants have no operands,
    /// so XLA may share or move them between tagged regions, where a tag would be wrong.
    pub fn takes_scope_attributes(&self) -> bool {
        !matches!(
            self,
            Op::While { .. }
                | Op::Case { .. }
                | Op::Scan { .. }
                | Op::Constant(_)
                | Op::Iota { .. }
        )
    }
}

/// Elementwise functions of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `e^x`
    Exp,
    /// `ln x`
    Log,
    /// `ln(1 + x)`
    Log1p,
    /// `tanh x`
    Tanh,
    /// `1 / (1 + e^-x)`
    Logistic,
    /// `√x`
    Sqrt,
    /// `1 / √x`
    Rsqrt,
    /// `|x|`
    Abs,
    /// `sign x` (0 at 0)
    Sign,
    /// `sin x`
    Sin,
    /// `cos x`
    Cos,
}

/// Elementwise functions of two operands of equal type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a · b`
    Mul,
    /// `a / b`
    Div,
    /// `a^b`
    Pow,
    /// `max(a, b)`
    Max,
    /// `min(a, b)`
    Min,
}

/// Comparison directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Comparison {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// Reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReduceKind {
    /// Sum.
    Sum,
    /// Maximum.
    Max,
}

/// `dot_general` dimension numbers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct DotDims {
    /// Batch dimensions of the left operand.
    pub lhs_batch: Vec<usize>,
    /// Batch dimensions of the right operand.
    pub rhs_batch: Vec<usize>,
    /// Contracting dimensions of the left operand.
    pub lhs_contract: Vec<usize>,
    /// Contracting dimensions of the right operand.
    pub rhs_contract: Vec<usize>,
}

/// How the VJP of a `dot_general` forms the left operand's cotangent, which contracts the
/// result's cotangent with the right operand over the right operand's free dimensions.
///
/// Both give the same values; they differ in the program. For `x · W` (`W: [d, f]`) the
/// cotangent of `x` is `g · Wᵀ`: [`InPlace`](LhsCotangent::InPlace) contracts `g` with `W`
/// over `f` through the dot's dimension numbers, while
/// [`TransposedRhs`](LhsCotangent::TransposedRhs) first writes `Wᵀ: [f, d]` and then takes
/// the plain product `g · Wᵀ`. The second is what a matmul kernel does that only takes its
/// right operand in `[contract, free]` layout (the grouped-matmul option a reference calls
/// `dlhs_transpose_rhs` switches it to the first); a program that wants to be measured or
/// compared against such a kernel asks for it per product. The choice shapes the emitted
/// program; XLA's CPU compiler may undo it, folding a transpose that only a product reads
/// back into that product's dimension numbers (the Llama's optimized step, every product
/// asking for `TransposedRhs`, had the same transposes as with `InPlace`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LhsCotangent {
    /// Contract with the right operand where it lies: no copy of it in the backward.
    #[default]
    InPlace,
    /// Materialise the right operand transposed to `[batch…, free…, contracting…]` (one
    /// `stablehlo.transpose`; none when it already has that layout) and contract the
    /// cotangent with that copy's leading non-batch dimensions.
    TransposedRhs,
}

/// `triangular_solve` options: solve `op(A) X = B` (left) or `X op(A) = B` (right).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TriangularSolve {
    /// `A` on the left.
    pub left_side: bool,
    /// `A` is lower triangular.
    pub lower: bool,
    /// Assume ones on `A`'s diagonal.
    pub unit_diagonal: bool,
    /// Use `Aᵀ`.
    pub transpose_a: bool,
}

/// The mesh axis a collective runs over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Axis {
    /// Axis name, as in the program's mesh.
    pub name: String,
    /// Number of devices along it.
    pub size: usize,
}

/// A constant's values, widened to 64 bits; the element type is the node's result type.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// Floating-point values (f32, bf16, f64 results).
    Float(Vec<f64>),
    /// Integer values (i32, i64 results).
    Int(Vec<i64>),
    /// Booleans.
    Bool(Vec<bool>),
}

impl Literal {
    /// Number of values held (1 for a splat).
    pub fn len(&self) -> usize {
        match self {
            Literal::Float(v) => v.len(),
            Literal::Int(v) => v.len(),
            Literal::Bool(v) => v.len(),
        }
    }

    /// Whether no values are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the literal kind can hold values of `dtype`.
    pub fn fits(&self, dtype: DType) -> bool {
        match self {
            Literal::Float(_) => dtype.is_float(),
            Literal::Int(_) => matches!(dtype, DType::I32 | DType::I64),
            Literal::Bool(_) => dtype == DType::Bool,
        }
    }
}

/// The op table: every operation of the IR, with its attributes.
///
/// Each op's type rule and StableHLO text live in its family's module (`crate::family`), its
/// derivative in the module of the same name under `autodiff::rules`; `infer`, the writer and
/// `autodiff::rules` dispatch to them with one exhaustive `match` each, so adding an op is one
/// variant, its family's entries and one arm in each dispatcher.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// A constant: one value (splat) or one per element.
    Constant(Literal),
    /// `0, 1, 2, …` along `dim`; the result type is part of the node.
    Iota {
        /// The counting dimension.
        dim: usize,
    },
    /// Elementwise unary function.
    Unary(UnaryOp),
    /// Elementwise binary function.
    Binary(BinaryOp),
    /// Elementwise comparison to `bool`.
    Compare(Comparison),
    /// `pred ? on_true : on_false`, elementwise.
    Select,
    /// Element type conversion to the result's element type.
    Convert,
    /// Identity whose derivative is zero.
    StopGradient,
    /// Broadcast: operand dimension `i` becomes result dimension `dims[i]`.
    BroadcastInDim {
        /// Where each operand dimension goes.
        dims: Vec<usize>,
    },
    /// Same elements, new dimensions (row-major).
    Reshape,
    /// Permute dimensions: result dimension `i` is operand dimension `perm[i]`.
    Transpose {
        /// The permutation.
        perm: Vec<usize>,
    },
    /// Static strided slice.
    Slice {
        /// First index per dimension.
        start: Vec<i64>,
        /// One past the last index per dimension.
        limit: Vec<i64>,
        /// Step per dimension.
        stride: Vec<i64>,
    },
    /// Slice of static size at scalar `i32` start indices (operands: tensor, one index per dim).
    DynamicSlice {
        /// Size per dimension.
        sizes: Vec<i64>,
    },
    /// Write `update` at scalar `i32` start indices (operands: tensor, update, indices).
    DynamicUpdateSlice,
    /// Join along a dimension.
    Concatenate {
        /// The dimension.
        dim: usize,
    },
    /// Edge and interior padding with a scalar value (operands: tensor, padding value).
    Pad {
        /// Padding before each dimension.
        low: Vec<i64>,
        /// Padding after each dimension.
        high: Vec<i64>,
        /// Padding between elements of each dimension.
        interior: Vec<i64>,
    },
    /// Reduce over dimensions.
    Reduce {
        /// Sum or max.
        kind: ReduceKind,
        /// Reduced dimensions, ascending.
        axes: Vec<usize>,
    },
    /// `exp(x − max x) / Σ exp(x − max x)` along a dimension. One op rather than its
    /// composite so that its VJP, `y · (g − Σ g·y)`, needs only the result `y`: the
    /// composite's derived VJP kept the exponentials beside the probabilities (a second
    /// attention-score-sized buffer at the backward's peak). Emission writes the composite
    /// (the lowering pass that also turns scans into loops).
    Softmax {
        /// The normalised dimension.
        axis: usize,
    },
    /// Inclusive prefix sum along a dimension.
    Cumsum {
        /// The dimension.
        axis: usize,
        /// Sum from the end instead.
        reverse: bool,
    },
    /// Generalised matrix product.
    DotGeneral {
        /// Dimension numbers.
        dims: DotDims,
        /// How the VJP forms the left operand's cotangent (the program only: the values
        /// are the same either way).
        lhs_cotangent: LhsCotangent,
    },
    /// Gather slices of the operand along `axis` at integer indices (operands: tensor, indices).
    /// Result shape: `operand[..axis] ++ indices ++ operand[axis+1..]`.
    Take {
        /// The gathered dimension.
        axis: usize,
    },
    /// Transpose of [`Op::Take`]: add `updates` into the operand at the indices (operands:
    /// tensor, indices, updates).
    ScatterAdd {
        /// The scattered dimension.
        axis: usize,
    },
    /// The `k` largest values along the last dimension, descending, and their `i32` indices.
    TopK {
        /// How many.
        k: usize,
    },
    /// Solve a triangular system (operands: `A`, `B`).
    TriangularSolve(TriangularSolve),
    /// Pass values through unchanged while forbidding XLA to move work across this point.
    OptimizationBarrier,
    /// A general loop: `while cond(carry) { carry = body(carry) }`. Not differentiable.
    While {
        /// `carry → bool[]`.
        cond: Box<Function>,
        /// `carry → carry`.
        body: Box<Function>,
        /// Frontend attributes for XLA, e.g. `skip-simplify-while-loops_trip-count-one`.
        frontend_attributes: Vec<(String, String)>,
    },
    /// `stablehlo.case`: operands `[index, args…]`; runs `branches[index]` on `args` (the
    /// last branch when `index` is out of range) and returns its results. Every branch takes
    /// all of `args` and returns the same types. Not differentiable.
    Case {
        /// `args → results`, one function per branch.
        branches: Vec<Function>,
        /// Frontend attributes for XLA (a label a report on the compiled program reads).
        frontend_attributes: Vec<(String, String)>,
    },
    /// `jax.lax.scan`: operands `[carry…, xs…, consts…]`; results `[carry…, ys…]`. The body
    /// maps `[carry…, x…, consts…]` to `[carry…, y…]`, where `x` is one slice of `xs` along
    /// dimension 0 and `ys` stacks the `y`s.
    Scan {
        /// The step function.
        body: Box<Function>,
        /// Number of steps.
        length: usize,
        /// Carried values.
        num_carry: usize,
        /// Scanned inputs.
        num_xs: usize,
        /// Run from the last slice to the first.
        reverse: bool,
        /// Frontend attributes of the emitted loop.
        frontend_attributes: Vec<(String, String)>,
    },
    /// Concatenate every device's operand along `dim`.
    AllGather {
        /// Gathered dimension.
        dim: usize,
        /// The mesh axis.
        axis: Axis,
    },
    /// Sum every device's operand and keep this device's slice along `dim`.
    ReduceScatter {
        /// Scattered dimension.
        dim: usize,
        /// The mesh axis.
        axis: Axis,
    },
    /// Sum every device's operand (`psum`).
    AllReduce {
        /// The mesh axis.
        axis: Axis,
    },
    /// Split along `split_dim`, exchange the pieces, concatenate along `concat_dim`.
    AllToAll {
        /// Dimension split into one piece per device.
        split_dim: usize,
        /// Dimension the received pieces are joined along.
        concat_dim: usize,
        /// The mesh axis.
        axis: Axis,
    },
    /// This device's index along the mesh axis, as `i32[]`.
    AxisIndex {
        /// The mesh axis.
        axis: Axis,
    },
}

impl Op {
    /// The op's one spelled name: errors name it, and an op written as itself is emitted as
    /// `stablehlo.<name>` (ops written as other StableHLO ops, like `take` as `gather`, spell
    /// those in their family).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Constant(_) => "constant",
            Op::Iota { .. } => "iota",
            Op::Unary(u) => match u {
                UnaryOp::Neg => "negate",
                UnaryOp::Exp => "exponential",
                UnaryOp::Log => "log",
                UnaryOp::Log1p => "log_plus_one",
                UnaryOp::Tanh => "tanh",
                UnaryOp::Logistic => "logistic",
                UnaryOp::Sqrt => "sqrt",
                UnaryOp::Rsqrt => "rsqrt",
                UnaryOp::Abs => "abs",
                UnaryOp::Sign => "sign",
                UnaryOp::Sin => "sine",
                UnaryOp::Cos => "cosine",
            },
            Op::Binary(b) => match b {
                BinaryOp::Add => "add",
                BinaryOp::Sub => "subtract",
                BinaryOp::Mul => "multiply",
                BinaryOp::Div => "divide",
                BinaryOp::Pow => "power",
                BinaryOp::Max => "maximum",
                BinaryOp::Min => "minimum",
            },
            Op::Compare(_) => "compare",
            Op::Select => "select",
            Op::Convert => "convert",
            Op::StopGradient => "stop_gradient",
            Op::BroadcastInDim { .. } => "broadcast_in_dim",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::DynamicSlice { .. } => "dynamic_slice",
            Op::DynamicUpdateSlice => "dynamic_update_slice",
            Op::Concatenate { .. } => "concatenate",
            Op::Pad { .. } => "pad",
            Op::Reduce { .. } => "reduce",
            Op::Softmax { .. } => "softmax",
            Op::Cumsum { .. } => "cumsum",
            Op::DotGeneral { .. } => "dot_general",
            Op::Take { .. } => "take",
            Op::ScatterAdd { .. } => "scatter_add",
            Op::TopK { .. } => "top_k",
            Op::TriangularSolve(_) => "triangular_solve",
            Op::OptimizationBarrier => "optimization_barrier",
            Op::While { .. } => "while",
            Op::Case { .. } => "case",
            Op::Scan { .. } => "scan",
            Op::AllGather { .. } => "all_gather",
            Op::ReduceScatter { .. } => "reduce_scatter",
            Op::AllReduce { .. } => "all_reduce",
            Op::AllToAll { .. } => "all_to_all",
            Op::AxisIndex { .. } => "axis_index",
        }
    }

    /// Nested functions held by the op.
    pub fn regions(&self) -> Vec<&Function> {
        match self {
            Op::While { cond, body, .. } => vec![cond, body],
            Op::Case { branches, .. } => branches.iter().collect(),
            Op::Scan { body, .. } => vec![body],
            _ => Vec::new(),
        }
    }
}
