//! Which nodes of a function its results need, and the function cut down to them.

use super::{Function, ValueId};

impl Function {
    /// Which nodes some result depends on. The others never run, since XLA removes dead code
    /// before compiling, and they do occur: [`vjp`](crate::vjp) replays the whole forward,
    /// including products whose values the backward never reads.
    pub fn live_nodes(&self) -> Vec<bool> {
        let mut needed = vec![false; self.values.len()];
        for &r in &self.results {
            if let Some(n) = needed.get_mut(r) {
                *n = true;
            }
        }
        let mut live = vec![false; self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate().rev() {
            if node
                .results
                .iter()
                .any(|&r| needed.get(r).copied().unwrap_or(false))
            {
                live[i] = true;
                for &o in &node.operands {
                    if let Some(n) = needed.get_mut(o) {
                        *n = true;
                    }
                }
            }
        }
        live
    }

    /// This function returning `results` (values of it) instead of its own, with only the
    /// nodes they need: the same parameters and value numbering, so a value of one is the
    /// same value of the other.
    pub fn returning(&self, results: &[ValueId]) -> Function {
        let mut f = Function {
            results: results.to_vec(),
            ..self.clone()
        };
        let live = f.live_nodes();
        let mut keep = live.into_iter();
        f.nodes.retain(|_| keep.next().unwrap_or(false));
        f
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BinaryOp, Function, Node, Op, UnaryOp};
    use crate::dtype::DType;
    use crate::types::TensorType;

    fn node(op: Op, operands: &[usize], result: usize) -> Node {
        Node {
            op,
            operands: operands.to_vec(),
            results: vec![result],
            attributes: Vec::new(),
        }
    }

    /// `x ↦ (exp x, −x + x)`: values 0 (x), 1 (exp), 2 (neg), 3 (add).
    fn two_results() -> Function {
        Function {
            name: "f".into(),
            values: vec![TensorType::new(DType::F32, [2]); 4],
            params: vec![0],
            nodes: vec![
                node(Op::Unary(UnaryOp::Exp), &[0], 1),
                node(Op::Unary(UnaryOp::Neg), &[0], 2),
                node(Op::Binary(BinaryOp::Add), &[2, 0], 3),
            ],
            results: vec![1, 3],
        }
    }

    #[test]
    fn a_function_returning_fewer_results_keeps_only_what_they_need() {
        let f = two_results();
        assert_eq!(f.live_nodes(), [true, true, true]);
        let only_sum = f.returning(&[3]);
        assert_eq!(only_sum.nodes, f.nodes[1..]);
        assert_eq!((&only_sum.params, &only_sum.values), (&f.params, &f.values));
        assert_eq!(only_sum.live_nodes(), [true, true]);
        let only_exp = f.returning(&[1]);
        assert_eq!(only_exp.nodes, f.nodes[..1]);
        assert!(f.returning(&[0]).nodes.is_empty());
    }
}
