//! The check every layer function taking its weights as a slice starts with: the count and
//! each weight's shape against the layer's parameter specs, naming the first parameter that
//! differs, before any op is traced (a wrong weight would otherwise surface as a shape error
//! deep inside the layer, naming an op rather than the parameter).
//!
//! ```
//! use stackscan::Scope;
//! use stackscan::fsdp::ParamSpec;
//! use stackscan::{DType, TensorType};
//! use stackscan_models::weights::check_shapes;
//!
//! let specs = [ParamSpec::replicated("gain", &[4], DType::F32)];
//! let scope = Scope::new("norm");
//! let w = scope.param(TensorType::new(DType::F32, [3]));
//! let err = check_shapes("norm", &specs, &[w]).unwrap_err();
//! assert!(err.to_string().contains("parameter `gain`: expected shape [4]"), "{err}");
//! ```

use stackscan::fsdp::ParamSpec;
use stackscan::{Error, Result, Tensor};

/// Checks that `weights` are one per spec of `specs`, in order, each of its spec's shape; the
/// error is `op`'s, naming the parameter.
pub fn check_shapes(op: &'static str, specs: &[ParamSpec], weights: &[Tensor]) -> Result<()> {
    let invalid = |message| Error::InvalidOp { op, message };
    if weights.len() != specs.len() {
        return Err(invalid(format!(
            "expected {} weights, got {}",
            specs.len(),
            weights.len()
        )));
    }
    match specs
        .iter()
        .zip(weights)
        .find(|(spec, t)| t.dims() != spec.shape.as_slice())
    {
        Some((spec, t)) => Err(invalid(format!(
            "parameter `{}`: expected shape {:?}, got {}",
            spec.name,
            spec.shape,
            t.ty()
        ))),
        None => Ok(()),
    }
}
