//! A model of one's own: blocks of `[attention, MLP, MLP]`, every command of stackscan for it.

use serde::{Deserialize, Serialize};
use stackscan::fsdp::StackModel;
use stackscan::hf_map::{HfMap, Link, Step};
use stackscan::layer::{ActivationMarker, Forward};
use stackscan::model::stack_model;
use stackscan::plan::PlanOptions;
use stackscan::{Module, Result, SubLayer, Tensor, layer_stack, nn};
use stackscan_models::causal_lm::{CausalLm, LmConfig};
use stackscan_models::configs::ConfigFile;
use stackscan_models::hf_weights::map_of;
use stackscan_models::registry::{Architecture, ModelName, Shape};

/// The sizes: data, from the presets below or the TOML file `--config` names.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MyConfig {
    pub vocab: i64,
    pub d_model: i64,
    pub heads: i64,
    pub head_dim: i64,
    pub ffn: i64,
    pub layers: usize,
    pub seq: i64,
    pub batch_per_device: i64,
}

impl ConfigFile for MyConfig {
    const MODEL: &'static str = "my-model"; // `--model my-model`
    const PRESETS: &'static [(&'static str, &'static str)] = &[("tiny", TINY), ("large", LARGE)];
    const TABLES: &'static [&'static str] = &[];
    // How its Hugging Face `config.json` is recognised among the registered models' files.
    const HF_MODEL_TYPES: &'static [&'static str] = &["my_model"];
    const HF_CLASSES: &'static [&'static str] = &["MyModelForCausalLM"];

    fn from_hf(text: &str) -> Result<Self> {
        let f: HfConfig = serde_json::from_str(text).map_err(|e| stackscan::Error::InvalidOp {
            op: "config.json",
            message: e.to_string(),
        })?;
        Ok(MyConfig {
            vocab: f.vocab_size,
            d_model: f.hidden_size,
            heads: f.num_attention_heads,
            head_dim: f.head_dim,
            ffn: f.intermediate_size,
            layers: f.num_hidden_layers,
            seq: f.max_position_embeddings,
            batch_per_device: 1,
        })
    }
}

/// The model's `config.json` as its Hugging Face checkpoints carry it.
#[derive(Serialize, Deserialize)]
struct HfConfig {
    model_type: String,
    architectures: Vec<String>,
    vocab_size: i64,
    hidden_size: i64,
    num_attention_heads: i64,
    head_dim: i64,
    intermediate_size: i64,
    num_hidden_layers: usize,
    max_position_embeddings: i64,
}

/// The first preset is the tiny one `train` uses by default; `PUBLISHED` names the full size.
const TINY: &str = "
vocab = 256
d_model = 64
heads = 4
head_dim = 16
ffn = 128
layers = 6
seq = 32
batch_per_device = 2
";
const LARGE: &str = "
vocab = 32000
d_model = 4096
heads = 32
head_dim = 128
ffn = 11008
layers = 48
seq = 4096
batch_per_device = 1
";

/// Causal self-attention with RoPE: a module, reusable by any sub-layer.
#[derive(Debug, Module)]
#[module(config = MyConfig)]
pub struct Attention<T> {
    #[param(shape = [cfg.d_model, cfg.heads * cfg.head_dim], shard = 0)]
    pub wq: T,
    #[param(shape = [cfg.d_model, cfg.heads * cfg.head_dim], shard = 0)]
    pub wk: T,
    #[param(shape = [cfg.d_model, cfg.heads * cfg.head_dim], shard = 0)]
    pub wv: T,
    #[param(shape = [cfg.heads * cfg.head_dim, cfg.d_model], shard = 0, init = normal(0.01))]
    pub wo: T,
}

impl Attention<Tensor> {
    fn forward(&self, c: &MyConfig, x: &Tensor) -> Result<Tensor> {
        let (b, t, hd) = (x.dims()[0], x.dims()[1], c.head_dim);
        let heads = |w: &Tensor| x.matmul(w)?.reshape(&[b, t, c.heads, hd]);
        let q = nn::rope(&heads(&self.wq)?, 10000.0, hd as usize)?;
        let k = nn::rope(&heads(&self.wk)?, 10000.0, hd as usize)?;
        nn::causal_attention(&q, &k, &heads(&self.wv)?, 1.0 / (hd as f64).sqrt())?.matmul(&self.wo)
    }
}

/// What flows from layer to layer: the residual stream `[batch, seq, d_model]`.
#[derive(Debug)]
pub enum Residual {}
impl ActivationMarker for Residual {}

/// Sub-layer kind one: attention behind an RMSNorm, with its residual.
#[derive(Debug, SubLayer)]
#[sublayer(config = MyConfig, carry = Residual, name = "attention")]
pub struct AttentionLayer<T> {
    #[param(shape = [cfg.d_model], replicated)]
    pub norm: T,
    #[module]
    pub attn: Attention<T>,
}

impl Forward for AttentionLayer<Tensor> {
    fn forward(&self, c: &MyConfig, h: &Tensor) -> Result<Tensor> {
        h.add(&self.attn.forward(c, &nn::rms_norm(h, &self.norm, 1e-5)?)?)
    }
}

/// Sub-layer kind two: a SiLU MLP behind an RMSNorm, with its residual.
#[derive(Debug, SubLayer)]
#[sublayer(config = MyConfig, carry = Residual, name = "mlp")]
pub struct MlpLayer<T> {
    #[param(shape = [cfg.d_model], replicated)]
    pub norm: T,
    #[param(shape = [cfg.d_model, cfg.ffn], shard = 0)]
    pub w_up: T,
    #[param(shape = [cfg.ffn, cfg.d_model], shard = 0, init = normal(0.01))]
    pub w_down: T,
}

impl Forward for MlpLayer<Tensor> {
    fn forward(&self, _: &MyConfig, h: &Tensor) -> Result<Tensor> {
        let x = nn::rms_norm(h, &self.norm, 1e-5)?;
        h.add(&nn::silu(&x.matmul(&self.w_up)?)?.matmul(&self.w_down)?)
    }
}

/// The stack: blocks of one attention and two MLP layers, `cfg.layers` layers in all, each
/// layer's weights gathered one layer ahead and its gradient reduce-scattered one step late.
#[layer_stack(
    block = [AttentionLayer, MlpLayer, MlpLayer],
    layers = cfg.layers,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
pub struct MyStack;

/// The model is the causal language model, `CausalLm`, over this stack: the embedding, the
/// stack, the final norm and the head. What it reads of the config:
impl LmConfig for MyConfig {
    fn vocab(&self) -> i64 {
        self.vocab
    }
    fn d_model(&self) -> i64 {
        self.d_model
    }
    fn batch_per_device(&self) -> i64 {
        self.batch_per_device
    }
    fn seq_per_device(&self) -> i64 {
        self.seq
    }
    fn norm_eps(&self) -> f64 {
        1e-5
    }
    fn embed_std(&self) -> f64 {
        1.0
    }
}

/// What the commands need to know of the model beyond its declaration.
impl Architecture for MyConfig {
    fn about() -> &'static str {
        "blocks of [attention, MLP, MLP]"
    }
    fn published() -> &'static str {
        "large"
    }
    fn build(&self) -> Result<(StackModel, PlanOptions)> {
        stack_model::<CausalLm<Tensor, MyStack>>(self)
    }
    fn describe(&self) -> String {
        format!(
            "my model: {} layers of [attention, MLP, MLP], d {}",
            self.layers, self.d_model
        )
    }
    fn shape(&mut self) -> Shape<'_> {
        Shape {
            vocab: self.vocab,
            seq: &mut self.seq,
            batch_per_device: &mut self.batch_per_device,
            layers: &mut self.layers,
        }
    }

    // Hugging Face import (`train --init-from DIR`) and export (`export --to DIR`): which of
    // their tensors is which of ours. Their projections are `[out, in]` (`torch.nn.Linear`).
    fn hf_weights(&self) -> Option<Result<HfMap>> {
        let c = self;
        let (d, q) = (c.d_model, c.heads * c.head_dim);
        let map = c.build().and_then(|(model, _)| {
            map_of(&model, |name, layer| {
                let at = |p: &str| format!("model.layers.{}.{p}.weight", layer.unwrap_or(0));
                let proj = |p: &str, out: i64, inn: i64| {
                    Link::new(&at(p), &[out, inn]).then(Step::TransposeLast2)
                };
                Ok(vec![match name {
                    "embed" => Link::new("model.embed_tokens.weight", &[c.vocab, d]),
                    "final_norm" => Link::new("model.norm.weight", &[d]),
                    "lm_head" => {
                        Link::new("lm_head.weight", &[c.vocab, d]).then(Step::TransposeLast2)
                    }
                    "layers.attention.norm" | "layers.mlp.norm" => Link::new(&at("norm"), &[d]),
                    "layers.attention.attn.wq" => proj("q_proj", q, d),
                    "layers.attention.attn.wk" => proj("k_proj", q, d),
                    "layers.attention.attn.wv" => proj("v_proj", q, d),
                    "layers.attention.attn.wo" => proj("o_proj", d, q),
                    "layers.mlp.w_up" => proj("up_proj", c.ffn, d),
                    "layers.mlp.w_down" => proj("down_proj", d, c.ffn),
                    other => {
                        return Err(stackscan::Error::InvalidOp {
                            op: "hf weights",
                            message: format!("no tensor of theirs for our `{other}`"),
                        });
                    }
                }])
            })
        });
        Some(map)
    }
    fn hf_config_json(&self) -> Option<serde_json::Value> {
        let c = self;
        let f = HfConfig {
            model_type: "my_model".into(),
            architectures: vec!["MyModelForCausalLM".into()],
            vocab_size: c.vocab,
            hidden_size: c.d_model,
            num_attention_heads: c.heads,
            head_dim: c.head_dim,
            intermediate_size: c.ffn,
            num_hidden_layers: c.layers,
            max_position_embeddings: c.seq,
        };
        serde_json::to_value(f).ok()
    }
}

/// Every command (`train`, `plan`, `params`, `timeline`, …) for this model.
fn main() -> std::process::ExitCode {
    static MODELS: &[ModelName] = &[ModelName::of::<MyConfig>()];
    stackscan_cli::cli::main_for(MODELS)
}
