//! Replaying a function node by node into another scope: the one walk behind inlining, the
//! scan lowering and autodiff's forward pass.
//!
//! Each of those passes copies a [`Function`]'s nodes, in order, into a [`Scope`] under
//! construction, mapping the source's value ids to tensors of the target; they differ only in
//! what a few nodes become (a scan turns into a `while`, or into a scan that also saves its
//! carries). So the walk is written once, in [`replay`], and a pass is a [`Replay`] hook that
//! decides one node at a time, falling back on [`NodeAt::copy`] for the nodes it leaves alone. Going
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
    /// The results in the target scope of the node at `at`. They must have the node's result
    /// types, since later nodes read them in its place. The default copies the node unchanged.
    fn node(&mut self, at: &NodeAt<'_>) -> Result<Vec<Tensor>> {
        at.copy()
    }
}

/// One node of a replay: where it is in the source function, the scope it is replayed into,
/// and its operands, already replayed.
#[derive(Debug)]
pub(crate) struct NodeAt<'a> {
    /// The scope under construction.
    pub(crate) scope: &'a Scope,
    /// The function being replayed.
    pub(crate) function: &'a Function,
    /// The node's index in `function.nodes`.
    pub(crate) index: usize,
    /// The node's operands in `scope`.
    pub(crate) operands: &'a [&'a Tensor],
}

impl NodeAt<'_> {
    /// The source node.
    pub(crate) fn node(&self) -> &Node {
        &self.function.nodes[self.index]
    }

    /// Applies the node unchanged on the replayed operands, passing the node's own result type
    /// as the target for the ops whose result is not a function of their operands.
    pub(crate) fn copy(&self) -> Result<Vec<Tensor>> {
        let node = self.node();
        let target = node.results.first().map(|&r| &self.function.values[r]);
        self.with_attributes(|| {
            self.scope
                .apply_here(node.op.clone(), self.operands, target)
        })
    }

    /// Runs `build` with the source node's frontend attributes on what it builds: a node
    /// replaced by several (a composite) keeps its scheduling group, so no op of the group's
    /// dataflow falls outside it (XLA refuses a group with such gaps).
    pub(crate) fn with_attributes<T>(&self, build: impl FnOnce() -> Result<T>) -> Result<T> {
        let attributes: Vec<(&str, &str)> = self
            .node()
            .attributes
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.scope.with_frontend_attributes(&attributes, build)
    }
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
        let out = pass.node(&NodeAt {
            scope: s,
            function: f,
            index: at,
            operands: &operands,
        })?;
        for (&r, t) in node.results.iter().zip(out) {
            env.insert(r, t);
        }
    }
    Ok(ValueMap(env))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ir::{Op, UnaryOp};
    use crate::types::TensorType;

    /// Turns every `exp` into `neg` and records the order it was asked about nodes in.
    #[derive(Default)]
    struct ExpToNeg {
        seen: Vec<usize>,
    }

    impl Replay for ExpToNeg {
        fn node(&mut self, at: &NodeAt<'_>) -> Result<Vec<Tensor>> {
            self.seen.push(at.index);
            match at.node().op {
                Op::Unary(UnaryOp::Exp) => Ok(vec![at.operands[0].neg()?]),
                _ => at.copy(),
            }
        }
    }

    #[test]
    fn the_hook_sees_every_node_in_order_and_the_rest_is_copied() {
        let g = Scope::new("g");
        let x = g.param(TensorType::new(DType::F32, [2]));
        let y = x.exp().unwrap().add(&x).unwrap().exp().unwrap();
        let g = g.finish(&[y]).unwrap();

        let s = Scope::new("main");
        let a = s.param(TensorType::new(DType::F32, [2]));
        let mut pass = ExpToNeg::default();
        let values = replay(&s, &g, &[a], &mut pass).unwrap();
        assert_eq!(pass.seen, vec![0, 1, 2]);
        let out = s.finish(&values.results(&g)).unwrap();
        let ops: Vec<Op> = out.nodes.iter().map(|n| n.op.clone()).collect();
        assert_eq!(
            ops,
            vec![
                Op::Unary(UnaryOp::Neg),
                Op::Binary(crate::ir::BinaryOp::Add),
                Op::Unary(UnaryOp::Neg)
            ]
        );
    }

    #[test]
    fn arguments_must_match_the_parameters() {
        let g = Scope::new("g");
        let x = g.param(TensorType::new(DType::F32, [2]));
        let g = g.finish(&[x]).unwrap();
        let s = Scope::new("main");
        let wrong = s.param(TensorType::new(DType::F32, [3]));
        assert!(replay(&s, &g, &[], &mut ExpToNeg::default()).is_err());
        assert!(replay(&s, &g, &[wrong], &mut ExpToNeg::default()).is_err());
    }
}
