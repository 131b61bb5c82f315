//! The whole program a trainer runs, built in one place: the FSDP step on a mesh, scanned
//! over micro-batches when it accumulates, followed by the optimizer's update, with the names
//! of what it returns beside the loss. A runtime compiles it and keeps its state; it does not
//! assemble the pieces itself.

use crate::auxiliary::AuxOutput;
use crate::emit::Program;
use crate::error::Result;
use crate::mesh::Mesh;
use crate::plan::PlanOptions;

use super::accumulate::accumulate;
use super::model::StackModel;
use super::optimizer::{Adam, adam_outputs, with_adam};
use super::step::{TrainStep, train_step_on};

/// What a trainer compiles and what it needs to read its results.
#[derive(Clone, Debug)]
pub struct TrainingProgram {
    /// The update: the step (over `micro_batches` micro-batches), then Adam on every weight.
    /// Parameters and results are [`with_adam`]'s.
    pub update: Program,
    /// The step alone, accumulated as the update runs it: its program is what evaluation
    /// runs (the loss without an update), its plan and parameter order what the trainer
    /// reports and checks.
    pub step: TrainStep,
    /// The update's auxiliary outputs in order: the layers' ([`TrainStep::aux`]), then the
    /// optimizer's ([`adam_outputs`]).
    pub aux: Vec<AuxOutput>,
}

/// The training program of `model` on `mesh` under `options`: each step runs
/// `micro_batches` micro-batches of the model's batch (1: no accumulation) and applies
/// `adam` to their mean gradient.
pub fn training_program(
    model: &StackModel,
    options: PlanOptions,
    mesh: &Mesh,
    adam: Adam,
    micro_batches: usize,
) -> Result<TrainingProgram> {
    adam.validate()?;
    let step = accumulate(&train_step_on(model, options, mesh)?, micro_batches)?;
    Ok(TrainingProgram {
        update: with_adam(&step, adam)?,
        aux: adam_outputs(&step),
        step,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Axis;
    use crate::fsdp::OPTIMIZER_OUTPUTS;

    #[test]
    fn the_program_is_the_accumulated_step_then_adam() {
        let model = crate::fsdp::toy::residual_tanh(|h| Ok(h.clone()));
        let mesh = Mesh::line(&Axis::new("fsdp", 2)).unwrap();
        let options = PlanOptions::prefetch_deferred();
        let t = training_program(&model, options, &mesh, Adam::default(), 2).unwrap();
        // Two micro-batches of 2 rows a device.
        assert_eq!(t.step.program.main().param_types()[0].dims, [4, 8]);
        let names: Vec<&str> = t.aux.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, OPTIMIZER_OUTPUTS);
        let direct = with_adam(
            &accumulate(&train_step_on(&model, options, &mesh).unwrap(), 2).unwrap(),
            Adam::default(),
        )
        .unwrap();
        assert_eq!(t.update.emit().unwrap(), direct.emit().unwrap());
        let bad = Adam {
            lr: -1.0,
            ..Adam::default()
        };
        assert!(training_program(&model, options, &mesh, bad, 1).is_err());
    }
}
