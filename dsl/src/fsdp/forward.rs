//! The forward pass alone, on the FSDP mesh: inference and evaluation run the stack as the
//! training step does (each layer's weights gathered one ahead, the same plan) and end in a
//! head of the caller's choosing (a language model's logits) instead of the loss, with no
//! backward pass.

use crate::builder::{Scope, Tensor};
use crate::emit::{Program, Sharding};
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::plan::{Plan, PlanOptions};
use crate::types::TensorType;

use super::lowering::Lowering;
use super::model::{ParamSpec, PostFn, StackModel};
use super::step::GradientReduction;

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
    model.validate_on(mesh)?;
    let plan = Plan::new(&model.stack, options)?;
    let lowering = Lowering::new(model, &plan, mesh, GradientReduction::ReduceScatter)?;
    let m = model;
    let s = Scope::new("forward");
    let inputs: Vec<Tensor> = m.inputs.iter().map(|i| s.param(i.ty.clone())).collect();
    let outer_slabs: Vec<Tensor> = m
        .outer_params
        .iter()
        .map(|p| s.param(TensorType::new(p.dtype, p.local_dims(lowering.n))))
        .collect();
    let stacked: Vec<Vec<Tensor>> = (0..m.kinds.len())
        .map(|k| {
            (0..m.kinds[k].params.len())
                .map(|p| s.param(m.stacked_local_type(k, p, lowering.n)))
                .collect()
        })
        .collect();
    let outer: Vec<Tensor> = m
        .outer_params
        .iter()
        .zip(&outer_slabs)
        .map(|(spec, slab)| lowering.gather_slab(spec, slab.clone(), false))
        .collect::<Result<_>>()?;
    let h0 = (m.pre)(&inputs, &outer)?;
    let (h, _, _) = lowering.forward(&s, &h0, &stacked)?;
    let out = head(&h, &inputs, &outer)?;
    if out.dims().first() != inputs.first().and_then(|i| i.dims().first()) {
        return Err(Error::invalid(
            "fsdp",
            format!(
                "the head returns {}, which does not start with the batch rows of the inputs",
                out.ty()
            ),
        ));
    }
    let f = s.finish(&[out])?;
    let shard = |p: &ParamSpec, stacked: bool| match (p.shard_dim, stacked) {
        (None, _) => Sharding::Replicated,
        (Some(_), false) => Sharding::Dim(0),
        (Some(_), true) => Sharding::Dim(1),
    };
    let mut params = vec![Sharding::Dim(0); m.inputs.len()];
    params.extend(m.outer_params.iter().map(|p| shard(p, false)));
    params.extend(
        m.kinds
            .iter()
            .flat_map(|k| k.params.iter().map(|p| shard(p, true))),
    );
    Program::on_device_mesh(f, mesh.clone(), params, vec![Sharding::Dim(0)])
}
