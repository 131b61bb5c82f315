//! The StableHLO writer: one `write_*` per construct over a validated (scan-free) function.
//!
//! Every op is written in MLIR's generic form (`"stablehlo.add"(%a, %b) : (…) -> …`), with
//! inherent attributes as properties (`<{…}>`), which every StableHLO parser accepts
//! regardless of the pretty-printing conventions of its version. Output is deterministic:
//! names are numbered in emission order.

use std::fmt::Write as _;

use super::Sharding;
use crate::error::{Error, Result};
use crate::ir::{
    Axis, BinaryOp, Comparison, DotDims, Function, Literal, Node, Op, ReduceKind, UnaryOp, ValueId,
};
use crate::{DType, TensorType};

type MeshView<'a> = (&'a Axis, &'a [Sharding], &'a [Sharding]);

/// Writes the whole module.
pub(crate) fn write_program(main: &Function, mesh: Option<MeshView<'_>>) -> Result<String> {
    let mut w = Writer::new(mesh.map(|m| m.0.clone()));
    match mesh {
        None => w.write_single(main)?,
        // One device: every collective is the identity, and XLA leaves Shardy's
        // manual-computation markers unlowered when there is nothing to partition.
        Some((axis, _, _)) if axis.size == 1 => w.write_single(main)?,
        Some((axis, params, results)) => w.write_sharded(main, axis, params, results)?,
    }
    Ok(w.out)
}

struct Writer {
    out: String,
    next_value: usize,
    next_channel: usize,
    mesh: Option<Axis>,
}

/// Names of one function's values, indexed by [`ValueId`].
struct Names(Vec<String>);

impl Names {
    fn of(&self, v: ValueId) -> &str {
        &self.0[v]
    }

    fn list(&self, vs: &[ValueId]) -> String {
        vs.iter()
            .map(|&v| self.0[v].as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn types(ts: &[TensorType]) -> String {
    ts.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn result_types(ts: &[TensorType]) -> String {
    if ts.len() == 1 {
        ts[0].to_string()
    } else {
        format!("({})", types(ts))
    }
}

fn i64_array(v: impl IntoIterator<Item = i64>) -> String {
    let items: Vec<String> = v.into_iter().map(|x| x.to_string()).collect();
    if items.is_empty() {
        "array<i64>".to_owned()
    } else {
        format!("array<i64: {}>", items.join(", "))
    }
}

/// `name = array<i64: …>, …` for properties that are all integer arrays.
fn i64_fields(fields: &[(&str, &[i64])]) -> String {
    fields
        .iter()
        .map(|(name, v)| format!("{name} = {}", i64_array(v.iter().copied())))
        .collect::<Vec<_>>()
        .join(", ")
}

fn list(v: &[usize]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

fn shardy_dims(axis: &Axis, rank: usize, s: Sharding) -> String {
    let dims: Vec<String> = (0..rank)
        .map(|d| match s {
            Sharding::Dim(k) if k == d => format!("{{\"{}\"}}", axis.name),
            _ => "{}".to_owned(),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// MLIR text of a float constant: decimal when it round-trips, else the bit pattern.
fn float_text(v: f64, dtype: DType) -> String {
    // Whether the value is finite in the target type: 1e39 is an f64 but infinite in f32.
    let narrowed = match dtype {
        DType::F64 => v,
        DType::BF16 => f64::from(bf16_value(v as f32)),
        _ => f64::from(v as f32),
    };
    if !narrowed.is_finite() {
        return match dtype {
            DType::F64 => format!("0x{:016X}", v.to_bits()),
            DType::BF16 => format!("0x{:04X}", bf16_bits(v as f32)),
            _ => format!("0x{:08X}", (v as f32).to_bits()),
        };
    }
    let mut s = if dtype == DType::F64 {
        format!("{v:?}")
    } else {
        format!("{:?}", v as f32)
    };
    if !s.contains('.') {
        match s.find('e') {
            Some(p) => s.insert_str(p, ".0"),
            None => s.push_str(".0"),
        }
    }
    s
}

/// The f32 value of the bfloat16 nearest to `f`.
fn bf16_value(f: f32) -> f32 {
    f32::from_bits(u32::from(bf16_bits(f)) << 16)
}

/// bfloat16 bits of an f32, rounded to nearest even.
fn bf16_bits(f: f32) -> u16 {
    if f.is_nan() {
        return 0x7FC0;
    }
    let bits = f.to_bits();
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7FFF + lsb) >> 16) as u16
}

fn literal_text(lit: &Literal, ty: &TensorType) -> String {
    let splat = lit.len() == 1;
    match lit {
        Literal::Float(v) if splat => format!("dense<{}>", float_text(v[0], ty.dtype)),
        Literal::Int(v) if splat => format!("dense<{}>", v[0]),
        Literal::Bool(v) if splat => format!("dense<{}>", v[0]),
        _ => {
            let mut hex = String::from("0x");
            let mut push = |bytes: &[u8]| {
                for b in bytes {
                    let _ = write!(hex, "{b:02X}");
                }
            };
            match lit {
                Literal::Float(v) => v.iter().for_each(|&x| match ty.dtype {
                    DType::F64 => push(&x.to_le_bytes()),
                    DType::BF16 => push(&bf16_bits(x as f32).to_le_bytes()),
                    _ => push(&(x as f32).to_le_bytes()),
                }),
                Literal::Int(v) => v.iter().for_each(|&x| match ty.dtype {
                    DType::I64 => push(&x.to_le_bytes()),
                    _ => push(&(x as i32).to_le_bytes()),
                }),
                Literal::Bool(v) => v.iter().for_each(|&x| push(&[u8::from(x)])),
            }
            format!("dense<\"{hex}\">")
        }
    }
}

fn compare_type(dtype: DType) -> &'static str {
    match dtype {
        DType::I32 | DType::I64 => "SIGNED",
        DType::Bool => "UNSIGNED",
        _ => "FLOAT",
    }
}

fn direction(c: Comparison) -> &'static str {
    match c {
        Comparison::Eq => "EQ",
        Comparison::Ne => "NE",
        Comparison::Lt => "LT",
        Comparison::Le => "LE",
        Comparison::Gt => "GT",
        Comparison::Ge => "GE",
    }
}

fn dot_numbers(d: &DotDims) -> String {
    let mut fields = Vec::new();
    let mut field = |name: &str, v: &[usize]| {
        if !v.is_empty() {
            fields.push(format!("{name} = {}", list(v)));
        }
    };
    field("lhs_batching_dimensions", &d.lhs_batch);
    field("rhs_batching_dimensions", &d.rhs_batch);
    field("lhs_contracting_dimensions", &d.lhs_contract);
    field("rhs_contracting_dimensions", &d.rhs_contract);
    format!("#stablehlo.dot<{}>", fields.join(", "))
}

impl Writer {
    fn new(mesh: Option<Axis>) -> Self {
        Writer {
            out: String::new(),
            next_value: 0,
            next_channel: 1,
            mesh,
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        let n = self.next_value;
        self.next_value += 1;
        format!("%{prefix}{n}")
    }

    fn line(&mut self, depth: usize, text: &str) {
        self.out.push_str(&indent(depth));
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn module_name(f: &Function) -> String {
        let clean: String = f
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if clean.is_empty() {
            "main".to_owned()
        } else {
            clean
        }
    }

    /// Names `f`'s parameters with fresh `%{prefix}N` names; returns the names table and the
    /// `name: type` declarations, in order.
    fn name_params(&mut self, f: &Function, prefix: &str) -> (Names, Vec<String>) {
        let mut names = Names(vec![String::new(); f.values.len()]);
        let decls = f
            .params
            .iter()
            .map(|&p| {
                let n = self.fresh(prefix);
                let decl = format!("{n}: {}", f.values[p]);
                names.0[p] = n;
                decl
            })
            .collect();
        (names, decls)
    }

    fn write_single(&mut self, f: &Function) -> Result<()> {
        let module = Writer::module_name(f);
        self.line(0, &format!("module @{module} {{"));
        let (mut names, args) = self.name_params(f, "arg");
        self.line(
            1,
            &format!(
                "func.func public @main({}) -> ({}) {{",
                args.join(", "),
                types(&f.result_types())
            ),
        );
        self.write_nodes(f, &mut names, 2)?;
        self.line(
            2,
            &format!(
                "\"func.return\"({}) : ({}) -> ()",
                names.list(&f.results),
                types(&f.result_types())
            ),
        );
        self.line(1, "}");
        self.line(0, "}");
        Ok(())
    }

    fn write_sharded(
        &mut self,
        f: &Function,
        axis: &Axis,
        params: &[Sharding],
        results: &[Sharding],
    ) -> Result<()> {
        let n = axis.size;
        let module = Writer::module_name(f);
        let global = |t: &TensorType, s: Sharding| -> TensorType {
            match s {
                Sharding::Dim(d) => {
                    let mut dims = t.dims.clone();
                    dims[d] *= n as i64;
                    t.with_dims(dims)
                }
                Sharding::Replicated => t.clone(),
            }
        };
        let pt = f.param_types();
        let rt = f.result_types();
        let gp: Vec<TensorType> = pt.iter().zip(params).map(|(t, &s)| global(t, s)).collect();
        let gr: Vec<TensorType> = rt.iter().zip(results).map(|(t, &s)| global(t, s)).collect();
        let sh =
            |t: &TensorType, s: Sharding| format!("<@mesh, {}>", shardy_dims(axis, t.rank(), s));
        self.line(
            0,
            &format!(
                "module @{module} attributes {{mhlo.num_partitions = {n} : i32, mhlo.num_replicas = 1 : i32}} {{"
            ),
        );
        self.line(1, &format!("sdy.mesh @mesh = <[\"{}\"={n}]>", axis.name));
        let gargs: Vec<String> = gp.iter().map(|_| self.fresh("arg")).collect();
        let arg_decls: Vec<String> = gargs
            .iter()
            .zip(&gp)
            .zip(params)
            .map(|((a, t), &s)| format!("{a}: {t} {{sdy.sharding = #sdy.sharding{}}}", sh(t, s)))
            .collect();
        let res_decls: Vec<String> = gr
            .iter()
            .zip(results)
            .map(|(t, &s)| format!("{t} {{sdy.sharding = #sdy.sharding{}}}", sh(t, s)))
            .collect();
        self.line(
            1,
            &format!(
                "func.func public @main({}) -> ({}) {{",
                arg_decls.join(", "),
                res_decls.join(", ")
            ),
        );
        let mc = self.fresh("manual");
        let lhs = if gr.len() == 1 {
            mc.clone()
        } else {
            format!("{mc}:{}", gr.len())
        };
        let (mut names, local_args) = self.name_params(f, "local");
        let in_sh: Vec<String> = gp.iter().zip(params).map(|(t, &s)| sh(t, s)).collect();
        let out_sh: Vec<String> = gr.iter().zip(results).map(|(t, &s)| sh(t, s)).collect();
        self.line(
            2,
            &format!(
                "{lhs} = sdy.manual_computation({}) in_shardings=[{}] out_shardings=[{}] manual_axes={{\"{}\"}} ({}) {{",
                gargs.join(", "),
                in_sh.join(", "),
                out_sh.join(", "),
                axis.name,
                local_args.join(", ")
            ),
        );
        self.write_nodes(f, &mut names, 3)?;
        self.line(
            3,
            &format!("sdy.return {} : {}", names.list(&f.results), types(&rt)),
        );
        self.line(2, &format!("}} : ({}) -> ({})", types(&gp), types(&gr)));
        let outs: Vec<String> = if gr.len() == 1 {
            vec![mc]
        } else {
            (0..gr.len()).map(|i| format!("{mc}#{i}")).collect()
        };
        self.line(2, &format!("return {} : {}", outs.join(", "), types(&gr)));
        self.line(1, "}");
        self.line(0, "}");
        Ok(())
    }

    fn write_nodes(&mut self, f: &Function, names: &mut Names, depth: usize) -> Result<()> {
        for node in &f.nodes {
            self.write_node(f, node, names, depth)?;
        }
        Ok(())
    }

    /// Names the node's results and returns the assignment's left-hand side.
    fn bind(&mut self, node: &Node, names: &mut Names) -> String {
        let base = self.fresh("v");
        if node.results.len() == 1 {
            names.0[node.results[0]] = base.clone();
            base
        } else {
            for (i, &r) in node.results.iter().enumerate() {
                names.0[r] = format!("{base}#{i}");
            }
            format!("{base}:{}", node.results.len())
        }
    }

    /// Writes `lhs = "stablehlo.<op>"(operands) <{props}> (regions) : (types) -> types`.
    #[expect(clippy::too_many_arguments, reason = "the parts of one generic op")]
    fn generic(
        &mut self,
        depth: usize,
        lhs: &str,
        op: &str,
        operands: &str,
        props: &str,
        regions: &[String],
        operand_types: &[TensorType],
        results: &[TensorType],
    ) {
        let mut text = String::new();
        if !lhs.is_empty() {
            let _ = write!(text, "{lhs} = ");
        }
        let _ = write!(text, "\"stablehlo.{op}\"({operands})");
        if !props.is_empty() {
            let _ = write!(text, " <{{{props}}}>");
        }
        if !regions.is_empty() {
            let _ = write!(text, " ({})", regions.join(", "));
        }
        let _ = write!(
            text,
            " : ({}) -> {}",
            types(operand_types),
            result_types(results)
        );
        self.line(depth, &text);
    }

    /// A region holding a scalar binary computation (reductions, scatters, collectives).
    fn scalar_region(&mut self, dtype: DType, op: &str, depth: usize) -> String {
        let t = TensorType::scalar(dtype);
        let (a, b, r) = (self.fresh("a"), self.fresh("a"), self.fresh("v"));
        let pad = indent(depth + 1);
        format!(
            "{{\n{pad}^bb0({a}: {t}, {b}: {t}):\n{pad}  {r} = \"stablehlo.{op}\"({a}, {b}) : ({t}, {t}) -> {t}\n{pad}  \"stablehlo.return\"({r}) : ({t}) -> ()\n{pad}}}"
        )
    }

    /// A region holding a nested function (loop condition or body).
    fn function_region(&mut self, f: &Function, depth: usize) -> Result<String> {
        let saved = std::mem::take(&mut self.out);
        let (mut names, args) = self.name_params(f, "a");
        self.line(
            0,
            &format!("{{\n{}^bb0({}):", indent(depth + 1), args.join(", ")),
        );
        self.write_nodes(f, &mut names, depth + 2)?;
        self.line(
            depth + 2,
            &format!(
                "\"stablehlo.return\"({}) : ({}) -> ()",
                names.list(&f.results),
                types(&f.result_types())
            ),
        );
        self.out.push_str(&indent(depth + 1));
        self.out.push('}');
        let region = std::mem::replace(&mut self.out, saved);
        Ok(region)
    }

    fn channel_props(&mut self, op: &'static str, axis: &Axis) -> Result<String> {
        match &self.mesh {
            Some(m) if m == axis => {}
            Some(m) => {
                return Err(Error::invalid(
                    op,
                    format!(
                        "collective on axis `{}` in a program on axis `{}`",
                        axis.name, m.name
                    ),
                ));
            }
            None => {
                return Err(Error::invalid(
                    op,
                    format!(
                        "collective on axis `{}` in a single-device program; use Program::on_mesh",
                        axis.name
                    ),
                ));
            }
        }
        let h = self.next_channel;
        self.next_channel += 1;
        let ids: Vec<String> = (0..axis.size).map(|i| i.to_string()).collect();
        Ok(format!(
            "channel_handle = #stablehlo.channel_handle<handle = {h}, type = 1>, replica_groups = dense<[[{}]]> : tensor<1x{}xi64>",
            ids.join(", "),
            axis.size
        ))
    }

    fn write_node(
        &mut self,
        f: &Function,
        node: &Node,
        names: &mut Names,
        depth: usize,
    ) -> Result<()> {
        if let Some(axis) = collective_axis(&node.op) {
            let trivial = matches!(&self.mesh, Some(m) if m.size == 1 && m == axis);
            if trivial && !matches!(node.op, Op::AxisIndex { .. }) {
                names.0[node.results[0]] = names.of(node.operands[0]).to_owned();
                return Ok(());
            }
            if trivial {
                let lhs = self.bind(node, names);
                self.line(
                    depth,
                    &format!("{lhs} = \"stablehlo.constant\"() <{{value = dense<0> : tensor<i32>}}> : () -> tensor<i32>"),
                );
                return Ok(());
            }
        }
        let operand_types: Vec<TensorType> =
            node.operands.iter().map(|&v| f.values[v].clone()).collect();
        let result_types: Vec<TensorType> =
            node.results.iter().map(|&v| f.values[v].clone()).collect();
        let operands = names.list(&node.operands);
        let out0 = result_types
            .first()
            .cloned()
            .unwrap_or_else(|| TensorType::scalar(DType::F32));
        let x0 = operand_types
            .first()
            .cloned()
            .unwrap_or_else(|| TensorType::scalar(DType::F32));
        let simple = |w: &mut Writer, names: &mut Names, op: &str, props: String| {
            let lhs = w.bind(node, names);
            w.generic(
                depth,
                &lhs,
                op,
                &operands,
                &props,
                &[],
                &operand_types,
                &result_types,
            );
        };
        match &node.op {
            Op::Constant(lit) => {
                let props = format!("value = {} : {out0}", literal_text(lit, &out0));
                simple(self, names, "constant", props);
            }
            Op::Iota { dim } => {
                simple(self, names, "iota", format!("iota_dimension = {dim} : i64"))
            }
            Op::Unary(u) => {
                let name = node.op.name();
                let _: UnaryOp = *u;
                simple(self, names, name, String::new());
            }
            Op::Binary(b) => {
                let _: BinaryOp = *b;
                simple(self, names, node.op.name(), String::new());
            }
            Op::Compare(c) => simple(
                self,
                names,
                "compare",
                format!(
                    "comparison_direction = #stablehlo<comparison_direction {}>, compare_type = #stablehlo<comparison_type {}>",
                    direction(*c),
                    compare_type(x0.dtype)
                ),
            ),
            Op::Select | Op::Convert | Op::Reshape => {
                simple(self, names, node.op.name(), String::new())
            }
            Op::StopGradient => {
                names.0[node.results[0]] = names.of(node.operands[0]).to_owned();
            }
            Op::BroadcastInDim { dims } => simple(
                self,
                names,
                "broadcast_in_dim",
                format!(
                    "broadcast_dimensions = {}",
                    i64_array(dims.iter().map(|&d| d as i64))
                ),
            ),
            Op::Transpose { perm } => simple(
                self,
                names,
                "transpose",
                format!(
                    "permutation = {}",
                    i64_array(perm.iter().map(|&d| d as i64))
                ),
            ),
            Op::Slice {
                start,
                limit,
                stride,
            } => simple(
                self,
                names,
                "slice",
                i64_fields(&[
                    ("start_indices", start),
                    ("limit_indices", limit),
                    ("strides", stride),
                ]),
            ),
            Op::DynamicSlice { sizes } => simple(
                self,
                names,
                "dynamic_slice",
                format!("slice_sizes = {}", i64_array(sizes.iter().copied())),
            ),
            Op::DynamicUpdateSlice => simple(self, names, "dynamic_update_slice", String::new()),
            Op::Concatenate { dim } => simple(
                self,
                names,
                "concatenate",
                format!("dimension = {dim} : i64"),
            ),
            Op::Pad {
                low,
                high,
                interior,
            } => simple(
                self,
                names,
                "pad",
                i64_fields(&[
                    ("edge_padding_low", low),
                    ("edge_padding_high", high),
                    ("interior_padding", interior),
                ]),
            ),
            Op::Reduce { kind, axes } => {
                let init = self.fresh("v");
                let st = TensorType::scalar(x0.dtype);
                let (init_lit, region_op) = match kind {
                    ReduceKind::Sum => (literal_text(&zero_of(x0.dtype), &st), "add"),
                    ReduceKind::Max => (lowest_text(x0.dtype), "maximum"),
                };
                self.line(depth, &format!("{init} = \"stablehlo.constant\"() <{{value = {init_lit} : {st}}}> : () -> {st}"));
                let region = self.scalar_region(x0.dtype, region_op, depth);
                let lhs = self.bind(node, names);
                self.generic(
                    depth,
                    &lhs,
                    "reduce",
                    &format!("{operands}, {init}"),
                    &format!("dimensions = {}", i64_array(axes.iter().map(|&a| a as i64))),
                    &[region],
                    &[x0.clone(), st.clone()],
                    &result_types,
                );
            }
            // Nothing to sum along an empty axis (and a window of 0 would pad by −1).
            Op::Cumsum { axis, .. } if x0.dims[*axis] == 0 => {
                names.0[node.results[0]] = names.of(node.operands[0]).to_owned();
            }
            Op::Cumsum { axis, reverse } => {
                let init = self.fresh("v");
                let st = TensorType::scalar(x0.dtype);
                self.line(
                    depth,
                    &format!(
                        "{init} = \"stablehlo.constant\"() <{{value = {} : {st}}}> : () -> {st}",
                        literal_text(&zero_of(x0.dtype), &st)
                    ),
                );
                let n = x0.dims[*axis];
                let window: Vec<i64> = (0..x0.rank())
                    .map(|d| if d == *axis { n } else { 1 })
                    .collect();
                let pads: Vec<String> = (0..x0.rank())
                    .map(|d| match (d == *axis, reverse) {
                        (true, false) => format!("[{}, 0]", n - 1),
                        (true, true) => format!("[0, {}]", n - 1),
                        _ => "[0, 0]".to_owned(),
                    })
                    .collect();
                let region = self.scalar_region(x0.dtype, "add", depth);
                let lhs = self.bind(node, names);
                self.generic(
                    depth,
                    &lhs,
                    "reduce_window",
                    &format!("{operands}, {init}"),
                    &format!(
                        "window_dimensions = {}, window_strides = {}, padding = dense<[{}]> : tensor<{}x2xi64>",
                        i64_array(window),
                        i64_array(vec![1; x0.rank()]),
                        pads.join(", "),
                        x0.rank()
                    ),
                    &[region],
                    &[x0.clone(), st],
                    &result_types,
                );
            }
            Op::DotGeneral(d) => simple(
                self,
                names,
                "dot_general",
                format!("dot_dimension_numbers = {}", dot_numbers(d)),
            ),
            Op::Take { axis } => {
                let q = operand_types[1].rank();
                let r = x0.rank();
                let offset: Vec<usize> = (0..*axis).chain(axis + q..r - 1 + q).collect();
                let mut sizes = x0.dims.clone();
                sizes[*axis] = 1;
                let mut fields = Vec::new();
                if !offset.is_empty() {
                    fields.push(format!("offset_dims = {}", list(&offset)));
                }
                fields.push(format!("collapsed_slice_dims = [{axis}]"));
                fields.push(format!("start_index_map = [{axis}]"));
                fields.push(format!("index_vector_dim = {q}"));
                simple(
                    self,
                    names,
                    "gather",
                    format!(
                        "dimension_numbers = #stablehlo.gather<{}>, indices_are_sorted = false, slice_sizes = {}",
                        fields.join(", "),
                        i64_array(sizes)
                    ),
                );
            }
            Op::ScatterAdd { axis } => {
                let q = operand_types[1].rank();
                let r = x0.rank();
                let window: Vec<usize> = (0..*axis).chain(axis + q..r - 1 + q).collect();
                let mut fields = Vec::new();
                if !window.is_empty() {
                    fields.push(format!("update_window_dims = {}", list(&window)));
                }
                fields.push(format!("inserted_window_dims = [{axis}]"));
                fields.push(format!("scatter_dims_to_operand_dims = [{axis}]"));
                fields.push(format!("index_vector_dim = {q}"));
                let region = self.scalar_region(x0.dtype, "add", depth);
                let lhs = self.bind(node, names);
                self.generic(
                    depth,
                    &lhs,
                    "scatter",
                    &operands,
                    &format!(
                        "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<{}>, unique_indices = false",
                        fields.join(", ")
                    ),
                    &[region],
                    &operand_types,
                    &result_types,
                );
            }
            Op::TopK { k } => self.write_top_k(node, names, &x0, *k, depth),
            Op::TriangularSolve(o) => simple(
                self,
                names,
                "triangular_solve",
                format!(
                    "left_side = {}, lower = {}, transpose_a = #stablehlo<transpose {}>, unit_diagonal = {}",
                    o.left_side,
                    o.lower,
                    if o.transpose_a {
                        "TRANSPOSE"
                    } else {
                        "NO_TRANSPOSE"
                    },
                    o.unit_diagonal
                ),
            ),
            Op::OptimizationBarrier => simple(self, names, "optimization_barrier", String::new()),
            Op::While {
                cond,
                body,
                frontend_attributes,
            } => {
                let c = self.function_region(cond, depth)?;
                let b = self.function_region(body, depth)?;
                let lhs = self.bind(node, names);
                let mut text = format!("{lhs} = \"stablehlo.while\"({operands}) ({c}, {b})");
                if !frontend_attributes.is_empty() {
                    let attrs: Vec<String> = frontend_attributes
                        .iter()
                        .map(|(k, v)| format!("\"{k}\" = \"{v}\""))
                        .collect();
                    let _ = write!(
                        text,
                        " {{mhlo.frontend_attributes = {{{}}}}}",
                        attrs.join(", ")
                    );
                }
                let _ = write!(
                    text,
                    " : ({}) -> {}",
                    types(&operand_types),
                    self::result_types(&result_types)
                );
                self.line(depth, &text);
            }
            Op::Scan { .. } => {
                return Err(Error::invalid(
                    "scan",
                    "internal: scans are lowered before emission",
                ));
            }
            Op::AllGather { dim, axis } => {
                let ch = self.channel_props(node.op.name(), axis)?;
                simple(
                    self,
                    names,
                    "all_gather",
                    format!("all_gather_dim = {dim} : i64, {ch}, use_global_device_ids"),
                );
            }
            Op::ReduceScatter { dim, axis } => {
                let ch = self.channel_props(node.op.name(), axis)?;
                let region = self.scalar_region(x0.dtype, "add", depth);
                let lhs = self.bind(node, names);
                self.generic(
                    depth,
                    &lhs,
                    "reduce_scatter",
                    &operands,
                    &format!("{ch}, scatter_dimension = {dim} : i64, use_global_device_ids"),
                    &[region],
                    &operand_types,
                    &result_types,
                );
            }
            Op::AllReduce { axis } => {
                let ch = self.channel_props(node.op.name(), axis)?;
                let region = self.scalar_region(x0.dtype, "add", depth);
                let lhs = self.bind(node, names);
                self.generic(
                    depth,
                    &lhs,
                    "all_reduce",
                    &operands,
                    &format!("{ch}, use_global_device_ids"),
                    &[region],
                    &operand_types,
                    &result_types,
                );
            }
            Op::AllToAll {
                split_dim,
                concat_dim,
                axis,
            } => {
                let ch = self.channel_props(node.op.name(), axis)?;
                simple(
                    self,
                    names,
                    "all_to_all",
                    format!(
                        "{ch}, concat_dimension = {concat_dim} : i64, split_count = {} : i64, split_dimension = {split_dim} : i64",
                        axis.size
                    ),
                );
            }
            Op::AxisIndex { axis } => {
                if self.mesh.as_ref() != Some(axis) {
                    return Err(Error::invalid(
                        "axis_index",
                        format!("axis `{}` is not the program's mesh axis", axis.name),
                    ));
                }
                let pid = self.fresh("v");
                self.line(
                    depth,
                    &format!("{pid} = \"stablehlo.partition_id\"() : () -> tensor<ui32>"),
                );
                let lhs = self.bind(node, names);
                self.line(
                    depth,
                    &format!(
                        "{lhs} = \"stablehlo.convert\"({pid}) : (tensor<ui32>) -> tensor<i32>"
                    ),
                );
            }
        }
        Ok(())
    }

    /// Top-k as a stable descending sort of (values, indices) along the last dimension,
    /// then a slice of the first `k`.
    fn write_top_k(
        &mut self,
        node: &Node,
        names: &mut Names,
        x: &TensorType,
        k: usize,
        depth: usize,
    ) {
        let r = x.rank();
        let it = x.with_dtype(DType::I32);
        let iota = self.fresh("v");
        self.line(
            depth,
            &format!(
                "{iota} = \"stablehlo.iota\"() <{{iota_dimension = {} : i64}}> : () -> {it}",
                r - 1
            ),
        );
        let st = TensorType::scalar(x.dtype);
        let si = TensorType::scalar(DType::I32);
        let (a, b, c, d, p) = (
            self.fresh("a"),
            self.fresh("a"),
            self.fresh("a"),
            self.fresh("a"),
            self.fresh("v"),
        );
        let pad = indent(depth + 1);
        let region = format!(
            "{{\n{pad}^bb0({a}: {st}, {b}: {st}, {c}: {si}, {d}: {si}):\n{pad}  {p} = \"stablehlo.compare\"({a}, {b}) <{{comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type {}>}}> : ({st}, {st}) -> tensor<i1>\n{pad}  \"stablehlo.return\"({p}) : (tensor<i1>) -> ()\n{pad}}}",
            if x.dtype.is_float() {
                "TOTALORDER"
            } else {
                compare_type(x.dtype)
            }
        );
        let sorted = self.fresh("v");
        let operand = names.of(node.operands[0]).to_owned();
        self.generic(
            depth,
            &format!("{sorted}:2"),
            "sort",
            &format!("{operand}, {iota}"),
            &format!("dimension = {} : i64, is_stable = true", r - 1),
            &[region],
            &[x.clone(), it.clone()],
            &[x.clone(), it.clone()],
        );
        let mut limit = x.dims.clone();
        limit[r - 1] = k as i64;
        let props = i64_fields(&[
            ("start_indices", &vec![0; r]),
            ("limit_indices", &limit),
            ("strides", &vec![1; r]),
        ]);
        for (i, src_ty) in [x.clone(), it].into_iter().enumerate() {
            let out = self.fresh("v");
            names.0[node.results[i]] = out.clone();
            self.generic(
                depth,
                &out,
                "slice",
                &format!("{sorted}#{i}"),
                &props,
                &[],
                std::slice::from_ref(&src_ty),
                &[src_ty.with_dims(limit.clone())],
            );
        }
    }
}

/// The mesh axis of a collective op.
fn collective_axis(op: &Op) -> Option<&Axis> {
    match op {
        Op::AllGather { axis, .. }
        | Op::ReduceScatter { axis, .. }
        | Op::AllReduce { axis }
        | Op::AllToAll { axis, .. }
        | Op::AxisIndex { axis } => Some(axis),
        _ => None,
    }
}

fn zero_of(dtype: DType) -> Literal {
    match dtype {
        DType::I32 | DType::I64 => Literal::Int(vec![0]),
        DType::Bool => Literal::Bool(vec![false]),
        _ => Literal::Float(vec![0.0]),
    }
}

/// The identity of `max` for a type: −∞ for floats, the minimum for integers.
fn lowest_text(dtype: DType) -> String {
    match dtype {
        DType::I32 => format!("dense<{}>", i32::MIN),
        DType::I64 => format!("dense<{}>", i64::MIN),
        DType::Bool => "dense<false>".to_owned(),
        d => format!("dense<{}>", float_text(f64::NEG_INFINITY, d)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_always_have_a_point_or_are_hex() {
        assert_eq!(float_text(1.0, DType::F32), "1.0");
        assert_eq!(float_text(1e-10, DType::F32), "1.0e-10");
        assert_eq!(float_text(-2.5, DType::F64), "-2.5");
        assert_eq!(float_text(f64::NEG_INFINITY, DType::F32), "0xFF800000");
        assert_eq!(float_text(f64::INFINITY, DType::BF16), "0x7F80");
        // Finite in f64, infinite once narrowed.
        assert_eq!(float_text(-1e39, DType::F32), "0xFF800000");
        assert_eq!(float_text(3.4e38, DType::BF16), "0x7F80");
        assert_eq!(float_text(3.0e38, DType::F32), "3.0e38");
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_bits(1.0), 0x3F80);
        // 1 + 2^-8 lies exactly between two bf16 values; ties go to the even one (1.0).
        assert_eq!(bf16_bits(1.0 + 1.0 / 256.0), 0x3F80);
        assert_eq!(bf16_bits(1.0 + 3.0 / 256.0), 0x3F82);
    }
}
