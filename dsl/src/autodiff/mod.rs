//! Reverse-mode differentiation: a function in, its vector-Jacobian product out, as more graph.
//!
//! The transform replays the function's nodes, then walks them backwards applying each op's
//! VJP rule (`rules`) to accumulate cotangents. `scan` saves its per-step input carries as
//! residuals and is differentiated by a reverse `scan` whose body re-runs the step's forward
//! and its VJP (recompute, as the layer-stack schedule wants). Integer and boolean values
//! carry no cotangent, nor do values behind `stop_gradient`.

mod rules;

use std::collections::HashMap;

use crate::builder::{Scope, Tensor};
use crate::error::{Error, Result};
use crate::ir::{Function, ScanParts, ValueId};
use crate::replay::{NodeAt, Replay, replay};

/// The VJP of `f` with respect to all its floating-point parameters.
///
/// The result takes `f`'s parameters followed by one cotangent per floating-point result of
/// `f`, and returns one cotangent per floating-point parameter, in order.
pub fn vjp(f: &Function) -> Result<Function> {
    let wrt: Vec<bool> = f
        .params
        .iter()
        .map(|&p| f.values[p].dtype.is_float())
        .collect();
    vjp_wrt(f, &wrt)
}

/// The VJP of `f` with respect to the parameters flagged in `wrt` (which must be
/// floating-point). Same signature as [`vjp`], returning cotangents for the flagged
/// parameters only.
pub fn vjp_wrt(f: &Function, wrt: &[bool]) -> Result<Function> {
    Ok(build(f, wrt, false)?.0)
}

/// `f`'s results followed by its VJP's: the training-step form (loss and gradients from one
/// program).
pub fn value_and_vjp(f: &Function, wrt: &[bool]) -> Result<Function> {
    Ok(build(f, wrt, true)?.0)
}

/// Builds the VJP function. Returns it and whether each parameter got a cotangent result.
fn build(f: &Function, wrt: &[bool], keep_values: bool) -> Result<(Function, Vec<bool>)> {
    if wrt.len() != f.params.len() {
        return Err(Error::invalid(
            "vjp",
            format!("{} flags for {} parameters", wrt.len(), f.params.len()),
        ));
    }
    for (i, (&p, &w)) in f.params.iter().zip(wrt).enumerate() {
        if w && !f.values[p].dtype.is_float() {
            return Err(Error::NotDifferentiable {
                op: "vjp",
                reason: format!("parameter {i} is {}, not floating point", f.values[p]),
            });
        }
    }
    let s = Scope::new(&format!("{}_vjp", f.name));
    let args: Vec<Tensor> = f
        .params
        .iter()
        .map(|&p| s.param(f.values[p].clone()))
        .collect();
    let seeds: Vec<(ValueId, Tensor)> = f
        .results
        .iter()
        .filter(|&&r| f.values[r].dtype.is_float())
        .map(|&r| (r, s.param(f.values[r].clone())))
        .collect();

    let mut forward = Forward::default();
    let env = replay(&s, f, &args, &mut forward)?;
    let residuals = forward.residuals;

    // Backward sweep.
    let mut cts: HashMap<ValueId, Tensor> = HashMap::new();
    for (r, seed) in seeds {
        accumulate(&mut cts, r, seed)?;
    }
    for (i, node) in f.nodes.iter().enumerate().rev() {
        let result_cts: Vec<Option<Tensor>> = node.results.iter().map(|r| cts.remove(r)).collect();
        if result_cts.iter().all(Option::is_none) {
            continue;
        }
        let operands: Vec<Tensor> = node.operands.iter().map(|&v| env[v].clone()).collect();
        let results: Vec<Tensor> = node.results.iter().map(|&v| env[v].clone()).collect();
        let operand_cts = rules::vjp_rule(
            &node.op,
            &operands,
            &results,
            &result_cts,
            residuals.get(&i).map(Vec::as_slice),
        )?;
        for (&v, ct) in node.operands.iter().zip(operand_cts) {
            if let Some(ct) = ct
                && f.values[v].dtype.is_float()
            {
                accumulate(&mut cts, v, ct)?;
            }
        }
    }

    let mut results: Vec<Tensor> = Vec::new();
    if keep_values {
        results.extend(env.results(f));
    }
    for (&p, &w) in f.params.iter().zip(wrt) {
        if w {
            let ct = match cts.remove(&p) {
                Some(ct) => ct,
                None => env[p].zeros_like()?,
            };
            results.push(ct);
        }
    }
    Ok((s.finish(&results)?, wrt.to_vec()))
}

/// The forward replay: every node copied, except that a scan also stacks its per-step input
/// carries, which the backward sweep needs and cannot recompute.
#[derive(Default)]
struct Forward {
    /// The stacked carries of each scan, by node index in the source function.
    residuals: HashMap<usize, Vec<Tensor>>,
}

impl Replay for Forward {
    fn node(&mut self, at: &NodeAt<'_>) -> Result<Vec<Tensor>> {
        let Some(scan) = ScanParts::of(&at.node().op) else {
            return at.copy();
        };
        let (outputs, saved) = rules::scan_forward(at.scope, &scan, at.operands)?;
        self.residuals.insert(at.index, saved);
        Ok(outputs)
    }
}

fn accumulate(cts: &mut HashMap<ValueId, Tensor>, v: ValueId, ct: Tensor) -> Result<()> {
    let total = match cts.remove(&v) {
        Some(prev) => prev.add(&ct)?,
        None => ct,
    };
    cts.insert(v, total);
    Ok(())
}
