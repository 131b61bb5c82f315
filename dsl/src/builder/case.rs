//! `stablehlo.case` in the builder: branches built as regions of their own, each taking what
//! any of them captured.

use crate::error::Result;
use crate::ir::{Op, ValueId};

use super::{Scope, Tensor};

/// One branch of [`Scope::case_with_attributes`]: its results, built in the scope given.
pub type Branch<'a> = Box<dyn FnOnce(&Scope) -> Result<Vec<Tensor>> + 'a>;

impl Scope {
    /// `stablehlo.case`: runs branch `index` of `branches` (the last when `index` is out of
    /// range) and returns its results; every branch must return the same types. The outer
    /// tensors any branch uses are the case's operands, passed to every branch.
    pub fn case_with_attributes(
        &self,
        index: &Tensor,
        branches: Vec<Branch<'_>>,
        frontend_attributes: &[(&str, &str)],
    ) -> Result<Vec<Tensor>> {
        let mut built = Vec::with_capacity(branches.len());
        for branch in branches {
            let (bs, _) = self.child("branch", &[]);
            let results = branch(&bs)?;
            built.push(bs.finish_region(&results)?);
        }
        // Every branch takes the union of what each captured, in order of first use.
        let mut outer: Vec<ValueId> = Vec::new();
        for &v in built.iter().flat_map(|(_, caps)| caps) {
            if !outer.contains(&v) {
                outer.push(v);
            }
        }
        let mut functions = Vec::with_capacity(built.len());
        for (mut f, caps) in built {
            let own = f.params.clone();
            let mut params = Vec::with_capacity(outer.len());
            for &v in &outer {
                match caps.iter().position(|&c| c == v) {
                    Some(i) => params.push(own[i]),
                    None => {
                        let ty = self.0.func.borrow().values[v].clone();
                        f.values.push(ty);
                        params.push(f.values.len() - 1);
                    }
                }
            }
            f.params = params;
            functions.push(f);
        }
        let mut operands = vec![index.clone()];
        operands.extend(outer.iter().map(|&v| self.tensor(v)));
        let refs: Vec<&Tensor> = operands.iter().collect();
        let op = Op::Case {
            branches: functions,
            frontend_attributes: frontend_attributes
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        self.apply_here(op, &refs, None)
    }
}
