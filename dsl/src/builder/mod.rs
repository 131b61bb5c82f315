//! Building graphs: a [`Scope`] is a function under construction, a [`Tensor`] one of its values.
//!
//! Ops are methods on [`Tensor`] and return `Result`: shapes and element types are checked as
//! each node is added. Loop bodies are built in child scopes; a body may use any tensor of an
//! enclosing scope, and the builder turns each such use into an explicit parameter of the body
//! (a loop-invariant carry of a `while`, a constant input of a `scan`), so the finished
//! [`Function`] has no hidden captures.
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//!
//! let f = Scope::new("double");
//! let x = f.param(TensorType::new(DType::F32, [3]));
//! let y = x.add(&x)?;
//! let func = f.finish(&[y])?;
//! assert_eq!(func.nodes.len(), 1);
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::infer::infer;
use crate::ir::{Function, Literal, Node, Op, ValueId};
use crate::replay::{Replay, replay};
use crate::types::TensorType;

mod case;
mod depend;

pub use case::Branch;

/// A function under construction.
#[derive(Clone)]
pub struct Scope(Rc<ScopeInner>);

struct ScopeInner {
    parent: Option<Scope>,
    depth: usize,
    func: RefCell<Function>,
    /// Values of the parent used here, and the parameter each became: (parent value, param).
    captures: RefCell<Vec<(ValueId, ValueId)>>,
    /// Frontend attributes given to every node built here while they are set.
    attributes: RefCell<Vec<(String, String)>>,
    /// Auxiliary outputs recorded here ([`crate::auxiliary`]), taken by whoever traces: value
    /// ids, not tensors, since a tensor holds its scope and the scope would then hold itself.
    aux: RefCell<Vec<(crate::auxiliary::AuxOutput, ValueId)>>,
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let func = self.0.func.borrow();
        write!(
            f,
            "Scope({}, depth {}, {} nodes)",
            func.name,
            self.0.depth,
            func.nodes.len()
        )
    }
}

/// A value of a graph under construction: a handle to a node result or parameter.
#[derive(Clone)]
pub struct Tensor {
    scope: Scope,
    id: ValueId,
    ty: TensorType,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor(%{} : {})", self.id, self.ty)
    }
}

impl Tensor {
    /// Element type and dimensions.
    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.ty.dtype
    }

    /// Dimensions.
    pub fn dims(&self) -> &[i64] {
        &self.ty.dims
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.ty.rank()
    }

    /// The scope that defines this tensor.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The value id in the defining scope's function.
    pub fn id(&self) -> ValueId {
        self.id
    }
}

impl Scope {
    /// Starts a new top-level function.
    pub fn new(name: &str) -> Scope {
        Scope::with_parent(name, None)
    }

    fn with_parent(name: &str, parent: Option<Scope>) -> Scope {
        let depth = parent.as_ref().map_or(0, |p| p.0.depth + 1);
        Scope(Rc::new(ScopeInner {
            parent,
            depth,
            func: RefCell::new(Function {
                name: name.to_owned(),
                values: Vec::new(),
                params: Vec::new(),
                nodes: Vec::new(),
                results: Vec::new(),
            }),
            captures: RefCell::new(Vec::new()),
            attributes: RefCell::new(Vec::new()),
            aux: RefCell::new(Vec::new()),
        }))
    }

    /// Whether this scope is a function's own, not a loop body's.
    pub(crate) fn is_top_level(&self) -> bool {
        self.0.parent.is_none()
    }

    /// The auxiliary output recorded as `name`, and its value so far.
    pub(crate) fn aux_entry(&self, name: &str) -> Option<(crate::auxiliary::AuxOutput, Tensor)> {
        let aux = self.0.aux.borrow();
        let (output, id) = aux.iter().find(|(o, _)| o.name == name)?.clone();
        drop(aux);
        Some((output, self.tensor(id)))
    }

    /// Sets the value of auxiliary output `output` (recorded last if it is new).
    pub(crate) fn set_aux(&self, output: crate::auxiliary::AuxOutput, value: &Tensor) {
        let mut aux = self.0.aux.borrow_mut();
        match aux.iter_mut().find(|(o, _)| o.name == output.name) {
            Some((_, id)) => *id = value.id,
            None => aux.push((output, value.id)),
        }
    }

    /// Whether this scope is still alive, asked later (for tests of reference cycles).
    #[cfg(test)]
    pub(crate) fn liveness(&self) -> impl Fn() -> bool + use<> {
        let weak = Rc::downgrade(&self.0);
        move || weak.upgrade().is_some()
    }

    pub(crate) fn drain_aux(&self) -> Vec<(crate::auxiliary::AuxOutput, Tensor)> {
        let taken = std::mem::take(&mut *self.0.aux.borrow_mut());
        taken
            .into_iter()
            .map(|(output, id)| (output, self.tensor(id)))
            .collect()
    }

    fn same(&self, other: &Scope) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    fn is_ancestor_of(&self, other: &Scope) -> bool {
        let mut s = other.0.parent.clone();
        while let Some(p) = s {
            if p.same(self) {
                return true;
            }
            s = p.0.parent.clone();
        }
        false
    }

    fn tensor(&self, id: ValueId) -> Tensor {
        let ty = self.0.func.borrow().values[id].clone();
        Tensor {
            scope: self.clone(),
            id,
            ty,
        }
    }

    fn new_value(&self, ty: TensorType) -> ValueId {
        let mut f = self.0.func.borrow_mut();
        f.values.push(ty);
        f.values.len() - 1
    }

    /// Adds a parameter.
    pub fn param(&self, ty: TensorType) -> Tensor {
        let id = self.new_value(ty);
        self.0.func.borrow_mut().params.push(id);
        self.tensor(id)
    }

    /// Parameters added so far, as tensors.
    pub fn params(&self) -> Vec<Tensor> {
        let ids = self.0.func.borrow().params.clone();
        ids.into_iter().map(|id| self.tensor(id)).collect()
    }

    /// The value id of `t` in this scope, capturing it from an enclosing scope if needed.
    fn import(&self, op: &'static str, t: &Tensor) -> Result<ValueId> {
        if t.scope.same(self) {
            return Ok(t.id);
        }
        let parent = match &self.0.parent {
            Some(p) if t.scope.same(p) || t.scope.is_ancestor_of(p) => p,
            _ => return Err(Error::ForeignTensor { op }),
        };
        let outer = parent.import(op, t)?;
        if let Some(&(_, inner)) = self.0.captures.borrow().iter().find(|(o, _)| *o == outer) {
            return Ok(inner);
        }
        let inner = self.new_value(t.ty.clone());
        self.0.captures.borrow_mut().push((outer, inner));
        Ok(inner)
    }

    /// The innermost scope among the operands' scopes (they must lie on one chain).
    fn deepest<'a>(op: &'static str, operands: &[&'a Tensor]) -> Result<&'a Scope> {
        let mut best: &Scope = &operands
            .first()
            .ok_or_else(|| Error::invalid(op, "needs at least one operand"))?
            .scope;
        for t in &operands[1..] {
            let s = &t.scope;
            if s.same(best) || s.is_ancestor_of(best) {
                continue;
            }
            if best.is_ancestor_of(s) {
                best = s;
            } else {
                return Err(Error::ForeignTensor { op });
            }
        }
        Ok(best)
    }

    /// Applies `op` in this scope.
    pub(crate) fn apply_here(
        &self,
        op: Op,
        operands: &[&Tensor],
        target: Option<&TensorType>,
    ) -> Result<Vec<Tensor>> {
        let name = op.name();
        let ids = operands
            .iter()
            .map(|t| self.import(name, t))
            .collect::<Result<Vec<_>>>()?;
        let types: Vec<TensorType> = operands.iter().map(|t| t.ty.clone()).collect();
        let result_types = infer(&op, &types, target)?;
        if let Some(bad) = result_types.iter().find(|t| t.dims.iter().any(|&d| d < 0)) {
            return Err(Error::invalid(name, format!("negative dimension in {bad}")));
        }
        let fits = |t: &TensorType| {
            t.dims
                .iter()
                .try_fold(t.dtype.size_in_bytes() as i64, |n, &d| n.checked_mul(d))
                .is_some()
        };
        if let Some(bad) = result_types.iter().find(|t| !fits(t)) {
            return Err(Error::invalid(
                name,
                format!("{bad} is too large to address"),
            ));
        }
        let results: Vec<ValueId> = result_types
            .into_iter()
            .map(|t| self.new_value(t))
            .collect();
        let attributes = if op.takes_scope_attributes() {
            self.0.attributes.borrow().clone()
        } else {
            Vec::new()
        };
        self.0.func.borrow_mut().nodes.push(Node {
            op,
            operands: ids,
            results: results.clone(),
            attributes,
        });
        Ok(results.into_iter().map(|id| self.tensor(id)).collect())
    }

    /// Applies `op` in the innermost scope of its operands.
    pub(crate) fn apply(
        op: Op,
        operands: &[&Tensor],
        target: Option<&TensorType>,
    ) -> Result<Vec<Tensor>> {
        let scope = Scope::deepest(op.name(), operands)?.clone();
        scope.apply_here(op, operands, target)
    }

    /// Applies a single-result `op` in the innermost scope of its operands.
    pub(crate) fn apply1(
        op: Op,
        operands: &[&Tensor],
        target: Option<&TensorType>,
    ) -> Result<Tensor> {
        let mut out = Scope::apply(op, operands, target)?;
        Ok(out.remove(0))
    }

    /// A constant: one value per element, or one value for all (splat).
    pub fn constant(&self, literal: Literal, ty: TensorType) -> Result<Tensor> {
        let mut out = self.apply_here(Op::Constant(literal), &[], Some(&ty))?;
        Ok(out.remove(0))
    }

    /// A tensor of type `ty` filled with `value` (converted to the element type).
    pub fn full(&self, value: f64, ty: TensorType) -> Result<Tensor> {
        self.constant(crate::infer::literal_for(ty.dtype, value), ty)
    }

    /// A scalar constant.
    pub fn scalar(&self, value: f64, dtype: DType) -> Result<Tensor> {
        self.full(value, TensorType::scalar(dtype))
    }

    /// A constant from row-major `f64` values, stored as `dtype`.
    pub fn from_f64s(&self, values: &[f64], dtype: DType, dims: &[i64]) -> Result<Tensor> {
        self.constant(
            Literal::Float(values.to_vec()),
            TensorType::new(dtype, dims),
        )
    }

    /// A constant from row-major integer values, stored as `dtype`.
    pub fn from_i64s(&self, values: &[i64], dtype: DType, dims: &[i64]) -> Result<Tensor> {
        self.constant(Literal::Int(values.to_vec()), TensorType::new(dtype, dims))
    }

    /// `0, 1, 2, …` along `dim` of a tensor of type `ty`.
    pub fn iota(&self, ty: TensorType, dim: usize) -> Result<Tensor> {
        let mut out = self.apply_here(Op::Iota { dim }, &[], Some(&ty))?;
        Ok(out.remove(0))
    }

    /// This device's index along a mesh axis, as `i32[]`.
    pub fn axis_index(&self, axis: &crate::ir::Axis) -> Result<Tensor> {
        let mut out = self.apply_here(Op::AxisIndex { axis: axis.clone() }, &[], None)?;
        Ok(out.remove(0))
    }

    /// Finishes a top-level function with the given results.
    pub fn finish(self, results: &[Tensor]) -> Result<Function> {
        if self.0.parent.is_some() {
            return Err(Error::invalid(
                "function",
                "a loop body is finished by its loop",
            ));
        }
        let (func, _) = self.finish_region(results)?;
        Ok(func)
    }

    /// Finishes a child scope: its function (declared parameters, then one parameter per
    /// captured value) and the captured values as the parent knows them.
    fn finish_region(self, results: &[Tensor]) -> Result<(Function, Vec<ValueId>)> {
        let ids = results
            .iter()
            .map(|t| self.import("return", t))
            .collect::<Result<Vec<_>>>()?;
        let captures = self.0.captures.borrow().clone();
        let mut func = self.0.func.borrow().clone();
        func.params.extend(captures.iter().map(|&(_, inner)| inner));
        func.results = ids;
        Ok((func, captures.into_iter().map(|(outer, _)| outer).collect()))
    }

    /// Starts a child scope with parameters of the given types.
    fn child(&self, name: &str, params: &[TensorType]) -> (Scope, Vec<Tensor>) {
        let child = Scope::with_parent(name, Some(self.clone()));
        let params = params.iter().map(|t| child.param(t.clone())).collect();
        (child, params)
    }

    /// Runs `build` with `attributes` added to the frontend attributes of every node it builds
    /// in this scope (not in loops it opens, whose bodies are scopes of their own, nor in an
    /// enclosing scope an op lands in because all its operands live there). Loops, constants
    /// and iotas take none. Nested calls add up; a key set again keeps its first value.
    ///
    /// ```
    /// use stackscan::{DType, Scope, TensorType};
    /// let s = Scope::new("f");
    /// let x = s.param(TensorType::new(DType::F32, [2]));
    /// let y = s.with_frontend_attributes(&[("_scheduling_group_id", "0")], || x.tanh())?;
    /// let f = s.finish(&[y])?;
    /// assert_eq!(f.nodes[0].attributes, [("_scheduling_group_id".into(), "0".into())]);
    /// # Ok::<(), stackscan::Error>(())
    /// ```
    pub fn with_frontend_attributes<T>(
        &self,
        attributes: &[(&str, &str)],
        build: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let before = self.0.attributes.borrow().len();
        {
            let mut current = self.0.attributes.borrow_mut();
            for (k, v) in attributes {
                if !current.iter().any(|(ck, _)| ck == k) {
                    current.push(((*k).to_owned(), (*v).to_owned()));
                }
            }
        }
        let out = build();
        self.0.attributes.borrow_mut().truncate(before);
        out
    }

    /// Replays `f` in this scope on `args`, returning its results.
    pub fn inline(&self, f: &Function, args: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(replay(self, f, args, &mut Inline)?.results(f))
    }

    /// A general `while` loop. `cond` maps the carry to a `bool[]`, `body` to a new carry of
    /// the same types. Outer tensors used by either become loop-invariant carries. Returns the
    /// final carry (without those invariants).
    pub fn while_loop(
        &self,
        init: &[Tensor],
        cond: impl FnOnce(&Scope, &[Tensor]) -> Result<Tensor>,
        body: impl FnOnce(&Scope, &[Tensor]) -> Result<Vec<Tensor>>,
        frontend_attributes: &[(&str, &str)],
    ) -> Result<Vec<Tensor>> {
        let types: Vec<TensorType> = init.iter().map(|t| t.ty.clone()).collect();
        let (cs, cargs) = self.child("cond", &types);
        let c = cond(&cs, &cargs)?;
        let (mut cond_fn, ccaps) = cs.finish_region(&[c])?;
        let (bs, bargs) = self.child("body", &types);
        let b = body(&bs, &bargs)?;
        let (mut body_fn, bcaps) = bs.finish_region(&b)?;
        // One carry for both regions: [init…, cond captures…, body captures…].
        for &v in &bcaps {
            let ty = self.0.func.borrow().values[v].clone();
            cond_fn.values.push(ty);
            cond_fn.params.push(cond_fn.values.len() - 1);
        }
        let n = init.len();
        let mut inserted = Vec::new();
        for &v in &ccaps {
            let ty = self.0.func.borrow().values[v].clone();
            body_fn.values.push(ty);
            inserted.push(body_fn.values.len() - 1);
        }
        let body_caps: Vec<ValueId> = body_fn.params[n..].to_vec();
        body_fn.params.splice(n..n, inserted.iter().copied());
        body_fn.results.extend(inserted.iter().chain(&body_caps));
        let mut operands: Vec<Tensor> = init.to_vec();
        operands.extend(ccaps.iter().chain(&bcaps).map(|&v| self.tensor(v)));
        let refs: Vec<&Tensor> = operands.iter().collect();
        let op = Op::While {
            cond: Box::new(cond_fn),
            body: Box::new(body_fn),
            frontend_attributes: frontend_attributes
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        let mut out = self.apply_here(op, &refs, None)?;
        out.truncate(n);
        Ok(out)
    }

    /// `jax.lax.scan`: runs `body(carry, x_i)` for each slice `x_i` of `xs` along dimension 0
    /// and returns the final carry and the stacked per-step outputs. Outer tensors the body
    /// uses become constant inputs of the scan.
    pub fn scan(
        &self,
        init: &[Tensor],
        xs: &[Tensor],
        length: usize,
        reverse: bool,
        body: impl FnOnce(&Scope, &[Tensor], &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)>,
    ) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        self.scan_with_attributes(init, xs, length, reverse, &[], body)
    }

    /// [`scan`](Self::scan) with frontend attributes on the emitted loop.
    pub fn scan_with_attributes(
        &self,
        init: &[Tensor],
        xs: &[Tensor],
        length: usize,
        reverse: bool,
        frontend_attributes: &[(&str, &str)],
        body: impl FnOnce(&Scope, &[Tensor], &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)>,
    ) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        let mut types: Vec<TensorType> = init.iter().map(|t| t.ty.clone()).collect();
        for x in xs {
            if x.dims().first() != Some(&(length as i64)) {
                return Err(Error::invalid(
                    "scan",
                    format!("scanned input {} must have {length} rows", x.ty),
                ));
            }
            types.push(x.ty.with_dims(x.dims()[1..].to_vec()));
        }
        let (bs, args) = self.child("scan_body", &types);
        let (carry, ys) = body(&bs, &args[..init.len()], &args[init.len()..])?;
        let num_carry = carry.len();
        let results: Vec<Tensor> = carry.into_iter().chain(ys).collect();
        let (body_fn, caps) = bs.finish_region(&results)?;
        let mut operands: Vec<Tensor> = init.iter().chain(xs).cloned().collect();
        operands.extend(caps.iter().map(|&v| self.tensor(v)));
        let refs: Vec<&Tensor> = operands.iter().collect();
        if num_carry != init.len() {
            return Err(Error::invalid(
                "scan",
                format!(
                    "the body returns {num_carry} carries for {} inputs",
                    init.len()
                ),
            ));
        }
        let op = Op::Scan {
            body: Box::new(body_fn),
            length,
            num_carry,
            num_xs: xs.len(),
            reverse,
            frontend_attributes: frontend_attributes
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        let mut out = self.apply_here(op, &refs, None)?;
        let ys = out.split_off(num_carry);
        Ok((out, ys))
    }
}

/// The replay pass of [`Scope::inline`]: every node copied as it is.
struct Inline;

impl Replay for Inline {}
