//! The text every op line goes through: the [`Writer`] that names values in emission order
//! and writes generic op lines and regions, and the pieces of StableHLO syntax the op
//! families share. It knows no op family: the node dispatch is given to it ([`NodeText`])
//! by the writer above the families (`emit::writer`), so the families build on this module
//! and nothing here builds on them.

use std::fmt::{self, Write as _};

use crate::dtype::DType;
use crate::ir::{BinaryOp, Function, Node, Op, ValueId};
use crate::mesh::Mesh;
use crate::types::TensorType;

/// Writes one function body (and, for `main`, the module around it) into `out`.
///
/// A region is written by a writer of its own into a `String`, since its text sits inside
/// the op's line, and its values are numbered before the op's results; the counters move
/// between the two so names stay unique and in emission order.
pub(crate) struct Writer {
    out: String,
    names: Names,
    counters: Counters,
    /// The program's mesh, from which collectives take their replica groups.
    mesh: Option<Mesh>,
    /// The frontend attributes of the node being written, given to each op line it becomes.
    node_attributes: String,
    /// What writes one node: the writer above the families, which dispatches on its op.
    node_text: NodeText,
}

/// Writes one node's lines (its family's text) with a [`Writer`].
pub(crate) type NodeText = fn(&mut Writer, &Site<'_>) -> fmt::Result;

/// The numbering shared by a writer and the writers of its regions.
struct Counters {
    next_value: usize,
    next_channel: usize,
}

/// Names of one function's values, indexed by [`ValueId`].
#[derive(Default)]
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

/// One node being written, with the types of its function's values.
pub(crate) struct Site<'a> {
    /// The node.
    pub(crate) node: &'a Node,
    /// The function holding it.
    pub(crate) f: &'a Function,
    /// Indentation level of its lines.
    pub(crate) depth: usize,
}

impl Site<'_> {
    /// The type of operand `i`.
    pub(crate) fn operand(&self, i: usize) -> &TensorType {
        &self.f.values[self.node.operands[i]]
    }

    /// Operand types, in order.
    pub(crate) fn operand_types(&self) -> Vec<TensorType> {
        self.node
            .operands
            .iter()
            .map(|&v| self.f.values[v].clone())
            .collect()
    }

    /// Result types, in order.
    pub(crate) fn result_types(&self) -> Vec<TensorType> {
        self.node
            .results
            .iter()
            .map(|&v| self.f.values[v].clone())
            .collect()
    }

    /// `(operand types) -> result types` of the node as it stands.
    pub(crate) fn signature(&self) -> String {
        signature(&self.operand_types(), &self.result_types())
    }
}

/// The parts of one generic op line:
/// `lhs = "stablehlo.<name>"(operands) <{props}> (regions) {attributes} : types`.
#[derive(Default)]
pub(crate) struct OpLine<'a> {
    /// Left-hand side (`%v3`, `%v3:2`), empty for none.
    pub(crate) lhs: &'a str,
    /// The StableHLO op, without the dialect.
    pub(crate) name: &'a str,
    /// Operand names, comma-separated.
    pub(crate) operands: &'a str,
    /// Inherent attributes, without the `<{…}>`; empty for none.
    pub(crate) props: &'a str,
    /// Region texts.
    pub(crate) regions: &'a [String],
    /// Discardable attributes, without the braces; empty for none.
    pub(crate) attributes: &'a str,
    /// `(operand types) -> result types`.
    pub(crate) types: &'a str,
}

impl OpLine<'_> {
    /// Writes the line, indented to `depth`, into `out`.
    pub(crate) fn write_to(&self, out: &mut impl fmt::Write, depth: usize) -> fmt::Result {
        write!(out, "{}", indent(depth))?;
        if !self.lhs.is_empty() {
            write!(out, "{} = ", self.lhs)?;
        }
        write!(out, "\"stablehlo.{}\"({})", self.name, self.operands)?;
        if !self.props.is_empty() {
            write!(out, " <{{{}}}>", self.props)?;
        }
        if !self.regions.is_empty() {
            write!(out, " ({})", self.regions.join(", "))?;
        }
        if !self.attributes.is_empty() {
            write!(out, " {{{}}}", self.attributes)?;
        }
        writeln!(out, " : {}", self.types)
    }
}

/// A region's text, opening on the op's line and closing at `depth + 1`: a block over
/// `args` (`name: type`), `body`'s lines (written at `depth + 2`), and the return of
/// `results`.
pub(crate) fn region(
    depth: usize,
    args: &[String],
    body: &str,
    results: &str,
    result_types: &[TensorType],
) -> String {
    let pad = indent(depth + 1);
    format!(
        "{{\n{pad}^bb0({}):\n{body}{pad}  \"stablehlo.return\"({results}) : ({}) -> ()\n{pad}}}",
        args.join(", "),
        types(result_types)
    )
}

/// `(a, b) -> c`, or `-> (c, d)` for several results.
pub(crate) fn signature(operands: &[TensorType], results: &[TensorType]) -> String {
    let results = if results.len() == 1 {
        results[0].to_string()
    } else {
        format!("({})", types(results))
    };
    format!("({}) -> {results}", types(operands))
}

pub(crate) fn types(ts: &[TensorType]) -> String {
    ts.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `array<i64: …>` (`array<i64>` when empty).
pub(crate) fn i64_array(v: impl IntoIterator<Item = i64>) -> String {
    let items: Vec<String> = v.into_iter().map(|x| x.to_string()).collect();
    if items.is_empty() {
        "array<i64>".to_owned()
    } else {
        format!("array<i64: {}>", items.join(", "))
    }
}

/// `name = array<i64: …>, …` for properties that are all integer arrays.
pub(crate) fn i64_fields(fields: &[(&str, &[i64])]) -> String {
    fields
        .iter()
        .map(|(name, v)| format!("{name} = {}", i64_array(v.iter().copied())))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `[a, b, …]`.
pub(crate) fn list(v: &[usize]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `mhlo.frontend_attributes = {"k" = "v", …}`, or nothing for no attributes.
pub(crate) fn frontend_attributes(attributes: &[(String, String)]) -> String {
    if attributes.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = attributes
        .iter()
        .map(|(k, v)| format!("\"{k}\" = \"{v}\""))
        .collect();
    format!("mhlo.frontend_attributes = {{{}}}", pairs.join(", "))
}

/// Two spaces per level.
pub(crate) fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

impl Writer {
    /// A writer of a new module over `mesh`, writing each node with `node_text`.
    pub(crate) fn new(mesh: Option<Mesh>, node_text: NodeText) -> Self {
        Writer {
            out: String::new(),
            names: Names::default(),
            counters: Counters {
                next_value: 0,
                next_channel: 1,
            },
            mesh,
            node_attributes: String::new(),
            node_text,
        }
    }

    /// The text written.
    pub(crate) fn into_text(self) -> String {
        self.out
    }

    /// The program's mesh (validation made every collective's axis one of its axes).
    pub(crate) fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_ref()
    }

    /// A new `%{prefix}N` name.
    pub(crate) fn fresh(&mut self, prefix: &str) -> String {
        let n = self.counters.next_value;
        self.counters.next_value += 1;
        format!("%{prefix}{n}")
    }

    /// A new channel handle, unique in the module.
    pub(crate) fn channel(&mut self) -> usize {
        let h = self.counters.next_channel;
        self.counters.next_channel += 1;
        h
    }

    /// Writes one indented line.
    pub(crate) fn line(&mut self, depth: usize, text: &str) -> fmt::Result {
        writeln!(self.out, "{}{text}", indent(depth))
    }

    /// The operands' names, comma-separated.
    pub(crate) fn operands(&self, node: &Node) -> String {
        self.names.list(&node.operands)
    }

    /// The names of values `vs` of the function being written, comma-separated.
    pub(crate) fn value_names(&self, vs: &[ValueId]) -> String {
        self.names.list(vs)
    }

    /// The name of one operand.
    pub(crate) fn operand(&self, node: &Node, i: usize) -> String {
        self.names.of(node.operands[i]).to_owned()
    }

    /// Names `node`'s result `i` `name`, for an op written by the caller's own lines.
    pub(crate) fn name_result(&mut self, node: &Node, i: usize, name: String) {
        self.names.0[node.results[i]] = name;
    }

    /// Writes nothing: the node's result is its first operand.
    pub(crate) fn alias(&mut self, node: &Node) {
        self.names.0[node.results[0]] = self.names.of(node.operands[0]).to_owned();
    }

    /// Names the node's one result `value`, a name already written.
    pub(crate) fn alias_to(&mut self, node: &Node, value: &str) {
        self.names.0[node.results[0]] = value.to_owned();
    }

    /// Names the node's results and returns the assignment's left-hand side.
    pub(crate) fn bind(&mut self, node: &Node) -> String {
        let base = self.fresh("v");
        if node.results.len() == 1 {
            self.names.0[node.results[0]] = base.clone();
            base
        } else {
            for (i, &r) in node.results.iter().enumerate() {
                self.names.0[r] = format!("{base}#{i}");
            }
            format!("{base}:{}", node.results.len())
        }
    }

    /// Writes one generic op line, with the frontend attributes of the node it is part of
    /// (a line that sets its own, a loop's, has them merged in by its family).
    pub(crate) fn op(&mut self, depth: usize, line: OpLine<'_>) -> fmt::Result {
        if line.attributes.is_empty() && !self.node_attributes.is_empty() {
            let attributes = std::mem::take(&mut self.node_attributes);
            let written = OpLine {
                attributes: &attributes,
                ..line
            }
            .write_to(&mut self.out, depth);
            self.node_attributes = attributes;
            return written;
        }
        line.write_to(&mut self.out, depth)
    }

    /// Binds the node's results and writes it as one op `name` over its own operands and
    /// types. Regions must be written before: their values are numbered first.
    pub(crate) fn node_as(
        &mut self,
        s: &Site<'_>,
        name: &str,
        props: &str,
        regions: &[String],
    ) -> fmt::Result {
        let operands = self.operands(s.node);
        let lhs = self.bind(s.node);
        self.op(
            s.depth,
            OpLine {
                lhs: &lhs,
                name,
                operands: &operands,
                props,
                regions,
                types: &s.signature(),
                ..OpLine::default()
            },
        )
    }

    /// The node as the StableHLO op of the same name, without regions.
    pub(crate) fn simple(&mut self, s: &Site<'_>, props: &str) -> fmt::Result {
        self.node_as(s, s.node.op.name(), props, &[])
    }

    /// A region holding a scalar binary computation (reductions, scatters, collectives).
    pub(crate) fn scalar_region(
        &mut self,
        op: BinaryOp,
        dtype: DType,
        depth: usize,
    ) -> Result<String, fmt::Error> {
        let t = TensorType::scalar(dtype);
        let (a, b, r) = (self.fresh("a"), self.fresh("a"), self.fresh("v"));
        let mut body = String::new();
        OpLine {
            lhs: &r,
            name: Op::Binary(op).name(),
            operands: &format!("{a}, {b}"),
            types: &signature(&[t.clone(), t.clone()], std::slice::from_ref(&t)),
            ..OpLine::default()
        }
        .write_to(&mut body, depth + 2)?;
        Ok(region(
            depth,
            &[format!("{a}: {t}"), format!("{b}: {t}")],
            &body,
            &r,
            &[t],
        ))
    }

    /// A writer for a region of this one's text: its own names, the same counters (taken
    /// back when the region is written), mesh and node dispatch.
    fn nested(&self) -> Writer {
        Writer {
            out: String::new(),
            names: Names::default(),
            counters: Counters {
                next_value: self.counters.next_value,
                next_channel: self.counters.next_channel,
            },
            mesh: self.mesh.clone(),
            node_attributes: String::new(),
            node_text: self.node_text,
        }
    }

    /// A region holding a nested function (loop condition or body).
    pub(crate) fn function_region(
        &mut self,
        f: &Function,
        depth: usize,
    ) -> Result<String, fmt::Error> {
        let mut body = self.nested();
        let args = body.name_params(f, "a");
        body.write_nodes(f, depth + 2)?;
        let results = body.names.list(&f.results);
        self.counters = body.counters;
        Ok(region(depth, &args, &body.out, &results, &f.result_types()))
    }

    /// A region without arguments holding `f`, whose parameters are the enclosing values
    /// named `args` (a `case` branch reads its operands by name).
    pub(crate) fn capturing_region(
        &mut self,
        f: &Function,
        args: &[String],
        depth: usize,
    ) -> Result<String, fmt::Error> {
        if f.params.len() != args.len() {
            return Err(fmt::Error);
        }
        let mut body = self.nested();
        body.names = Names(vec![String::new(); f.values.len()]);
        for (&p, name) in f.params.iter().zip(args) {
            body.names.0[p] = name.clone();
        }
        body.write_nodes(f, depth + 2)?;
        let results = body.names.list(&f.results);
        self.counters = body.counters;
        let pad = indent(depth + 1);
        Ok(format!(
            "{{\n{body}{pad}  \"stablehlo.return\"({results}) : ({}) -> ()\n{pad}}}",
            types(&f.result_types()),
            body = body.out
        ))
    }

    /// Names `f`'s parameters with fresh `%{prefix}N` names; returns the `name: type`
    /// declarations, in order.
    pub(crate) fn name_params(&mut self, f: &Function, prefix: &str) -> Vec<String> {
        self.names = Names(vec![String::new(); f.values.len()]);
        f.params
            .iter()
            .map(|&p| {
                let n = self.fresh(prefix);
                let decl = format!("{n}: {}", f.values[p]);
                self.names.0[p] = n;
                decl
            })
            .collect()
    }

    pub(crate) fn write_nodes(&mut self, f: &Function, depth: usize) -> fmt::Result {
        for node in &f.nodes {
            self.write_node(&Site { node, f, depth })?;
        }
        Ok(())
    }

    /// Hands the node to its family's text, every line of it with the node's frontend
    /// attributes.
    fn write_node(&mut self, s: &Site<'_>) -> fmt::Result {
        self.node_attributes = frontend_attributes(&s.node.attributes);
        let written = (self.node_text)(self, s);
        self.node_attributes.clear();
        written
    }
}
