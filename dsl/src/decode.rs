//! Generation's program: the declared layers run on new positions against the state each
//! keeps between calls (attention's keys and values, a recurrence's state), so a sampled
//! token costs one position's forward rather than the whole sequence's.
//!
//! A sub-layer that can generate implements [`Decode`] beside its [`Forward`]; a model's
//! [`DecodeModel`] pairs its [`StackModel`] (the weights, in the order checkpoints and the
//! training step hold them) with one [`DecodeKind`] per layer kind and its logits head.
//! [`DecodeModel::step_program`] is then one program for both phases: a prompt of `T`
//! positions (prefill) and one new position (decode) differ only in `T`.
//!
//! The program runs on one device with every weight whole. Positions are per row, so a batch
//! of prompts of different lengths runs as one: a row shorter than `T` is padded with
//! position −1, which writes no state.

use std::fmt;
use std::rc::Rc;

use crate::builder::{Scope, Tensor};
use crate::dtype::DType;
use crate::emit::{Alias, Program};
use crate::error::{Error, Result};
use crate::fsdp::{PostFn, StackModel};
use crate::layer::Forward;
use crate::types::TensorType;

/// A sub-layer that generates: the state it keeps per sequence and its forward on new
/// positions against that state.
pub trait Decode: Forward {
    /// The state one layer keeps for `rows` sequences of up to `capacity` positions (for
    /// attention, its key and value caches `[rows, capacity, kv_heads, head_dim]`), zeros
    /// before the first call.
    fn state(cfg: &Self::Config, rows: i64, capacity: i64) -> Vec<TensorType>;

    /// The layer on the new positions `h: [B, T, d]`, row `b`'s position `t` at
    /// `positions[b, t]` (`i32 [B, T]`, absolute; −1 for padding, which must change no
    /// state), given `state` as [`Decode::state`] lays it out; returns the new activation and
    /// state. Equal, position for position, to [`Forward::forward`] on the whole sequence.
    fn decode(
        &self,
        cfg: &Self::Config,
        h: &Tensor,
        positions: &Tensor,
        state: &[Tensor],
    ) -> Result<(Tensor, Vec<Tensor>)>;
}

/// A kind's state types for `(rows, capacity)`.
pub type StateFn = Rc<dyn Fn(i64, i64) -> Vec<TensorType>>;

/// A kind's decode step: `(h, weights, positions, state) → (h, state)`.
pub type StepFn =
    Rc<dyn Fn(&Tensor, &[Tensor], &Tensor, &[Tensor]) -> Result<(Tensor, Vec<Tensor>)>>;

/// One layer kind as generation runs it ([`decode_kind`]).
#[derive(Clone)]
pub struct DecodeKind {
    /// The kind's name, as in [`StackModel::kinds`].
    pub name: String,
    /// How many weights a layer of the kind takes.
    pub params: usize,
    /// Its state per layer.
    pub state: StateFn,
    /// Its step.
    pub step: StepFn,
}

impl fmt::Debug for DecodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeKind")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

/// The [`DecodeKind`] of sub-layer `L` at `cfg`.
pub fn decode_kind<L: Decode>(cfg: &L::Config) -> DecodeKind {
    let (c1, c2) = (cfg.clone(), cfg.clone());
    DecodeKind {
        name: L::NAME.to_owned(),
        params: L::param_specs(cfg).len(),
        state: Rc::new(move |rows, capacity| L::state(&c1, rows, capacity)),
        step: Rc::new(move |h, w, positions, state| {
            L::from_values(w.to_vec())?.decode(&c2, h, positions, state)
        }),
    }
}

/// A model as generation runs it: the stack model (weights, embedding, stack order), a
/// [`DecodeKind`] for each of its kinds, and the head from the last activation to logits.
#[derive(Clone)]
pub struct DecodeModel {
    model: StackModel,
    kinds: Vec<DecodeKind>,
    logits: PostFn,
}

impl fmt::Debug for DecodeModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeModel")
            .field("kinds", &self.kinds)
            .finish_non_exhaustive()
    }
}

/// The parameters of a step program before the weights: tokens, positions and the index of
/// each row's last real position.
pub const STEP_INPUTS: usize = 3;

impl DecodeModel {
    /// Pairs `model` with `kinds` (one per kind of the model, in its order, matched by name
    /// and weight count) and `logits` (a model's [`logits_head`](crate::model::logits_head)).
    pub fn new(model: StackModel, kinds: Vec<DecodeKind>, logits: PostFn) -> Result<DecodeModel> {
        if kinds.len() != model.kinds.len() {
            return Err(Error::invalid(
                "decode",
                format!(
                    "{} decoding kinds for a stack of {} kinds",
                    kinds.len(),
                    model.kinds.len()
                ),
            ));
        }
        for (d, k) in kinds.iter().zip(&model.kinds) {
            if d.name != k.name || d.params != k.params.len() {
                return Err(Error::invalid(
                    "decode",
                    format!(
                        "kind `{}` ({} weights) decodes as `{}` ({} weights)",
                        k.name,
                        k.params.len(),
                        d.name,
                        d.params
                    ),
                ));
            }
        }
        Ok(DecodeModel {
            model,
            kinds,
            logits,
        })
    }

    /// The stack model.
    pub fn model(&self) -> &StackModel {
        &self.model
    }

    /// Every layer's state for `rows` sequences of up to `capacity` positions, in stack
    /// order, each layer's parts in its kind's order.
    pub fn state_types(&self, rows: i64, capacity: i64) -> Vec<TensorType> {
        (0..self.model.stack.len())
            .flat_map(|layer| (self.kinds[self.model.stack.kind_of(layer)].state)(rows, capacity))
            .collect()
    }

    /// The whole weights' types, in [`StackModel::weights`] order: an outer weight as it is,
    /// a kind's weight stacked over its layers.
    pub fn weight_types(&self) -> Vec<TensorType> {
        let outer = self.model.outer_params.len();
        self.model
            .weights()
            .into_iter()
            .enumerate()
            .map(|(i, (spec, layers))| {
                if i < outer {
                    spec.full_type()
                } else {
                    let mut dims = vec![layers as i64];
                    dims.extend(&spec.shape);
                    TensorType::new(spec.dtype, dims)
                }
            })
            .collect()
    }

    /// The step program for `rows` sequences, `tokens` new positions each, state for up to
    /// `capacity` positions. Parameters: token ids `i32 [rows, tokens]`, their positions
    /// `i32 [rows, tokens]` (−1 for padding), the index among the new positions whose logits
    /// to return `i32 [rows]`, then the weights ([`DecodeModel::weight_types`]) and the state
    /// ([`DecodeModel::state_types`]). Results: the logits `f32 [rows, vocab]` of each row's
    /// chosen position, then the new state, each part aliased to its argument (donated).
    pub fn step_program(&self, rows: i64, tokens: i64, capacity: i64) -> Result<Program> {
        if rows < 1 || tokens < 1 || tokens > capacity {
            return Err(Error::invalid(
                "decode",
                format!(
                    "{rows} rows of {tokens} new positions in a state of {capacity}: each needs \
                     at least 1, and no more positions than the state holds"
                ),
            ));
        }
        let m = &self.model;
        let s = Scope::new("decode");
        let ids = TensorType::new(DType::I32, [rows, tokens]);
        let tokens_in = s.param(ids.clone());
        let positions = s.param(ids);
        let last = s.param(TensorType::new(DType::I32, [rows]));
        let weights: Vec<Tensor> = self
            .weight_types()
            .into_iter()
            .map(|t| s.param(t))
            .collect();
        let state_types = self.state_types(rows, capacity);
        let state: Vec<Tensor> = state_types.iter().map(|t| s.param(t.clone())).collect();
        let (outer, stacked) = weights.split_at(m.outer_params.len());
        // The embedding reads the tokens; the labels it is declared with are unused.
        let inputs: Vec<Tensor> = m.inputs.iter().map(|_| tokens_in.clone()).collect();
        let mut h = (m.pre)(&inputs, outer)?;
        if h.dims()[..h.rank().min(2)] != [rows, tokens] || h.rank() != 3 {
            return Err(Error::invalid(
                "decode",
                format!(
                    "the embedding returns {}, not [{rows}, {tokens}, d]",
                    h.ty()
                ),
            ));
        }
        let mut new_state = Vec::with_capacity(state.len());
        let mut at = 0;
        for layer in 0..m.stack.len() {
            let k = m.stack.kind_of(layer);
            let j = m.stack.index_in_kind(layer) as i64;
            let first = self.kinds[..k].iter().map(|d| d.params).sum::<usize>();
            let w: Vec<Tensor> = stacked[first..first + self.kinds[k].params]
                .iter()
                .zip(&m.kinds[k].params)
                .map(|(all, spec)| all.slice_axis(0, j, j + 1)?.reshape(&spec.shape))
                .collect::<Result<_>>()?;
            let parts = (self.kinds[k].state)(rows, capacity).len();
            let (out, st) = (self.kinds[k].step)(&h, &w, &positions, &state[at..at + parts])
                .map_err(|e| in_layer(layer, &m.kinds[k].name, e))?;
            if st.len() != parts || out.ty() != h.ty() {
                return Err(Error::invalid(
                    "decode",
                    format!(
                        "layer {layer} ({}) returned {} and {} state parts for {} and {parts}",
                        m.kinds[k].name,
                        out.ty(),
                        st.len(),
                        h.ty()
                    ),
                ));
            }
            h = out;
            new_state.extend(st);
            at += parts;
        }
        // Each row's chosen position: a one-hot over the new positions picks it.
        let d = h.dims()[2];
        let pick = s
            .iota(TensorType::new(DType::I32, [rows, tokens]), 1)?
            .eq(&last.broadcast_in_dim(&[rows, tokens], &[0])?)?;
        let chosen = pick
            .broadcast_in_dim(h.dims(), &[0, 1])?
            .select(&h, &h.zeros_like()?)?
            .sum(&[1])?
            .reshape(&[rows, 1, d])?;
        let logits = (self.logits)(&chosen, &inputs, outer)?;
        let vocab = *logits.dims().last().unwrap_or(&0);
        let logits = logits.convert(DType::F32)?.reshape(&[rows, vocab])?;
        for (t, st) in state_types.iter().zip(&new_state) {
            if st.ty() != t {
                return Err(Error::invalid(
                    "decode",
                    format!("a state part declared {t} was returned as {}", st.ty()),
                ));
            }
        }
        let mut results = vec![logits];
        results.extend(new_state);
        let f = s.finish(&results)?;
        let first_state = STEP_INPUTS + weights.len();
        let aliases = (0..state.len())
            .map(|i| Alias {
                param: first_state + i,
                result: 1 + i,
            })
            .collect();
        Program::new(f).with_aliases(aliases)
    }
}

/// `e` with the layer it came from.
fn in_layer(layer: usize, kind: &str, e: Error) -> Error {
    Error::invalid("decode", format!("layer {layer} ({kind}): {e}"))
}
