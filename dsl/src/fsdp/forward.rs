//! The forward pass alone, on the FSDP mesh: inference and evaluation run the stack as the
//! training step does (each layer's weights gathered one ahead, the same plan) and end in a
//! head of the caller's choosing (a language model's logits, [`forward_step_on`]) or in the
//! model's loss ([`forward_loss_on`], what evaluation runs), with no backward pass.

use crate::builder::{Scope, Tensor};
use crate::emit::{Program, Sharding};
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::plan::{Plan, PlanOptions};

use super::lowering::Lowering;
use super::model::{PostFn, StackModel};
use super::step::{GradientReduction, StepParams, param_shardings, pre_activation, trace_post};

/// The forward program of `model` on `mesh` under `options`, ending in `head` (`(h, inputs,
/// outer weights) → output`, each device's batch rows first): parameters as the training
/// step's (`[inputs…, outer slabs…, stacked slabs…]`), one result, `head`'s output on each
/// device's rows (sharded along dimension 0 like the inputs).
pub fn forward_step_on(
    model: &StackModel,
    options: PlanOptions,
    mesh: &Mesh,
    head: &PostFn,
) -> Result<Program> {
    forward_program(model, options, mesh, |h, inputs, outer| {
        let out = head(h, inputs, outer)?;
        if out.dims().first() != inputs.first().and_then(|i| i.dims().first()) {
            return Err(Error::invalid(
                "fsdp",
                format!(
                    "the head returns {}, which does not start with the batch rows of the inputs",
                    out.ty()
                ),
            ));
        }
        Ok(out)
    })
}

/// The forward program of `model` on `mesh` under `options` that ends in the model's own loss
/// ([`StackModel::post`]): what evaluation needs, with no backward pass and no optimizer.
/// Parameters as the training step's; one result, `f32[1]` per device (sharded along
/// dimension 0: `[devices]` in all), each device's mean loss over its rows, whose mean is the
/// loss the training step reports on the same inputs. The layers' loss terms are left out,
/// as the step reports them apart.
pub fn forward_loss_on(model: &StackModel, options: PlanOptions, mesh: &Mesh) -> Result<Program> {
    // The loss traced as the step traces it, so both compute it alike.
    let post = trace_post(model, options.precision)?;
    forward_program(model, options, mesh, |h, inputs, outer| {
        let mut args = vec![h.clone()];
        args.extend(inputs.iter().cloned());
        args.extend(outer.iter().cloned());
        h.scope().inline(&post, &args)?.remove(0).reshape(&[1])
    })
}

/// The forward pass of `model` on `mesh`, then `head` on the last activation, the inputs and
/// the gathered outer weights.
fn forward_program(
    model: &StackModel,
    options: PlanOptions,
    mesh: &Mesh,
    head: impl FnOnce(&Tensor, &[Tensor], &[Tensor]) -> Result<Tensor>,
) -> Result<Program> {
    model.validate_on(mesh)?;
    let plan = Plan::new(&model.stack, options)?;
    let lowering = Lowering::new(model, &plan, mesh, GradientReduction::ReduceScatter)?;
    let m = model;
    let s = Scope::new("forward");
    let StepParams {
        inputs,
        outer_slabs,
        stacked,
    } = lowering.params(&s);
    let outer: Vec<Tensor> = m
        .outer_params
        .iter()
        .zip(&outer_slabs)
        .map(|(spec, slab)| lowering.gather_slab(spec, slab.clone(), false))
        .collect::<Result<_>>()?;
    let h0 = pre_activation(m, lowering.precision, &inputs, &outer)?;
    let (h, _, _) = lowering.forward(&s, &h0, &stacked)?;
    let mut out = head(&h, &inputs, &outer)?;
    if lowering.precision.is_mixed() && out.dtype().is_float() {
        // What the caller reads is f32 whatever the layers computed in.
        out = out.convert(crate::dtype::DType::F32)?;
    }
    let f = s.finish(&[out])?;
    Program::on_device_mesh(f, mesh.clone(), param_shardings(m), vec![Sharding::Dim(0)])
}
