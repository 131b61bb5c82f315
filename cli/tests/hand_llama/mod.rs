//! The Llama built by hand with the run-time API (`StackModel`: positional parameter specs and
//! closures), the independent reference the macro-declared Llama is checked against
//! (`macros_llama`: the same parameters and the same program text). Test support only: every
//! command runs the declared model.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of the hand-built model"
)]

use std::rc::Rc;

use stackscan::fsdp::{Init, InputSpec, LayerKind, ParamSpec, PostFn, PreFn, StackModel};
use stackscan::layer::{Forward, Params};
use stackscan::plan::Stack;
use stackscan::{DType, Error, Result, Tensor, TensorType};
use stackscan_models::causal_lm::Outer as OuterPart;
use stackscan_models::llama::{Decoder, LlamaConfig, NORM_EPS};

/// Parameters of one decoder layer, written out for the run-time API (the macro-declared
/// `Decoder` must give exactly these; `macros_llama` checks it).
pub fn layer_params(c: &LlamaConfig) -> Vec<ParamSpec> {
    let f32 = DType::F32;
    let (d, hd) = (c.d_model, c.head_dim);
    let out_std = c.out_std();
    vec![
        ParamSpec::replicated("attn_norm", &[d], f32),
        ParamSpec::sharded("attn.wq", &[d, c.heads * hd], f32, 0),
        ParamSpec::sharded("attn.wk", &[d, c.kv_heads * hd], f32, 0),
        ParamSpec::sharded("attn.wv", &[d, c.kv_heads * hd], f32, 0),
        ParamSpec::sharded("attn.wo", &[c.heads * hd, d], f32, 0).with_init(Init::Normal(out_std)),
        ParamSpec::replicated("mlp_norm", &[d], f32),
        ParamSpec::sharded("mlp.w_gate", &[d, c.ffn], f32, 0),
        ParamSpec::sharded("mlp.w_up", &[d, c.ffn], f32, 0),
        ParamSpec::sharded("mlp.w_down", &[c.ffn, d], f32, 0).with_init(Init::Normal(out_std)),
    ]
}

/// What runs outside the decoder stack, built by hand for the run-time API: the inputs, the
/// activation between layers, the embedding, final norm and LM head, and the cross-entropy,
/// as positional specs and closures (the declared `Llama` makes the same from its fields).
pub struct Outer {
    /// `[batch_per_device, seq, d_model]`.
    pub activation: TensorType,
    /// Tokens and next-token labels, `[batch_per_device, seq]` each, valid in `0..vocab`.
    pub inputs: Vec<InputSpec>,
    /// `embed`, `final_norm`, `lm_head`.
    pub params: Vec<ParamSpec>,
    /// The embedding lookup.
    pub pre: PreFn,
    /// Final norm, LM head and mean cross-entropy.
    pub post: PostFn,
}

/// The parts outside the stack, after checking the head layout.
pub fn outer(c: &LlamaConfig) -> Result<Outer> {
    let vocab = c.vocab;
    let f32 = DType::F32;
    let tokens = TensorType::new(DType::I32, [c.batch_per_device, c.seq]);
    // Both index the vocabulary: a token through the embedding's gather (which would clamp
    // an id outside it), a label through the cross-entropy's one-hot (which would match no
    // class and add nothing to the loss).
    let input = |name: &str| InputSpec::new(name, tokens.clone()).with_values(0..vocab);
    Ok(Outer {
        activation: TensorType::new(f32, [c.batch_per_device, c.seq, c.d_model]),
        inputs: vec![input("tokens"), input("labels")],
        params: vec![
            ParamSpec::sharded("embed", &[c.vocab, c.d_model], f32, 0),
            ParamSpec::replicated("final_norm", &[c.d_model], f32),
            ParamSpec::sharded("lm_head", &[c.d_model, c.vocab], f32, 0),
        ],
        pre: Rc::new(|inputs, w| {
            let (OuterInputs { tokens, .. }, w) = named(inputs, w)?;
            w.part().embed(tokens)
        }),
        post: Rc::new(move |h, inputs, w| {
            let (OuterInputs { labels, .. }, w) = named(inputs, w)?;
            w.part().loss(h, labels)
        }),
    })
}

/// The model's inputs by name.
struct OuterInputs<'a> {
    tokens: &'a Tensor,
    labels: &'a Tensor,
}

/// The outer weights of the run-time API's positional lists, by name.
struct OuterWeights {
    embed: Tensor,
    final_norm: Tensor,
    lm_head: Tensor,
}

impl OuterWeights {
    /// What they compute, with Llama's norm epsilon.
    fn part(&self) -> OuterPart<'_> {
        OuterPart {
            embed: &self.embed,
            final_norm: &self.final_norm,
            lm_head: Some(&self.lm_head),
            eps: NORM_EPS,
        }
    }
}

/// Names the closures' positional inputs and weights; a wrong count is an error, not a panic.
fn named<'a>(inputs: &'a [Tensor], w: &[Tensor]) -> Result<(OuterInputs<'a>, OuterWeights)> {
    match (inputs, w) {
        ([tokens, labels], [embed, final_norm, lm_head]) => Ok((
            OuterInputs { tokens, labels },
            OuterWeights {
                embed: embed.clone(),
                final_norm: final_norm.clone(),
                lm_head: lm_head.clone(),
            },
        )),
        _ => Err(Error::InvalidOp {
            op: "llama",
            message: format!(
                "expected 2 inputs (tokens, labels) and 3 outer weights, got {} and {}",
                inputs.len(),
                w.len()
            ),
        }),
    }
}

/// The model: tokens and next-token labels `[batch_per_device, seq]` per device.
pub fn model(c: &LlamaConfig) -> Result<StackModel> {
    let o = outer(c)?;
    let cfg = *c;
    Ok(StackModel {
        stack: Stack::homogeneous("layer", c.layers)?,
        kinds: vec![LayerKind {
            name: "layer".into(),
            params: layer_params(c),
            forward: Rc::new(move |h, w| Decoder::from_values(w.to_vec())?.forward(&cfg, h)),
        }],
        activation: o.activation,
        inputs: o.inputs,
        outer_params: o.params,
        pre: o.pre,
        post: o.post,
    })
}
