//! Scratch: which scheduling groups libtpu accepts.
#![allow(clippy::unwrap_used)]
use stackscan::{Axis, DType, Mesh, Program, Scope, Sharding, TensorType};
use stackscan_runtime::hlo::OptimizedModule;
use stackscan_runtime::{ClientOptions, Plugin, Topology, plugin, topology};

fn main() {
    topology::prepare_environment().unwrap();
    let tpu = Plugin::load_compile_only(plugin::resolve_compile_only("tpu").unwrap()).unwrap();
    let slice = Topology::create(&tpu, "tpu7x:2x2x1", &ClientOptions::default()).unwrap();
    let which = std::env::args().nth(1).unwrap();
    let axis = Axis::new("fsdp", 8);
    let s = Scope::new("main");
    let x = s.param(TensorType::new(DType::F32, [256, 1024]));
    let w = s.param(TensorType::new(DType::F32, [1024, 1024]));
    let shard = s.param(TensorType::new(DType::F32, [128, 1024]));
    let g0 = [("_scheduling_group_id", "0")];
    let tag = |on: bool, f: &dyn Fn() -> stackscan::Result<stackscan::Tensor>| {
        if on {
            s.with_frontend_attributes(&g0, f).unwrap()
        } else {
            f().unwrap()
        }
    };
    let t = |c: char| which.contains(c);
    let g = if t('f') {
        s.with_frontend_attributes(&[("xla_explicit_fsdp", "yes")], || {
            shard.all_gather(0, &axis)
        })
        .unwrap()
    } else {
        tag(t('g'), &|| shard.all_gather(0, &axis))
    };
    let y1 = tag(t('1'), &|| x.matmul(&w));
    let a = if t('n') {
        tag(t('a'), &|| y1.neg())
    } else if t('d') {
        tag(t('a'), &|| y1.add(&y1))
    } else if t('k') {
        tag(t('a'), &|| y1.exp())
    } else if t('e') {
        tag(t('a'), &|| y1.exp()?.mul(&y1))
    } else if t('x') {
        let outside = x.tanh().unwrap().matmul(&w).unwrap();
        tag(t('a'), &|| y1.add(&outside))
    } else if t('t') {
        tag(t('a'), &|| y1.transpose(&[1, 0])?.transpose(&[1, 0]))
    } else if t('r') {
        let r = tag(t('s'), &|| y1.sum(&[1]));
        let b = tag(t('b'), &|| r.broadcast_in_dim(&[256, 1024], &[0]));
        tag(t('a'), &|| b.mul(&y1))
    } else {
        tag(t('a'), &|| y1.tanh())
    };
    let y2 = tag(t('2'), &|| a.matmul(&w));
    let y2 = if t('p') {
        tag(true, &|| y2.psum(&axis))
    } else {
        y2
    };
    let out = y2.matmul(&g).unwrap();
    let main = s.finish(&[out]).unwrap();
    let p = Program::on_device_mesh(
        main,
        Mesh::line(&axis).unwrap(),
        vec![Sharding::Replicated, Sharding::Replicated, Sharding::Dim(0)],
        vec![Sharding::Replicated],
    )
    .unwrap();
    match slice.compile_program(&p) {
        Err(e) => println!("{which}: {e}"),
        Ok(exe) => {
            let (f, b) = exe.optimized_program().unwrap();
            let m = OptimizedModule::parse(&f, &b).unwrap();
            let entry = m.computations.iter().find(|c| c.name == m.entry).unwrap();
            let sch = m.schedule_of(entry);
            println!(
                "{which}: ok, products {:?}, collectives {:?}",
                sch.products,
                sch.collectives
                    .iter()
                    .map(|c| (&c.kind, c.start, c.done, c.spanned_products))
                    .collect::<Vec<_>>()
            );
        }
    }
}
