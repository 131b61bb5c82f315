//! Replaying a function node by node into another scope: the one walk behind inlining, the
//! scan lowering and autodiff's forward pass.
//!
//! Each of those passes copies a [`Function`]'s nodes, in order, into a [`Scope`] under
//! construction, mapping the source's value ids to tensors of the target; they differ only in
//! what a few nodes become (a scan turns into a `while`, or into a scan that also saves its
//! carries). So the walk is written once, in [`replay`], and a pass is a [`Replay`] hook that
//! decides one node at a time, falling back on [`copy`] for the nodes it leaves alone. Going
//! through the builder means every replayed node is checked again by shape inference.
//!
//! [`Scope::inline`] is the walk with no special case:
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//!
//! let g = Scope::new("square");
//! let x = g.param(TensorType::new(DType::F32, [3]));
//! let square = g.finish(&[x.mul(&x)?])?;
//!
//! let f = Scope::new("main");
//! let y = f.param(TensorType::new(DType::F32, [3]));
//! let out = f.inline(&square, &[y])?;
//! assert_eq!(f.finish(&out)?.nodes.len(), 1);
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::collections::HashMap;
use std::ops::Index;

use crate::builder::{Scope, Tensor};
use crate::error::{Error, Result};
use crate::ir::{Function, Node, ValueId};

/// What a pass makes of each node during a [`replay`].
pub(crate) trait Replay {
    /// The results in `s` of node `at` of `f`, whose operands are already replayed as
    /// `operands`. They must have the node's result types, since later nodes read them in its
    /// place. The default copies the node unchanged.
    fn node(
        &mut self,
        s: &Scope,
        f: &Function,
        at: usize,
        operands: &[&Tensor],
    ) -> Result<Vec<Tensor>> {
        copy(s, f, &f.nodes[at], operands)
    }
}

/// Applies `node` of `f` unchanged in `s` on `operands`, passing the node's own result type
/// as the target for the ops whose result is not a function of their operands.
pub(crate) fn copy(
    s: &Scope,
    f: &Function,
    node: &Node,
    operands: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let target = node.results.first().map(|&r| &f.values[r]);
    s.apply_here(node.op.clone(), operands, target)
}

/// Where each value of a replayed function ended up in the target scope.
#[derive(Debug)]
pub(crate) struct ValueMap(HashMap<ValueId, Tensor>);

impl ValueMap {
    /// The replayed results of `f`, in order.
    pub(crate) fn results(&self, f: &Function) -> Vec<Tensor> {
        f.results.iter().map(|&r| self[r].clone()).collect()
    }
}

impl Index<ValueId> for ValueMap {
    type Output = Tensor;

    /// The tensor a source value became. Every parameter and node result of the replayed
    /// function has one, so a miss is a bug in the walk, not in the input.
    fn index(&self, v: ValueId) -> &Tensor {
        &self.0[&v]
    }
}

/// Replays `f` in `s` on `args`, node by node through `pass`, and returns where every value of
/// `f` went. The arguments must have `f`'s parameter types, as a call would.
pub(crate) fn replay(
    s: &Scope,
    f: &Function,
    args: &[Tensor],
    pass: &mut impl Replay,
) -> Result<ValueMap> {
    if args.len() != f.params.len() {
        return Err(Error::invalid(
            "call",
            format!(
                "`{}` takes {} arguments, got {}",
                f.name,
                f.params.len(),
                args.len()
            ),
        ));
    }
    let mut env: HashMap<ValueId, Tensor> = HashMap::new();
    for (&p, a) in f.params.iter().zip(args) {
        if f.values[p] != *a.ty() {
            return Err(Error::ShapeMismatch {
                op: "call",
                lhs: f.values[p].clone(),
                rhs: a.ty().clone(),
            });
        }
        env.insert(p, a.clone());
    }
    for (at, node) in f.nodes.iter().enumerate() {
        let operands: Vec<&Tensor> = node.operands.iter().map(|v| &env[v]).collect();
        let out = pass.node(s, f, at, &operands)?;
        for (&r, t) in node.results.iter().zip(out) {
            env.insert(r, t);
        }
    }
    Ok(ValueMap(env))
}
