//! The reader against modules encoded here by hand, field by field, as `hlo.proto` numbers
//! them; the reader against a real plugin's output is tested in `tests/optimized_program.rs`.

use super::*;

/// A length-delimited field.
fn msg(number: u32, body: &[u8]) -> Vec<u8> {
    let mut out = key(number, 2);
    out.extend(varint(body.len() as u64));
    out.extend_from_slice(body);
    out
}

fn key(number: u32, wire_type: u64) -> Vec<u8> {
    varint((u64::from(number) << 3) | wire_type)
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn int_field(number: u32, v: u64) -> Vec<u8> {
    let mut out = key(number, 0);
    out.extend(varint(v));
    out
}

fn shape(element_type: u64, dims: &[u64]) -> Vec<u8> {
    let mut body = int_field(2, element_type);
    let packed: Vec<u8> = dims.iter().flat_map(|&d| varint(d)).collect();
    body.extend(msg(3, &packed));
    body
}

fn instruction(name: &str, opcode: &str, shape_body: &[u8], called: &[u64]) -> Vec<u8> {
    let mut body = msg(1, name.as_bytes());
    body.extend(msg(2, opcode.as_bytes()));
    body.extend(msg(3, shape_body));
    for &c in called {
        body.extend(int_field(38, c));
    }
    body
}

/// `instruction` with a frontend attribute and a backend configuration.
fn annotated(base: Vec<u8>, key: &str, value: &str, backend: &str) -> Vec<u8> {
    let mut entry = msg(1, key.as_bytes());
    entry.extend(msg(2, value.as_bytes()));
    let mut out = base;
    out.extend(msg(68, &msg(1, &entry)));
    out.extend(msg(43, backend.as_bytes()));
    out
}

fn computation(name: &str, id: u64, instructions: &[Vec<u8>]) -> Vec<u8> {
    let mut body = msg(1, name.as_bytes());
    for i in instructions {
        body.extend(msg(2, i));
    }
    body.extend(int_field(5, id));
    body
}

/// An entry with a parameter, a bf16 all-gather-start of 4 × 8, a fusion calling computation
/// 2 and a while calling 3 and 4; computation 2 holds a multiply and an add.
fn module() -> Vec<u8> {
    let f32_8 = shape(11, &[8]);
    let bf16_4x8 = shape(16, &[4, 8]);
    let entry = computation(
        "main",
        1,
        &[
            instruction("p", "parameter", &f32_8, &[]),
            instruction("ag", "all-gather-start", &bf16_4x8, &[]),
            instruction("f", "fusion", &f32_8, &[2]),
            annotated(
                instruction("w", "while", &f32_8, &[3, 4]),
                "stackscan_loop",
                "forward mlp",
                r#"{"known_trip_count":{"n":"7"},"known_init_step":{"init":"0"}}"#,
            ),
        ],
    );
    let fused = computation(
        "fused",
        2,
        &[
            instruction("m", "multiply", &f32_8, &[]),
            instruction("a", "add", &f32_8, &[]),
        ],
    );
    let body = computation("body", 3, &[instruction("g", "all-gather", &f32_8, &[])]);
    let cond = computation(
        "cond",
        4,
        &[instruction("c", "compare", &shape(1, &[]), &[])],
    );
    let mut out = msg(1, b"m");
    out.extend(msg(2, b"main"));
    for c in [entry, fused, body, cond] {
        out.extend(msg(3, &c));
    }
    out
}

#[test]
fn a_hand_encoded_module_reads_back() -> Result<()> {
    let m = OptimizedModule::parse("hlo", &module())?;
    assert_eq!((m.name.as_str(), m.entry.as_str()), ("m", "main"));
    assert_eq!(m.computations.len(), 4);
    assert_eq!(m.instructions().count(), 8);
    let ag = &m.computations[0].instructions[1];
    assert_eq!(ag.shape.element_type, primitive::BF16);
    assert_eq!(ag.shape.dims, [4, 8]);
    assert_eq!(ag.shape.bytes(), 64);
    let w = &m.computations[0].instructions[3];
    assert_eq!(w.called, [3, 4]);
    assert_eq!(w.attribute("stackscan_loop"), Some("forward mlp"));
    assert_eq!(w.attribute("other"), None);
    assert_eq!(w.known_trip_count(), Some(7));
    assert_eq!(m.computations[0].instructions[0].known_trip_count(), None);
    let (outer, inner) = m.opcode_counts();
    assert_eq!(outer.get("fusion"), Some(&1));
    assert_eq!(outer.get("multiply"), None);
    assert_eq!(inner.get("multiply"), Some(&1));
    assert_eq!(outer.values().sum::<usize>(), 6);
    let gathers: Vec<&str> = m
        .collectives("all-gather")
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(gathers, ["ag", "g"]);
    Ok(())
}

#[test]
fn the_wrapped_format_and_bad_input() -> Result<()> {
    let wrapped = msg(1, &module());
    assert_eq!(
        OptimizedModule::parse("hlo_with_config", &wrapped)?,
        OptimizedModule::parse("hlo", &module())?
    );
    let named = |r: Result<OptimizedModule>| match r {
        Err(Error::OptimizedProgram { format, .. }) => format,
        other => panic!("{other:?}"),
    };
    assert_eq!(named(OptimizedModule::parse("mlir", &module())), "mlir");
    let cut = &module()[..20];
    assert_eq!(named(OptimizedModule::parse("hlo", cut)), "hlo");
    assert_eq!(named(OptimizedModule::parse("hlo", &[])), "hlo");
    Ok(())
}

#[test]
fn shapes_size_their_elements() {
    let tuple = HloShape {
        element_type: primitive::TUPLE,
        dims: vec![],
        tuple: vec![
            HloShape {
                element_type: primitive::F32,
                dims: vec![2, 3],
                tuple: vec![],
            },
            HloShape {
                element_type: primitive::BF16,
                dims: vec![5],
                tuple: vec![],
            },
        ],
    };
    assert_eq!(tuple.bytes(), 24 + 10);
    assert_eq!(tuple.element_bytes(), None);
}

/// `instruction` with an id and operands (`HloInstructionProto` fields 35 and 36).
fn with_ids(base: Vec<u8>, id: u64, operands: &[u64]) -> Vec<u8> {
    let mut out = base;
    out.extend(int_field(35, id));
    for &o in operands {
        out.extend(int_field(36, o));
    }
    out
}

/// A scheduled body: an asynchronous all-gather (an `async-start` of a computation holding
/// it, an update, a done) around two products (a fusion holding a dot, a convolution), a
/// synchronous reduce-scatter after them; the module's order differs from the schedule's.
fn scheduled_module() -> Vec<u8> {
    let f32_8 = shape(11, &[8]);
    let tuple = shape(13, &[]);
    let body = computation(
        "body",
        1,
        &[
            with_ids(instruction("rs", "reduce-scatter", &f32_8, &[]), 7, &[6]),
            with_ids(instruction("p", "parameter", &f32_8, &[]), 1, &[]),
            with_ids(instruction("start", "async-start", &tuple, &[2]), 2, &[1]),
            with_ids(instruction("f", "fusion", &f32_8, &[3]), 3, &[1]),
            with_ids(instruction("update", "async-update", &tuple, &[]), 4, &[2]),
            with_ids(instruction("c", "convolution", &f32_8, &[]), 5, &[3]),
            with_ids(instruction("done", "async-done", &f32_8, &[]), 6, &[4]),
        ],
    );
    let wrapped = computation("wrapped", 2, &[instruction("call", "call", &f32_8, &[4])]);
    let fused = computation("fused", 3, &[instruction("d", "dot", &f32_8, &[])]);
    let inner = computation("inner", 4, &[instruction("g", "all-gather", &f32_8, &[])]);
    // HloScheduleProto: computation 1 runs instructions 1, 2, 3, 4, 5, 6, 7 in that order.
    let order: Vec<u8> = [1u64, 2, 3, 4, 5, 6, 7]
        .iter()
        .flat_map(|&i| varint(i))
        .collect();
    let mut entry = int_field(1, 1);
    entry.extend(msg(2, &msg(1, &order)));
    let schedule = msg(1, &entry);
    let mut out = msg(1, b"m");
    out.extend(msg(2, b"body"));
    for c in [body, wrapped, fused, inner] {
        out.extend(msg(3, &c));
    }
    out.extend(msg(7, &schedule));
    out
}

#[test]
fn the_schedule_pairs_async_collectives_and_counts_the_products_they_span() -> Result<()> {
    let m = OptimizedModule::parse("hlo", &scheduled_module())?;
    let body = &m.computations[0];
    let names: Vec<&str> = body.in_order().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["p", "start", "f", "update", "c", "done", "rs"]);
    let s = m.schedule_of(body);
    assert_eq!(
        s.products,
        [2, 4],
        "the fusion holding a dot and the convolution"
    );
    let kinds: Vec<(&str, bool, usize, usize, usize)> = s
        .collectives
        .iter()
        .map(|c| {
            (
                c.kind.as_str(),
                c.asynchronous,
                c.start,
                c.done,
                c.spanned_products,
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("all-gather", true, 1, 5, 2),
            ("reduce-scatter", false, 6, 6, 0)
        ]
    );
    Ok(())
}

/// `instruction` with the name of the op it was made from (`OpMetadata.op_name`, field 2 of
/// `HloInstructionProto.metadata`, field 7).
fn made_from(base: Vec<u8>, op_name: &str) -> Vec<u8> {
    let mut out = base;
    out.extend(msg(7, &msg(2, op_name.as_bytes())));
    out
}

/// A body as libtpu compiles FSDP over a large slice: a gather as an all-reduce of a
/// fusion that writes the shard into zeros, a scatter as an all-reduce that each device
/// slices (through a tuple element), an all-reduce the compiler named after the all-gather it
/// came from, and a loss's all-reduce that is one.
fn all_reduce_module() -> Vec<u8> {
    let f32_8 = shape(11, &[8]);
    let tuple = shape(13, &[]);
    let body = computation(
        "body",
        1,
        &[
            with_ids(instruction("p", "parameter", &f32_8, &[]), 1, &[]),
            with_ids(instruction("shard", "fusion", &f32_8, &[2]), 2, &[1]),
            with_ids(instruction("gather", "all-reduce", &f32_8, &[]), 3, &[2]),
            with_ids(instruction("grads", "all-reduce", &tuple, &[]), 4, &[1]),
            with_ids(instruction("e", "get-tuple-element", &f32_8, &[]), 5, &[4]),
            with_ids(instruction("mine", "dynamic-slice", &f32_8, &[]), 6, &[5]),
            made_from(
                with_ids(instruction("named", "all-reduce", &f32_8, &[]), 7, &[1]),
                "call.1/all-gather.16",
            ),
            with_ids(instruction("loss", "all-reduce", &f32_8, &[]), 8, &[1]),
            with_ids(instruction("use", "add", &f32_8, &[]), 9, &[8, 3, 7]),
        ],
    );
    let fused = computation(
        "fused",
        2,
        &[
            instruction("z", "broadcast", &f32_8, &[]),
            instruction("w", "dynamic-update-slice", &f32_8, &[]),
        ],
    );
    let mut out = msg(1, b"m");
    out.extend(msg(2, b"body"));
    for c in [body, fused] {
        out.extend(msg(3, &c));
    }
    out
}

#[test]
fn an_all_reduce_the_compiler_made_of_a_gather_or_a_scatter_says_so() -> Result<()> {
    let m = OptimizedModule::parse("hlo", &all_reduce_module())?;
    let s = m.schedule_of(&m.computations[0]);
    let roles: Vec<(&str, Option<&str>, &str)> = s
        .collectives
        .iter()
        .map(|c| (c.name.as_str(), c.stands_for.as_deref(), c.role()))
        .collect();
    assert_eq!(
        roles,
        [
            ("gather", Some("all-gather"), "all-gather"),
            ("grads", Some("reduce-scatter"), "reduce-scatter"),
            ("named", Some("all-gather"), "all-gather"),
            ("loss", None, "all-reduce"),
        ]
    );
    assert_eq!(
        m.computations[0].instructions[6].op_name,
        "call.1/all-gather.16"
    );
    Ok(())
}
