//! The walk that turns a graph into a [`Cost`], one node at a time.

use crate::error::{Error, Result};
use crate::ir::{DotDims, Function, Node, Op};
use crate::types::TensorType;

use super::count::{Collective, Cost, PerDType, SIDE_BUCKETS, side_bucket};
use super::fusion;

/// The marker XLA reads to keep a single-trip loop; the one `while` whose trip count we know.
const TRIP_COUNT_ONE: &str = "skip-simplify-while-loops_trip-count-one";

/// The cost of one run of `f`, loop bodies included (see the module docs for `while`).
///
/// Fails only on a malformed graph: a node naming a value `f` does not hold, or dot
/// dimensions outside their operand.
pub fn of(f: &Function) -> Result<Cost> {
    of_with(f, &Accounting::default())
}

/// How to count what the graph alone cannot say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accounting {
    /// A mixture-of-experts layer written over all its experts at once: a `dot_general`
    /// with a batch dimension of size `experts` is an expert product, and only `active` of
    /// every `experts` of its FLOPs are counted, since a token runs through `active` experts
    /// (the weights of all of them are still gathered, which the FLOPs do not touch).
    pub experts: Option<ActiveExperts>,
    /// The kind's routed experts split over an expert mesh axis: their weights are gathered
    /// only over the rest of the mesh, and tokens are exchanged (see [`super::exchange`]).
    pub expert_parallel: Option<super::ExpertParallel>,
}

/// Routed experts and how many each token uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveExperts {
    /// Routed experts per layer (`n_routed_experts`).
    pub experts: u64,
    /// Experts each token is routed to (`num_experts_per_tok`).
    pub active: u64,
}

/// The cost of one run of `f` under `accounting`.
pub fn of_with(f: &Function, accounting: &Accounting) -> Result<Cost> {
    // A softmax is counted as the composite emission writes ([`Op::Softmax`]).
    let expanded = crate::lower::expand_softmax(f)?;
    let f = &expanded;
    let live = f.live_nodes();
    let mut cost: Cost = f
        .nodes
        .iter()
        .zip(&live)
        .filter(|&(_, &live)| live)
        .map(|(n, _)| node_cost(f, n, accounting))
        .sum::<Result<Cost>>()?;
    let fused = fusion::traffic(f, &live, fusion::Rule::Shared);
    cost.hbm_bytes += fused.other;
    cost.dot_bytes += fused.dots;
    cost.kernels += fused.kernels;
    // Products are boundaries under both rules, so their traffic is the same.
    let single = fusion::traffic(f, &live, fusion::Rule::SingleConsumer);
    cost.single_consumer_hbm_bytes += single.other;
    cost.single_consumer_kernels += single.kernels;
    Ok(cost)
}

fn node_cost(f: &Function, node: &Node, accounting: &Accounting) -> Result<Cost> {
    let op = &node.op;
    let types = |ids: &[usize]| -> Result<Vec<&TensorType>> {
        ids.iter()
            .map(|&v| {
                f.values.get(v).ok_or_else(|| {
                    Error::invalid(op.name(), format!("value %{v} is not in `{}`", f.name))
                })
            })
            .collect()
    };
    let operands = types(&node.operands)?;
    let results = types(&node.results)?;
    let operand = |i: usize| {
        operands.get(i).copied().ok_or_else(|| {
            Error::invalid(
                op.name(),
                format!("expected operand {i}, got {}", operands.len()),
            )
        })
    };
    let result = || {
        results
            .first()
            .copied()
            .ok_or_else(|| Error::invalid(op.name(), "expected a result"))
    };
    let bytes = |t: &TensorType| t.size_in_bytes() as u64;
    let elements = |t: &TensorType| t.num_elements() as u64;

    let vector_flops = match op {
        Op::Scan { body, length, .. } => {
            return Ok(of_with(body, accounting)? * *length as u64);
        }
        Op::While {
            cond,
            body,
            frontend_attributes,
        } => {
            let once = frontend_attributes
                .iter()
                .any(|(k, v)| k == TRIP_COUNT_ONE && v == "true");
            return Ok(if once {
                of_with(body, accounting)? + of_with(cond, accounting)? * 2
            } else {
                Cost {
                    unknown_trip_loops: 1,
                    ..Cost::default()
                }
            });
        }
        // One branch runs; which, the index says at run time: the costliest is counted.
        Op::Case { branches, .. } => {
            let mut costliest = Cost::default();
            for b in branches {
                let c = of_with(b, accounting)?;
                if c.flops() > costliest.flops() {
                    costliest = c;
                }
            }
            return Ok(costliest);
        }
        Op::DotGeneral { dims, .. } => {
            let (lhs, rhs) = (operand(0)?, operand(1)?);
            let mut flops = dot_flops(lhs, rhs, dims)?;
            if let Some(e) = accounting.experts {
                let routed = dims
                    .lhs_batch
                    .iter()
                    .any(|&d| lhs.dims.get(d).is_some_and(|&n| n as u64 == e.experts));
                if routed && e.experts > 0 {
                    flops =
                        (u128::from(flops) * u128::from(e.active) / u128::from(e.experts)) as u64;
                }
            }
            let mut by_side = [0; SIDE_BUCKETS];
            by_side[side_bucket(dot_side(lhs, rhs, dims))] = flops;
            return Ok(Cost {
                matrix_flops: PerDType::one(lhs.dtype, flops),
                matrix_flops_by_side: by_side,
                ..Cost::default()
            });
        }
        Op::TriangularSolve(_) => {
            let (a, b) = (operand(0)?, operand(1)?);
            let n = a.dims.last().map_or(0, |&d| d.max(0) as u64);
            let mut by_side = [0; SIDE_BUCKETS];
            by_side[side_bucket(n)] = n * elements(b);
            return Ok(Cost {
                matrix_flops: PerDType::one(a.dtype, n * elements(b)),
                matrix_flops_by_side: by_side,
                ..Cost::default()
            });
        }
        Op::AllGather { axis, .. } => {
            let s = operand(0)?;
            let n = axis.size as u64;
            let sent = n.saturating_sub(1) * bytes(s);
            return Ok(Cost::collective_only(
                Collective::AllGather,
                PerDType::one(s.dtype, sent),
            ));
        }
        Op::ReduceScatter { axis, .. } => {
            // The result is this device's S/n slice, so (n−1)·S/n is exact in its bytes.
            let r = result()?;
            let n = axis.size as u64;
            let sent = n.saturating_sub(1) * bytes(r);
            return Ok(Cost::collective_only(
                Collective::ReduceScatter,
                PerDType::one(r.dtype, sent),
            ));
        }
        Op::AllReduce { axis } | Op::AllToAll { axis, .. } => {
            let s = operand(0)?;
            let n = (axis.size as u64).max(1);
            let (kind, rounds) = match op {
                Op::AllReduce { .. } => (Collective::AllReduce, 2),
                _ => (Collective::AllToAll, 1),
            };
            let sent = rounds * (n - 1) * bytes(s) / n;
            return Ok(Cost::collective_only(kind, PerDType::one(s.dtype, sent)));
        }
        Op::Reshape | Op::StopGradient | Op::OptimizationBarrier => return Ok(Cost::default()),
        Op::Compare(_) => PerDType::one(operand(0)?.dtype, elements(result()?)),
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Convert => {
            let r = result()?;
            PerDType::one(r.dtype, elements(r))
        }
        // `of_with` walks softmax's composite (expanded first), so none reaches here.
        Op::Softmax { .. } => {
            return Err(Error::invalid(
                "softmax",
                "the cost model counts softmax's composite; expand it before the walk",
            ));
        }
        Op::Reduce { .. } | Op::Cumsum { .. } | Op::TopK { .. } => {
            let x = operand(0)?;
            PerDType::one(result()?.dtype, elements(x))
        }
        Op::ScatterAdd { .. } => PerDType::one(result()?.dtype, elements(operand(2)?)),
        Op::Constant(_)
        | Op::Iota { .. }
        | Op::BroadcastInDim { .. }
        | Op::Transpose { .. }
        | Op::Slice { .. }
        | Op::DynamicSlice { .. }
        | Op::DynamicUpdateSlice
        | Op::Concatenate { .. }
        | Op::Pad { .. }
        | Op::Take { .. }
        | Op::AxisIndex { .. } => PerDType::default(),
    };
    let moved = |ts: &[&TensorType]| -> PerDType {
        ts.iter().fold(PerDType::default(), |p, t| {
            p + PerDType::one(t.dtype, bytes(t))
        })
    };
    Ok(Cost {
        vector_flops,
        bytes_read: moved(&operands),
        bytes_written: moved(&results),
        ..Cost::default()
    })
}

/// The smaller of a product's output sides `M` and `N` (batch and contraction left out): on a
/// CPU a product with few rows (a layer's tokens at a small batch) fills its blocked kernel's
/// panels poorly and runs well below the rate of a square one, while a short contraction
/// (a weight gradient's `K` of tokens) costs little. Call only after [`dot_flops`] has
/// checked the dimension numbers.
fn dot_side(lhs: &TensorType, rhs: &TensorType, dims: &DotDims) -> u64 {
    let free = |t: &TensorType, batch: &[usize], contract: &[usize]| -> u64 {
        (0..t.rank())
            .filter(|d| !batch.contains(d) && !contract.contains(d))
            .map(|d| t.dims[d].max(0) as u64)
            .product()
    };
    let m = free(lhs, &dims.lhs_batch, &dims.lhs_contract);
    let n = free(rhs, &dims.rhs_batch, &dims.rhs_contract);
    m.min(n)
}

/// `2·B·M·N·K`: the left operand holds `B·M·K` elements, and `N` is what the right operand
/// adds beyond the batch and contracting dimensions it shares with the left.
fn dot_flops(lhs: &TensorType, rhs: &TensorType, dims: &DotDims) -> Result<u64> {
    let in_range = |ds: &[usize], t: &TensorType| ds.iter().all(|&d| d < t.rank());
    if !in_range(&dims.lhs_batch, lhs)
        || !in_range(&dims.lhs_contract, lhs)
        || !in_range(&dims.rhs_batch, rhs)
        || !in_range(&dims.rhs_contract, rhs)
    {
        return Err(Error::invalid(
            "dot_general",
            format!("dimension numbers {dims:?} do not fit {lhs} and {rhs}"),
        ));
    }
    let rhs_free: u64 = (0..rhs.rank())
        .filter(|d| !dims.rhs_batch.contains(d) && !dims.rhs_contract.contains(d))
        .map(|d| rhs.dims[d].max(0) as u64)
        .product();
    Ok(2 * lhs.num_elements() as u64 * rhs_free)
}
