//! Deviceless TPU compiles through libtpu (the pinned `tpu` plugin), on a machine with no TPU:
//! a topology made from its name, its devices, and a sharded program compiled for it, with
//! its memory, its optimized program and its serialized executable read back.
//!
//! Its own `main` (no test harness): libtpu's environment
//! ([`topology::prepare_environment`]) is set before any other thread exists, which the
//! harness's threads would not allow. Each check runs in turn and says its name.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::{Axis, DType, Mesh, Program, Scope, Sharding, TensorType};
use stackscan_runtime::hlo::OptimizedModule;
use stackscan_runtime::{ClientOptions, Error, Plugin, Topology, plugin, topology};

/// One check: its name and what it runs on the plugin.
type Check = (&'static str, fn(&Plugin));

/// The topology the checks compile for: 2 × 2 TPU7x chips, two devices a chip.
const SLICE: &str = "tpu7x:2x2x1";

fn main() {
    topology::prepare_environment().expect("the environment is set before any thread");
    let tpu = Plugin::load_compile_only(plugin::resolve_compile_only("tpu").unwrap()).unwrap();
    let checks: [Check; 4] = [
        (
            "a_named_slice_has_its_devices",
            a_named_slice_has_its_devices,
        ),
        (
            "an_unknown_name_lists_the_known_forms",
            an_unknown_name_lists_the_known_forms,
        ),
        (
            "a_sharded_program_compiles_for_the_slice",
            a_sharded_program_compiles_for_the_slice,
        ),
        (
            "a_mesh_that_does_not_divide_the_slice_is_refused",
            a_mesh_that_does_not_divide_the_slice_is_refused,
        ),
    ];
    for (name, check) in checks {
        check(&tpu);
        println!("test {name} ... ok");
    }
    println!("{} passed, 0 failed", checks.len());
}

fn a_named_slice_has_its_devices(tpu: &Plugin) {
    let slice = Topology::create(tpu, SLICE, &ClientOptions::default()).unwrap();
    assert_eq!(slice.platform(), "tpu");
    let devices = slice.devices();
    assert_eq!(devices.len(), 8, "4 chips of 2 devices");
    let mut ids: Vec<i32> = devices.iter().map(|d| d.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..8).collect::<Vec<_>>());
    for d in devices {
        assert_eq!(d.kind, "TPU7x");
        let coords = d.coords().expect("every device has coordinates");
        assert_eq!(coords.len(), 3);
        assert!(
            coords[0] < 2 && coords[1] < 2 && coords[2] == 0,
            "{coords:?}"
        );
        assert!(matches!(d.core_on_chip(), Some(0 | 1)));
        // TPU7x: 192 GB of HBM a chip, shared by its two devices.
        let hbm = d
            .memory_bytes()
            .expect("libtpu reports the device's memory");
        assert!((80 << 30..=100 << 30).contains(&hbm), "{hbm}");
    }
    // Each chip (coordinates) holds exactly two devices, one of each core.
    for d in devices {
        let same_chip = devices.iter().filter(|e| e.coords() == d.coords()).count();
        assert_eq!(same_chip, 2, "{:?}", d.coords());
    }
    let v5p = Topology::create(tpu, "v5p:2x2x1", &ClientOptions::default()).unwrap();
    assert_eq!(v5p.devices().len(), 4, "v5p: one device a chip");
}

fn an_unknown_name_lists_the_known_forms(tpu: &Plugin) {
    let err = Topology::create(tpu, "tpu9:2x2", &ClientOptions::default()).unwrap_err();
    assert!(matches!(err, Error::UnknownTopology { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("tpu9:2x2"), "{message}");
    assert!(
        message.contains("tpu7x:AxBxC") && message.contains("v5p"),
        "{message}"
    );
}

/// Each device's `[8, 128]` rows gathered, multiplied by a replicated `[128, 128]`, and the
/// product's rows reduce-scattered back.
fn sharded_program(devices: usize) -> Program {
    let axis = Axis::new("fsdp", devices);
    let s = Scope::new("main");
    let x = s.param(TensorType::new(DType::F32, [8, 128]));
    let w = s.param(TensorType::new(DType::F32, [128, 128]));
    let all = x.all_gather(0, &axis).unwrap();
    let y = all.matmul(&w).unwrap();
    let back = y.reduce_scatter(0, &axis).unwrap();
    let main = s.finish(&[back]).unwrap();
    Program::on_device_mesh(
        main,
        Mesh::line(&axis).unwrap(),
        vec![Sharding::Dim(0), Sharding::Replicated],
        vec![Sharding::Dim(0)],
    )
    .unwrap()
}

fn a_sharded_program_compiles_for_the_slice(tpu: &Plugin) {
    let slice = Topology::create(tpu, SLICE, &ClientOptions::default()).unwrap();
    let exe = slice.compile_program(&sharded_program(8)).unwrap();
    let memory = exe.memory_stats().unwrap();
    // Per device: the [8, 128] rows and the [128, 128] weight in, [8, 128] rows out (f32).
    assert_eq!(memory.arguments, (8 * 128 + 128 * 128) * 4, "{memory:?}");
    assert_eq!(memory.outputs, 8 * 128 * 4, "{memory:?}");
    assert!(
        memory.temp > 0,
        "the gathered rows are temporaries: {memory:?}"
    );
    let (format, bytes) = exe.optimized_program().unwrap();
    let module = OptimizedModule::parse(&format, &bytes).unwrap();
    let entry = module
        .computations
        .iter()
        .find(|c| c.name == module.entry)
        .unwrap();
    assert!(
        entry.schedule.is_some(),
        "a TPU module carries its schedule"
    );
    let schedule = module.schedule_of(entry);
    let kinds: Vec<&str> = schedule
        .collectives
        .iter()
        .map(|c| c.kind.as_str())
        .collect();
    assert!(kinds.contains(&"all-gather"), "{kinds:?}");
    // The scatter may come back as an all-reduce and a slice: XLA's choice on this slice.
    assert!(
        kinds.contains(&"reduce-scatter") || kinds.contains(&"all-reduce"),
        "{kinds:?}"
    );
    assert!(
        !schedule.products.is_empty(),
        "the product is in the schedule"
    );
    // The product needs the whole gather: the gather cannot overlap it.
    let gather = schedule
        .collectives
        .iter()
        .find(|c| c.kind == "all-gather")
        .unwrap();
    assert_eq!(gather.spanned_products, 0, "{gather:?}");
    let serialized = exe.serialize().unwrap();
    assert!(serialized.len() > 1000, "{} bytes", serialized.len());
}

fn a_mesh_that_does_not_divide_the_slice_is_refused(tpu: &Plugin) {
    let slice = Topology::create(tpu, SLICE, &ClientOptions::default()).unwrap();
    let err = slice.compile_program(&sharded_program(3)).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("3 devices") && message.contains("tpu7x:2x2x1"),
        "{message}"
    );
    assert!(message.contains("1, 2, 4 or 8"), "{message}");
    // A divisor is a mesh on the slice's first devices.
    slice.compile_program(&sharded_program(4)).unwrap();
}
