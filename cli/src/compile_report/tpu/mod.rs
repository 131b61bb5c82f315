//! `compile-report --topology`: the step compiled by libtpu for a TPU slice this machine does
//! not have, and what the TPU program says about it — memory per device against the chip's
//! HBM, the collectives and whether they run asynchronously, and the prefetch as the TPU
//! compiler scheduled it (`OptimizedModule::schedule_of`).

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use stackscan::Program;
use stackscan::fsdp::{Adam, training_program};
use stackscan_runtime::hlo::{HloComputation, OptimizedModule, ScheduledCollective, primitive};
use stackscan_runtime::{ClientOptions, Plugin, Topology, plugin};

use super::{CompileReport, CompileReportArgs, CompileReportError, Step};

mod text;

/// The TPU side of a report.
#[derive(Clone, Debug, Serialize)]
pub struct TpuReport {
    /// The topology's name (`tpu7x:2x2x1`).
    pub topology: String,
    /// The device kind (`TPU7x`).
    pub device_kind: String,
    /// Devices in the slice.
    pub slice_devices: usize,
    /// Memory one program may use per device, bytes, as libtpu reports it.
    pub hbm_bytes: Option<i64>,
    /// Argument bytes per device.
    pub arguments: i64,
    /// Output bytes per device.
    pub outputs: i64,
    /// Bytes of arguments reused for outputs (donated).
    pub alias: i64,
    /// Temporaries per device.
    pub temp: i64,
    /// Arguments, outputs and temporaries, the aliased bytes counted once.
    pub total: i64,
    /// HBM left over (negative: over by that much), where the HBM is known.
    pub headroom: Option<i64>,
    /// Whether libtpu was left to turn whole-slice all-gathers into all-reduces
    /// (`--decompose-gathers`); stackscan's TPU compiles turn that rewrite off.
    pub gathers_decomposed: bool,
    /// Every collective of the program by kind and element type: bytes written per device,
    /// and how many run asynchronously (a start and a done) or not.
    pub collectives: Vec<CollectiveRow>,
    /// Each layer loop as scheduled, outermost first.
    pub loops: Vec<LoopSchedule>,
    /// With `--dump`: the most temporary bytes live at once, read from libtpu's buffer
    /// assignment (none where the step was refused).
    pub live_peak: Option<super::live_peak::LivePeak>,
    /// libtpu's refusal where the step does not fit its HBM: the compile stops before a
    /// program exists, and `temp` is then the temporaries the refusal names (arguments and
    /// outputs unknown, the collectives and loops empty).
    pub out_of_memory: Option<String>,
}

/// Collectives of one kind and element type.
#[derive(Clone, Debug, Serialize)]
pub struct CollectiveRow {
    /// The kind (`all-gather`).
    pub kind: String,
    /// For all-reduces the compiler built from another collective, that one (`all-gather`:
    /// libtpu gathers over a large slice by all-reducing each shard written into zeros).
    pub stands_for: Option<String>,
    /// The element type (`bf16`).
    pub dtype: String,
    /// Instances in the program (each loop body counted once).
    pub count: usize,
    /// Of which asynchronous.
    pub asynchronous: usize,
    /// Bytes they write per device per run of their computation.
    pub bytes: u64,
}

/// One loop of the TPU program: its matrix products and how its collectives overlap them.
#[derive(Clone, Debug, Serialize)]
pub struct LoopSchedule {
    /// stackscan's label of the loop (`forward layer, layers 0–2, ping-pong`).
    pub label: String,
    /// Matrix products in its body (a dot or convolution, or a fusion holding one), those
    /// of one trip of its nested loops included.
    pub products: usize,
    /// The positions of its own products in the body's schedule.
    pub product_positions: Vec<usize>,
    /// Instructions in the body's schedule.
    pub scheduled: usize,
    /// Its all-gathers, and the all-reduces the compiler made of all-gathers.
    pub gathers: CollectiveSpans,
    /// Its reduce-scatters, and the all-reduces the compiler made of reduce-scatters.
    pub scatters: CollectiveSpans,
}

/// The collectives of one kind in a loop body, and the compute they span.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CollectiveSpans {
    /// How many.
    pub count: usize,
    /// Of which asynchronous.
    pub asynchronous: usize,
    /// Of which overlap at least one matrix product (in flight across it).
    pub overlapping: usize,
    /// Fewest products one of them spans.
    pub min_span: usize,
    /// Most products one of them spans.
    pub max_span: usize,
    /// Fewest compute instructions (products, fusions, elementwise ops; not bookkeeping) one
    /// of them spans.
    pub min_compute: usize,
    /// Most compute instructions one of them spans.
    pub max_compute: usize,
    /// Of which the compiled program still tags `xla_explicit_fsdp` (the prefetch gathers
    /// stackscan tags, where the compiler kept the tag).
    pub explicit_fsdp: usize,
    /// Their starts, as positions in the body's schedule, and their dones.
    pub windows: Vec<(usize, usize)>,
    /// The bytes each writes per device (its result's), in the order of `windows`.
    pub bytes: Vec<u64>,
}

impl CollectiveSpans {
    /// The spans of `collectives`, each writing `bytes(c)`.
    fn of(
        collectives: &[&ScheduledCollective],
        bytes: impl Fn(&ScheduledCollective) -> u64,
    ) -> CollectiveSpans {
        let spans = || collectives.iter().map(|c| c.spanned_products);
        CollectiveSpans {
            count: collectives.len(),
            asynchronous: collectives.iter().filter(|c| c.asynchronous).count(),
            overlapping: spans().filter(|&n| n > 0).count(),
            min_span: spans().min().unwrap_or(0),
            max_span: spans().max().unwrap_or(0),
            min_compute: collectives
                .iter()
                .map(|c| c.spanned_compute)
                .min()
                .unwrap_or(0),
            max_compute: collectives
                .iter()
                .map(|c| c.spanned_compute)
                .max()
                .unwrap_or(0),
            explicit_fsdp: collectives
                .iter()
                .filter(|c| {
                    c.frontend_attributes
                        .iter()
                        .any(|(k, _)| k == stackscan::fsdp::EXPLICIT_FSDP.0)
                })
                .count(),
            windows: collectives.iter().map(|c| (c.start, c.done)).collect(),
            bytes: collectives.iter().map(|c| bytes(c)).collect(),
        }
    }
}

/// Every loop of `module` with stackscan's label (a `while`, or a kept step's `conditional`),
/// and its body's schedule.
fn loop_schedules(module: &OptimizedModule) -> Vec<LoopSchedule> {
    let by_id: BTreeMap<i64, &HloComputation> =
        module.computations.iter().map(|c| (c.id, c)).collect();
    let mut out = Vec::new();
    for c in from_entry(module, &by_id) {
        for i in c.instructions.iter().filter(|i| super::loops::is_loop(i)) {
            let Some(label) = i.attribute(stackscan::fsdp::LOOP_LABEL) else {
                continue;
            };
            // A while calls its body, then its condition; a kept step's case, the branch
            // that never runs, then the step.
            let body = if i.opcode == "while" {
                i.called.first()
            } else {
                i.called.last()
            };
            let Some(body) = body.and_then(|id| by_id.get(id)) else {
                continue;
            };
            let schedule = module.schedule_of(body);
            let order = body.in_order();
            // A collective writes its result: its done's (an asynchronous start's result is
            // a tuple of operands and result).
            let bytes = |c: &ScheduledCollective| order.get(c.done).map_or(0, |d| d.shape.bytes());
            let of = |kind: &str| {
                let v: Vec<&ScheduledCollective> = schedule
                    .collectives
                    .iter()
                    .filter(|c| c.role() == kind)
                    .collect();
                CollectiveSpans::of(&v, bytes)
            };
            out.push(LoopSchedule {
                label: label.to_owned(),
                products: schedule.products.len()
                    + schedule.nested.iter().map(|&(_, n)| n).sum::<usize>(),
                product_positions: schedule.products.clone(),
                scheduled: body.in_order().len(),
                gathers: of("all-gather"),
                scatters: of("reduce-scatter"),
            });
        }
    }
    out
}

/// The computations the entry runs (not fusions' own), the entry first, then in the order
/// they are called.
fn from_entry<'m>(
    module: &'m OptimizedModule,
    by_id: &BTreeMap<i64, &'m HloComputation>,
) -> Vec<&'m HloComputation> {
    let mut out: Vec<&HloComputation> = module
        .computations
        .iter()
        .filter(|c| c.name == module.entry)
        .collect();
    let mut at = 0;
    while at < out.len() {
        let c = out[at];
        at += 1;
        // A fusion's computation is part of its instruction; an async start's runs the
        // collective the start stands for.
        for i in c
            .instructions
            .iter()
            .filter(|i| i.opcode != "fusion" && i.opcode != "async-start")
        {
            for callee in i.called.iter().filter_map(|id| by_id.get(id)) {
                if !out.iter().any(|o| o.id == callee.id) {
                    out.push(callee);
                }
            }
        }
    }
    out
}

/// Collectives by kind and element type over the whole program.
fn collective_rows(module: &OptimizedModule) -> Vec<CollectiveRow> {
    let by_id: BTreeMap<i64, &HloComputation> =
        module.computations.iter().map(|c| (c.id, c)).collect();
    let mut rows: BTreeMap<(String, Option<String>, String), CollectiveRow> = BTreeMap::new();
    for c in from_entry(module, &by_id) {
        let by_name: BTreeMap<&str, &stackscan_runtime::hlo::HloInstruction> = c
            .instructions
            .iter()
            .map(|i| (i.name.as_str(), i))
            .collect();
        for sc in module.schedule_of(c).collectives {
            // The bytes a collective writes are its result's: the done's for an asynchronous
            // one, whose start's result is a tuple of operands and result.
            let written = c
                .in_order()
                .get(sc.done)
                .map(|d| (d.shape.bytes(), leaf_type(&d.shape)))
                .or_else(|| {
                    by_name
                        .get(sc.name.as_str())
                        .map(|i| (i.shape.bytes(), leaf_type(&i.shape)))
                })
                .unwrap_or((0, 0));
            let dtype = primitive::name(written.1);
            let row = rows
                .entry((sc.kind.clone(), sc.stands_for.clone(), dtype.clone()))
                .or_insert_with(|| CollectiveRow {
                    kind: sc.kind.clone(),
                    stands_for: sc.stands_for.clone(),
                    dtype,
                    count: 0,
                    asynchronous: 0,
                    bytes: 0,
                });
            row.count += 1;
            row.asynchronous += usize::from(sc.asynchronous);
            row.bytes += written.0;
        }
    }
    rows.into_values().collect()
}

/// The TPU plugin named by `plugin_spec` (`cpu`, the flag's default, means libtpu here) and
/// the topology `name` described by it.
pub(crate) fn open(plugin_spec: &str, name: &str) -> Result<Topology, CompileReportError> {
    let spec = if plugin_spec == "cpu" {
        "tpu"
    } else {
        plugin_spec
    };
    let tpu = Plugin::load_compile_only(plugin::resolve_compile_only(spec)?)?;
    Topology::create(&tpu, name, &ClientOptions::default()).map_err(|e| match e {
        stackscan_runtime::Error::UnknownTopology { .. } => {
            CompileReportError::Config(e.to_string())
        }
        other => CompileReportError::Runtime(other),
    })
}

/// Lowers the step the flags describe over every device of `slice`, compiles it with the TPU
/// compiler and reads the program back.
pub(crate) fn report(
    args: &CompileReportArgs,
    slice: &Topology,
) -> Result<CompileReport, CompileReportError> {
    let devices = slice.devices().len();
    let (name, config, model, layout, options) = super::declared_step(args, devices)?;
    // What a trainer on this plugin would run.
    let options = stackscan_runtime::backend::plan_options_for(slice.platform(), options);
    let started = Instant::now();
    let program = training_program(&model, options, &layout, Adam::default(), 1)?.update;
    let text = program.emit()?;
    let lower_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let compiled = slice.compile_program_with(&program, |o| {
        let o = match args.decompose_gathers {
            true => stackscan_runtime::allow_gather_decomposition(o),
            false => o,
        };
        match &args.dump {
            Some(dir) => o
                .with_override(
                    "xla_dump_to",
                    stackscan_runtime::OverrideValue::String(dir.display().to_string()),
                )
                .with_override(
                    "xla_dump_latency_hiding_schedule",
                    stackscan_runtime::OverrideValue::Bool(true),
                ),
            None => o,
        }
    });
    let xla_compile_seconds = started.elapsed().as_secs_f64();
    let device = &slice.devices()[0];
    let hbm = device.memory_bytes();
    // A step that does not fit is a finding: libtpu refuses to finish the compile and says
    // how much its temporaries need, which the report gives in place of the program's.
    let (memory, module, out_of_memory) = match compiled {
        Err(stackscan_runtime::Error::Pjrt {
            code: stackscan_runtime::ErrorCode::ResourceExhausted,
            message,
            ..
        }) => {
            let temp = hbm_oom_temporaries(&message).unwrap_or(0);
            let memory = declared_memory(&program, temp);
            let module = OptimizedModule {
                name: String::new(),
                entry: String::new(),
                computations: Vec::new(),
            };
            (memory, module, Some(message))
        }
        other => {
            let exe = other?;
            let (format, bytes) = exe.optimized_program()?;
            if let Some(path) = &args.save_executable {
                let serialized = exe.serialize()?;
                std::fs::write(path, serialized).map_err(|e| {
                    CompileReportError::Config(format!("cannot write {}: {e}", path.display()))
                })?;
            }
            let module = OptimizedModule::parse(&format, &bytes)?;
            (exe.memory_stats()?, module, None)
        }
    };
    let total = memory.footprint();
    let estimate = super::MemoryComparison::of(
        &model,
        devices,
        options,
        stackscan::cost::fusion::Rule::Shared,
        &memory,
    )?;
    let mut report = CompileReport::assemble(
        Step {
            model: name.to_string(),
            config,
            devices,
            options,
            platform: format!("{} {}", slice.platform(), slice.platform_version()),
            lower_seconds,
            text: &text,
        },
        xla_compile_seconds,
        estimate,
        memory.temp,
        &module,
        usize::from(args.top),
    );
    report.tpu = Some(TpuReport {
        topology: slice.name().to_owned(),
        device_kind: device.kind.clone(),
        slice_devices: devices,
        hbm_bytes: hbm,
        arguments: memory.arguments,
        outputs: memory.outputs,
        alias: memory.alias,
        temp: memory.temp,
        total,
        headroom: hbm.map(|h| h - total),
        collectives: collective_rows(&module),
        loops: loop_schedules(&module),
        live_peak: match (&args.dump, &out_of_memory) {
            (Some(dir), None) => Some(super::live_peak::read(dir)?),
            _ => None,
        },
        out_of_memory,
        gathers_decomposed: args.decompose_gathers,
    });
    Ok(report)
}

/// A device's arguments, outputs and donated bytes as the program's own types declare them,
/// with `temp` the temporaries: libtpu refuses a step that does not fit before it reports
/// them, and checks the temporaries alone against the HBM, while the state the program takes
/// and returns sits beside them.
fn declared_memory(program: &Program, temp: i64) -> stackscan_runtime::CompiledMemoryStats {
    let main = program.main();
    let params = main.param_types();
    let bytes = |t: &stackscan::TensorType| t.size_in_bytes() as i64;
    stackscan_runtime::CompiledMemoryStats {
        arguments: params.iter().map(bytes).sum(),
        outputs: main.result_types().iter().map(bytes).sum(),
        alias: program
            .aliases()
            .iter()
            .filter_map(|a| params.get(a.param))
            .map(bytes)
            .sum(),
        temp,
        ..Default::default()
    }
}

/// The bytes of temporaries a libtpu out-of-memory refusal names ("the total memory required
/// for HLO temporaries (164.94G) exceeds available HBM (94.74G)"; its unit letters are binary
/// multiples).
fn hbm_oom_temporaries(message: &str) -> Option<i64> {
    let at = message.find("HLO temporaries (")? + "HLO temporaries (".len();
    let figure = &message[at..message[at..].find(')')? + at];
    let unit = figure.chars().last()?;
    let value: f64 = figure[..figure.len() - unit.len_utf8()].parse().ok()?;
    let scale = match unit {
        'K' => 1u64 << 10,
        'M' => 1 << 20,
        'G' => 1 << 30,
        'T' => 1 << 40,
        _ => return None,
    };
    Some((value * scale as f64) as i64)
}

/// The element type of an array shape, or of a tuple's first array (a combined collective's
/// operands share one).
fn leaf_type(shape: &stackscan_runtime::hlo::HloShape) -> i32 {
    match shape.tuple.first() {
        Some(first) => leaf_type(first),
        None => shape.element_type,
    }
}

/// Mebibytes of `bytes`.
#[cfg(test)]
mod tests {
    use super::{declared_memory, hbm_oom_temporaries};
    use stackscan::{Alias, DType, Program, Scope, TensorType};

    #[test]
    fn a_refused_step_keeps_the_state_its_program_declares() {
        // (w: f32[4, 8], x: f32[2, 8]) -> (w', y: f32[2, 4]), w donated to w'.
        let f = Scope::new("main");
        let w = f.param(TensorType::new(DType::F32, [4, 8]));
        let x = f.param(TensorType::new(DType::F32, [2, 8]));
        let y = x.matmul(&w.transpose(&[1, 0]).unwrap()).unwrap();
        let main = f.finish(&[w.clone(), y]).unwrap();
        let program = Program::new(main)
            .with_aliases(vec![Alias {
                param: 0,
                result: 0,
            }])
            .unwrap();
        let m = declared_memory(&program, 1000);
        assert_eq!(
            (m.arguments, m.outputs, m.alias, m.temp),
            (192, 160, 128, 1000)
        );
        assert_eq!(m.footprint(), 192 + 160 - 128 + 1000);
    }

    #[test]
    fn an_out_of_memory_refusal_gives_its_temporaries() {
        let message = "E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory \
                       required for HLO temporaries (164.94G) exceeds available HBM (94.74G).";
        let bytes = hbm_oom_temporaries(message).unwrap();
        assert_eq!(bytes, (164.94 * (1u64 << 30) as f64) as i64);
        assert_eq!(
            hbm_oom_temporaries("HLO temporaries (12.5M) exceed"),
            Some(13_107_200)
        );
        assert_eq!(hbm_oom_temporaries("no figure here"), None);
        assert_eq!(hbm_oom_temporaries("HLO temporaries (12.5Q)"), None);
    }
}
