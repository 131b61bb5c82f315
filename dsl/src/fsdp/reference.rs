//! The unsharded reference: the same model on one device with full weights, every layer
//! written out, differentiated as one function. It shares no code with the lowering beyond
//! the model's own layer functions, so agreement between the two is evidence for both.

use crate::autodiff::value_and_vjp;
use crate::auxiliary::AuxRole;
use crate::builder::{Scope, Tensor};
use crate::error::Result;
use crate::ir::Function;

use super::model::StackModel;

/// `(inputs…, outer weights…, stacked weights per kind (full, `[layers, shape…]`)…) →
/// (loss, d outer…, d stacked…)` on one device; inputs are the whole batch. The loss is the
/// model's own and the gradients include the layers' loss terms ([`AuxRole::Loss`]), as the
/// step's; metrics are not returned.
///
/// `batch_scale` multiplies the inputs' batch dimension (the devices the FSDP step splits the
/// batch over), so the reference sees the global batch.
pub fn reference_step(model: &StackModel, batch_scale: usize) -> Result<Function> {
    let s = Scope::new("reference");
    let inputs: Vec<Tensor> = model
        .inputs
        .iter()
        .map(|i| {
            let mut dims = i.ty.dims.clone();
            if let Some(d) = dims.first_mut() {
                *d *= batch_scale as i64;
            }
            s.param(i.ty.with_dims(dims))
        })
        .collect();
    let outer: Vec<Tensor> = model
        .outer_params
        .iter()
        .map(|p| s.param(p.full_type()))
        .collect();
    let stacked: Vec<Vec<Tensor>> = model
        .kinds
        .iter()
        .enumerate()
        .map(|(k, kind)| {
            kind.params
                .iter()
                .map(|p| {
                    let mut dims = vec![model.stack.layers_of_kind(k) as i64];
                    dims.extend(&p.shape);
                    s.param(p.full_type().with_dims(dims))
                })
                .collect()
        })
        .collect();
    let mut h = (model.pre)(&inputs, &outer)?;
    for layer in 0..model.stack.len() {
        let k = model.stack.kind_of(layer);
        let row = model.stack.index_in_kind(layer) as i64;
        let w: Vec<Tensor> = stacked[k]
            .iter()
            .map(|st| st.slice_axis(0, row, row + 1)?.squeeze(0))
            .collect::<Result<_>>()?;
        h = (model.kinds[k].forward)(&h, &w)?;
    }
    let mut loss = (model.post)(&h, &inputs, &outer)?;
    // The layers' loss terms, summed over layers as the step sums them, in the gradient but
    // not in the value: `t − sg(t)` is zero and differentiates as `t`, so the reference
    // reports the model's own loss, as the step does.
    for (output, value) in s.take_aux() {
        if output.role == AuxRole::Loss {
            let term = value.convert(loss.dtype())?;
            loss = loss.add(&term.sub(&term.stop_gradient()?)?)?;
        }
    }
    let f = s.finish(&[loss])?;
    let mut wrt: Vec<bool> = model.inputs.iter().map(|_| false).collect();
    wrt.extend(model.outer_params.iter().map(|p| p.dtype.is_float()));
    wrt.extend(
        model
            .kinds
            .iter()
            .flat_map(|k| k.params.iter().map(|p| p.dtype.is_float())),
    );
    value_and_vjp(&f, &wrt)
}
