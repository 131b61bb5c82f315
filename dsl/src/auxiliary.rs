//! Auxiliary scalar outputs of a layer: values a layer reports beside its activation, either
//! for the log only ([`AuxRole::Metric`]: an MoE layer's dropped assignments and load
//! imbalance) or as a term of the training loss ([`AuxRole::Loss`]: a load-balancing loss).
//!
//! A layer records them on the scope it is traced in ([`Tensor::record_aux`]); whoever traces
//! the layer takes them ([`Scope::take_aux`]). The FSDP step carries one accumulator per name
//! through its loops and returns each name once per step, after every other result
//! ([`TrainStep::aux`](crate::fsdp::TrainStep::aux)): a metric as its mean over the layers
//! recording it and the devices, a loss term as its sum over layers, averaged over devices
//! like the loss it is added to. A model that records nothing gets the program it always had.
//!
//! ```
//! use stackscan::auxiliary::AuxRole;
//! use stackscan::{DType, Scope, TensorType};
//! let s = Scope::new("layer");
//! let x = s.param(TensorType::new(DType::F32, [4]));
//! x.sum_all()?.record_aux("total", AuxRole::Metric)?;
//! x.square()?.sum_all()?.record_aux("penalty", AuxRole::Loss)?;
//! let aux = s.take_aux();
//! assert_eq!(aux.len(), 2);
//! assert_eq!((aux[1].0.name.as_str(), aux[1].0.role), ("penalty", AuxRole::Loss));
//! assert!(s.take_aux().is_empty());
//! # Ok::<(), stackscan::Error>(())
//! ```

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// What an auxiliary output is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuxRole {
    /// Reported only, never differentiated: recorded behind a `stop_gradient`, and the step
    /// returns its mean over the layers that record it and over the devices.
    Metric,
    /// Added to the training loss and differentiated with it; the step returns its sum over
    /// the layers, averaged over the devices (its share of the loss the step returns).
    Loss,
}

/// A named auxiliary output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AuxOutput {
    /// Name, as logs show it (`moe.dropped`).
    pub name: String,
    /// Metric or loss term.
    pub role: AuxRole,
}

const OP: &str = "record_aux";

impl Tensor {
    /// Records this scalar as the auxiliary output `name` of the function being traced (the
    /// top-level scope it belongs to, not a loop body); a name recorded twice is summed,
    /// and must keep its role. Kept as `f32`.
    pub fn record_aux(&self, name: &str, role: AuxRole) -> Result<()> {
        if self.rank() != 0 || !self.dtype().is_float() {
            return Err(Error::invalid(
                OP,
                format!(
                    "auxiliary output `{name}` must be a float scalar, got {}",
                    self.ty()
                ),
            ));
        }
        let s = self.scope().clone();
        if !s.is_top_level() {
            return Err(Error::invalid(
                OP,
                format!("auxiliary output `{name}` is recorded inside a loop body"),
            ));
        }
        let mut value = self.convert(DType::F32)?;
        if role == AuxRole::Metric {
            value = value.stop_gradient()?;
        }
        let output = AuxOutput {
            name: name.to_owned(),
            role,
        };
        s.push_aux(output, value)
    }
}

impl Scope {
    /// The auxiliary outputs recorded on this scope so far, in the order their names were
    /// first recorded; the scope keeps none.
    pub fn take_aux(&self) -> Vec<(AuxOutput, Tensor)> {
        self.drain_aux()
    }

    fn push_aux(&self, output: AuxOutput, value: Tensor) -> Result<()> {
        let value = match self.aux_entry(&output.name) {
            Some((o, _)) if o.role != output.role => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "auxiliary output `{}` recorded as {:?} and as {:?}",
                        o.name, o.role, output.role
                    ),
                ));
            }
            Some((_, sum)) => sum.add(&value)?,
            None => value,
        };
        self.set_aux(output, &value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TensorType;

    #[test]
    fn a_name_recorded_twice_is_summed_and_keeps_its_role() -> Result<()> {
        let s = Scope::new("f");
        let x = s.param(TensorType::scalar(DType::F32));
        x.record_aux("a", AuxRole::Loss)?;
        x.record_aux("a", AuxRole::Loss)?;
        assert!(x.record_aux("a", AuxRole::Metric).is_err());
        let v = TensorType::new(DType::F32, [2]);
        assert!(s.param(v).record_aux("b", AuxRole::Metric).is_err());
        let aux = s.take_aux();
        assert_eq!(aux.len(), 1);
        let f = s.finish(&[aux[0].1.clone()])?;
        assert_eq!(f.result_types(), [TensorType::scalar(DType::F32)]);
        Ok(())
    }

    /// A scope holding recorded outputs that nobody takes is freed with its last tensor: the
    /// scope keeps value ids, not tensors, so it holds no reference to itself.
    #[test]
    fn an_untaken_record_leaves_no_reference_cycle() -> Result<()> {
        let s = Scope::new("f");
        let x = s.param(TensorType::scalar(DType::F32));
        x.record_aux("a", AuxRole::Metric)?;
        x.record_aux("a", AuxRole::Metric)?;
        let alive = s.liveness();
        drop((s, x));
        assert!(!alive(), "the scope outlived its tensors");
        Ok(())
    }
}
