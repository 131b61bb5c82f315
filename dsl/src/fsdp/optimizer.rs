//! Adam on the sharded slabs, fused after the gradient step so one program runs a whole
//! training step and parameters never leave the devices.

use crate::builder::{Scope, Tensor};
use crate::emit::{Program, Sharding};
use crate::error::{Error, Result};

use super::step::TrainStep;

/// Adam's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator guard.
    pub eps: f64,
}

impl Default for Adam {
    fn default() -> Self {
        Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
        }
    }
}

/// The training step followed by an Adam update.
///
/// Parameters: `[inputs…, weights…, first moments…, second moments…, step]` where `step` is
/// the 1-based update count as an `f32[]`; results: `[loss, weights…, first moments…, second
/// moments…]`. Moments have the weights' types and shardings.
pub fn with_adam(step: &TrainStep, adam: Adam) -> Result<Program> {
    let main = step.program.main();
    let shardings = step
        .program
        .param_shardings()
        .ok_or_else(|| Error::invalid("adam", "the training step has no mesh layout"))?;
    let ni = step.inputs;
    let weight_types = main.param_types()[ni..].to_vec();
    let s = Scope::new("train_step_adam");
    let params: Vec<Tensor> = main.param_types().into_iter().map(|t| s.param(t)).collect();
    let m: Vec<Tensor> = weight_types.iter().map(|t| s.param(t.clone())).collect();
    let v: Vec<Tensor> = weight_types.iter().map(|t| s.param(t.clone())).collect();
    let t = s.param(crate::TensorType::scalar(crate::DType::F32));
    let mut out = s.inline(main, &params)?;
    let grads = out.split_off(1);
    let loss = out.remove(0);
    let mut new_w = Vec::new();
    let mut new_m = Vec::new();
    let mut new_v = Vec::new();
    for (((w, g), m), v) in params[ni..].iter().zip(&grads).zip(&m).zip(&v) {
        let dt = w.dtype();
        let tt = t.convert(dt)?;
        let c = |x: f64| s.scalar(x, dt);
        let m2 = m.scale(adam.beta1)?.add(&g.scale(1.0 - adam.beta1)?)?;
        let v2 = v
            .scale(adam.beta2)?
            .add(&g.square()?.scale(1.0 - adam.beta2)?)?;
        // 1 − βᵗ = 1 − exp(t ln β)
        let bias = |beta: f64| -> Result<Tensor> { c(1.0)?.sub(&tt.mul(&c(beta.ln())?)?.exp()?) };
        let mhat = m2.div(&bias(adam.beta1)?.broadcast_to(w.dims())?)?;
        let vhat = v2.div(&bias(adam.beta2)?.broadcast_to(w.dims())?)?;
        let update = mhat.div(&vhat.sqrt()?.add_scalar(adam.eps)?)?;
        new_w.push(w.sub(&update.scale(adam.lr)?)?);
        new_m.push(m2);
        new_v.push(v2);
    }
    let mut results = vec![loss];
    results.extend(new_w);
    results.extend(new_m);
    results.extend(new_v);
    let f = s.finish(&results)?;
    let weight_sh: Vec<Sharding> = shardings[ni..].to_vec();
    let mut params_sh: Vec<Sharding> = shardings.to_vec();
    params_sh.extend(weight_sh.iter().copied());
    params_sh.extend(weight_sh.iter().copied());
    params_sh.push(Sharding::Replicated);
    let mut results_sh = vec![Sharding::Replicated];
    for _ in 0..3 {
        results_sh.extend(weight_sh.iter().copied());
    }
    let axis = step
        .program
        .axis()
        .cloned()
        .ok_or_else(|| Error::invalid("adam", "the training step has no mesh axis"))?;
    Program::on_mesh(f, axis, params_sh, results_sh)
}
