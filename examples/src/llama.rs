//! A Llama-style decoder, stacked homogeneously: RMSNorm, RoPE, grouped-query causal
//! attention and a SwiGLU MLP per layer; embedding, final norm, LM head and cross-entropy
//! outside the scanned stack.
//!
//! ```
//! use stackscan_examples::llama::{LlamaConfig, model};
//! let m = model(&LlamaConfig::tiny())?;
//! assert_eq!(m.stack.len(), 4);
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::rc::Rc;

use stackscan::fsdp::{Init, InputSpec, LayerKind, ParamSpec, PostFn, PreFn, StackModel};
use stackscan::plan::Stack;
use stackscan::{DType, Error, Result, Tensor, TensorType, nn};
use stackscan_runtime::rng::Rng;

/// Sizes of a Llama-style model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Vocabulary.
    pub vocab: i64,
    /// Model width.
    pub d_model: i64,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: i64,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: i64,
    /// Width of one head.
    pub head_dim: i64,
    /// MLP hidden width.
    pub ffn: i64,
    /// RoPE base.
    pub rope_theta: f64,
    /// Sequence length.
    pub seq: i64,
    /// Sequences per device.
    pub batch_per_device: i64,
}

impl LlamaConfig {
    /// The tiny config of the design (Llama-3-8B's structure at d 256, 4 layers).
    pub const fn tiny() -> Self {
        LlamaConfig {
            vocab: 512,
            d_model: 256,
            layers: 4,
            heads: 8,
            kv_heads: 2,
            head_dim: 32,
            ffn: 896,
            rope_theta: 500_000.0,
            seq: 64,
            batch_per_device: 2,
        }
    }

    /// Llama-3-8B's published sizes (for plans and cost models; far too big to run here).
    pub const fn llama3_8b() -> Self {
        LlamaConfig {
            vocab: 128_256,
            d_model: 4096,
            layers: 32,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            ffn: 14336,
            rope_theta: 500_000.0,
            seq: 8192,
            batch_per_device: 1,
        }
    }
}

/// One decoder layer's weights, by name: what [`decoder_layer`] reads. The macro-declared
/// [`Decoder`](crate::llama_macro::Decoder) builds it from its fields; the run-time API's
/// positional weight list becomes one through [`DecoderWeights::from_slice`], in the order of
/// [`layer_params`], so the layer function itself never indexes by position.
#[derive(Clone, Copy, Debug)]
pub struct DecoderWeights<'a> {
    /// RMSNorm scale before attention, `[d]`.
    pub attn_norm: &'a Tensor,
    /// Query projection, `[d, heads·head_dim]`.
    pub wq: &'a Tensor,
    /// Key projection, `[d, kv_heads·head_dim]`.
    pub wk: &'a Tensor,
    /// Value projection, `[d, kv_heads·head_dim]`.
    pub wv: &'a Tensor,
    /// Attention output projection, `[heads·head_dim, d]`.
    pub wo: &'a Tensor,
    /// RMSNorm scale before the MLP, `[d]`.
    pub mlp_norm: &'a Tensor,
    /// MLP gate, `[d, ffn]`.
    pub w_gate: &'a Tensor,
    /// MLP up projection, `[d, ffn]`.
    pub w_up: &'a Tensor,
    /// MLP down projection, `[ffn, d]`.
    pub w_down: &'a Tensor,
}

impl<'a> DecoderWeights<'a> {
    /// Names the weights of a list in [`layer_params`] order; any other length is an error
    /// naming the count, not a panic.
    pub fn from_slice(w: &'a [Tensor]) -> Result<Self> {
        match w {
            [attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down] => Ok(DecoderWeights {
                attn_norm,
                wq,
                wk,
                wv,
                wo,
                mlp_norm,
                w_gate,
                w_up,
                w_down,
            }),
            _ => Err(Error::InvalidOp {
                op: "llama decoder layer",
                message: format!("expected the 9 weights of `layer_params`, got {}", w.len()),
            }),
        }
    }
}

/// One decoder layer on `h: [B, T, d]`.
pub fn decoder_layer(c: LlamaConfig, h: &Tensor, w: &DecoderWeights<'_>) -> Result<Tensor> {
    let (b, t) = (h.dims()[0], h.dims()[1]);
    let (nh, nkv, hd) = (c.heads, c.kv_heads, c.head_dim);
    let x = nn::rms_norm(h, w.attn_norm, 1e-5)?;
    let q = nn::rope(
        &x.matmul(w.wq)?.reshape(&[b, t, nh, hd])?,
        c.rope_theta,
        hd as usize,
    )?;
    let k = nn::rope(
        &x.matmul(w.wk)?.reshape(&[b, t, nkv, hd])?,
        c.rope_theta,
        hd as usize,
    )?;
    let v = x.matmul(w.wv)?.reshape(&[b, t, nkv, hd])?;
    // Grouped-query attention: each key/value head serves heads/kv_heads query heads.
    let (k, v) = (nn::repeat_kv(&k, nh)?, nn::repeat_kv(&v, nh)?);
    let attn = nn::causal_attention(&q, &k, &v, 1.0 / (hd as f64).sqrt())?;
    let h = h.add(&attn.matmul(w.wo)?)?;
    let y = nn::rms_norm(&h, w.mlp_norm, 1e-5)?;
    let mlp = nn::silu(&y.matmul(w.w_gate)?)?
        .mul(&y.matmul(w.w_up)?)?
        .matmul(w.w_down)?;
    h.add(&mlp)
}

/// Parameters of one decoder layer, in the order the layer reads them.
pub fn layer_params(c: &LlamaConfig) -> Vec<ParamSpec> {
    let f32 = DType::F32;
    let (d, hd) = (c.d_model, c.head_dim);
    let out_std = 0.02 / (2.0 * c.layers as f64).sqrt();
    vec![
        ParamSpec::replicated("attn_norm", &[d], f32),
        ParamSpec::sharded("wq", &[d, c.heads * hd], f32, 0),
        ParamSpec::sharded("wk", &[d, c.kv_heads * hd], f32, 0),
        ParamSpec::sharded("wv", &[d, c.kv_heads * hd], f32, 0),
        ParamSpec::sharded("wo", &[c.heads * hd, d], f32, 0).with_init(Init::Normal(out_std)),
        ParamSpec::replicated("mlp_norm", &[d], f32),
        ParamSpec::sharded("w_gate", &[d, c.ffn], f32, 0),
        ParamSpec::sharded("w_up", &[d, c.ffn], f32, 0),
        ParamSpec::sharded("w_down", &[c.ffn, d], f32, 0).with_init(Init::Normal(out_std)),
    ]
}

/// What runs outside the decoder stack: the inputs, the activation between layers, the
/// embedding, final norm and LM head, and the cross-entropy. Shared by [`model`] and the
/// macro-declared model, so the two differ only in how the stack is declared.
#[expect(missing_debug_implementations, reason = "holds closures")]
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
    if c.heads % c.kv_heads != 0 || c.head_dim % 2 != 0 {
        return Err(Error::InvalidOp {
            op: "llama",
            message: format!(
                "heads ({}) must be a multiple of kv_heads ({}) and head_dim ({}) even",
                c.heads, c.kv_heads, c.head_dim
            ),
        });
    }
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
            w.embed(tokens)
        }),
        post: Rc::new(move |h, inputs, w| {
            let (OuterInputs { labels, .. }, w) = named(inputs, w)?;
            head_loss(vocab, h, labels, &w)
        }),
    })
}

/// The model's inputs by name.
struct OuterInputs<'a> {
    tokens: &'a Tensor,
    labels: &'a Tensor,
}

/// The weights outside the stack, by name, in [`Outer::params`] order.
#[derive(Clone, Copy, Debug)]
pub struct OuterWeights<'a> {
    /// Token embedding, `[vocab, d]`.
    pub embed: &'a Tensor,
    /// RMSNorm scale after the stack, `[d]`.
    pub final_norm: &'a Tensor,
    /// LM head, `[d, vocab]`.
    pub lm_head: &'a Tensor,
}

impl OuterWeights<'_> {
    /// The embedding lookup of `tokens: [B, T]`.
    pub fn embed(&self, tokens: &Tensor) -> Result<Tensor> {
        self.embed.take(tokens, 0)
    }
}

/// Names the closures' positional inputs and weights; a wrong count is an error, not a panic.
fn named<'a>(inputs: &'a [Tensor], w: &'a [Tensor]) -> Result<(OuterInputs<'a>, OuterWeights<'a>)> {
    match (inputs, w) {
        ([tokens, labels], [embed, final_norm, lm_head]) => Ok((
            OuterInputs { tokens, labels },
            OuterWeights {
                embed,
                final_norm,
                lm_head,
            },
        )),
        _ => Err(Error::InvalidOp {
            op: "llama",
            message: format!(
                "expected 2 inputs (tokens, labels) and 3 outer weights (embed, final_norm, lm_head), got {} and {}",
                inputs.len(),
                w.len()
            ),
        }),
    }
}

/// Final norm, LM head and mean next-token cross-entropy of `h: [B, T, d]` against
/// `labels: [B, T]`.
pub fn head_loss(vocab: i64, h: &Tensor, labels: &Tensor, w: &OuterWeights<'_>) -> Result<Tensor> {
    let (b, t) = (h.dims()[0], h.dims()[1]);
    let logits = nn::rms_norm(h, w.final_norm, 1e-5)?.matmul(w.lm_head)?;
    let logits = logits.reshape(&[b * t, vocab])?;
    nn::cross_entropy(&logits, &labels.reshape(&[b * t])?)
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
            forward: Rc::new(move |h, w| decoder_layer(cfg, h, &DecoderWeights::from_slice(w)?)),
        }],
        activation: o.activation,
        inputs: o.inputs,
        outer_params: o.params,
        pre: o.pre,
        post: o.post,
    })
}

/// Synthetic sequences with learnable structure: each row counts up from a random start by a
/// row-specific stride (mod vocab), so the next token follows from the previous two. Returns
/// `(tokens, labels)` for `rows` rows, labels being tokens shifted by one.
pub fn synthetic_batch(c: &LlamaConfig, rows: i64, seed: u64) -> (Vec<i32>, Vec<i32>) {
    let mut rng = Rng::new(seed);
    let mut next = || (rng.next_u64() >> 33) as i64;
    let mut tokens = Vec::new();
    let mut labels = Vec::new();
    for _ in 0..rows {
        let start = next() % c.vocab;
        let stride = 1 + next() % 3;
        for i in 0..c.seq {
            tokens.push(((start + stride * i) % c.vocab) as i32);
            labels.push(((start + stride * (i + 1)) % c.vocab) as i32);
        }
    }
    (tokens, labels)
}
