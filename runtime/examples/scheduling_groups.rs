//! Which `_scheduling_group_id` groups libtpu accepts: a gather and two products tagged as
//! one group, with one op between the products, compiled for a TPU7x slice on a machine
//! without a TPU. docs/tpu.md ("Compile for a TPU pod you don't have") cites what it prints: an op
//! of one operand between the products (`tanh`, a transpose) leaves the group whole, an op of
//! two (`add`, `multiply`, a reduction), tagged or not, makes libtpu refuse it ("annotation
//! groups with gaps"), which is why stackscan emits no groups for the TPU plugin.
//!
//!     cargo run -p stackscan-runtime --example scheduling_groups

#![allow(
    clippy::unwrap_used,
    reason = "an example that cannot go on should fail loudly"
)]

use stackscan::{Axis, DType, Mesh, Program, Result, Scope, Sharding, Tensor, TensorType};
use stackscan_runtime::{ClientOptions, Plugin, Topology, plugin, topology};

/// The op between the two products of the group.
#[derive(Clone, Copy, Debug)]
enum Between {
    Tanh,
    Transpose,
    Add,
    Multiply,
    Sum,
}

impl Between {
    const ALL: [Between; 5] = [
        Between::Tanh,
        Between::Transpose,
        Between::Add,
        Between::Multiply,
        Between::Sum,
    ];

    fn apply(self, y: &Tensor) -> Result<Tensor> {
        match self {
            Between::Tanh => y.tanh(),
            Between::Transpose => y.transpose(&[1, 0])?.transpose(&[1, 0]),
            Between::Add => y.add(y),
            Between::Multiply => y.exp()?.mul(y),
            Between::Sum => y.sum(&[1])?.broadcast_in_dim(y.dims(), &[0]),
        }
    }
}

/// `gather(w_shard)` and `x·w → between → ·w` in one group (`between` tagged too when
/// `tag_between`), then the gathered weights used after the group.
fn program(between: Between, tag_between: bool) -> Program {
    let axis = Axis::new("fsdp", 8);
    let s = Scope::new("main");
    let x = s.param(TensorType::new(DType::F32, [256, 1024]));
    let w = s.param(TensorType::new(DType::F32, [1024, 1024]));
    let shard = s.param(TensorType::new(DType::F32, [128, 1024]));
    let group = [("_scheduling_group_id", "0")];
    let tagged = |f: &dyn Fn() -> Result<Tensor>| s.with_frontend_attributes(&group, f).unwrap();
    let gathered = tagged(&|| shard.all_gather(0, &axis));
    let first = tagged(&|| x.matmul(&w));
    let middle = if tag_between {
        tagged(&|| between.apply(&first))
    } else {
        between.apply(&first).unwrap()
    };
    let second = tagged(&|| middle.matmul(&w));
    let out = second.matmul(&gathered).unwrap();
    let main = s.finish(&[out]).unwrap();
    let replicated = Sharding::Replicated;
    Program::on_device_mesh(
        main,
        Mesh::line(&axis).unwrap(),
        vec![replicated, replicated, Sharding::Dim(0)],
        vec![replicated],
    )
    .unwrap()
}

fn main() -> stackscan_runtime::Result<()> {
    topology::prepare_environment()?;
    let tpu = Plugin::load_compile_only(plugin::resolve_compile_only("tpu")?)?;
    let slice = Topology::create(&tpu, "tpu7x:2x2x1", &ClientOptions::default())?;
    for between in Between::ALL {
        for tag_between in [false, true] {
            let verdict = match slice.compile_program(&program(between, tag_between)) {
                Ok(_) => "accepted".to_owned(),
                Err(e) => format!("refused: {}", e.to_string().lines().next().unwrap_or("")),
            };
            let how = if tag_between { "tagged" } else { "untagged" };
            println!("{between:?} ({how}) between the products: {verdict}");
        }
    }
    Ok(())
}
