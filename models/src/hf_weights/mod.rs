//! What every model's map between its weights and the Hugging Face checkpoint of the same
//! model (`LlamaForCausalLM`, …) is built with: which tensor of theirs is which of ours, and
//! how it is laid out ([`HfMap`]); each model's own map is in its folder (`llama::hf`,
//! `deepseek3::hf`, `qwen35::hf`). The runtime does the reading, checking, converting and writing
//! (`stackscan_runtime::hf`); this module only knows the names and conventions.
//!
//! ```
//! use stackscan_models::llama::{self, LlamaConfig};
//!
//! let map = llama::hf::map(&LlamaConfig::tiny())?;
//! let head = map.weights.iter().find(|w| w.name == "lm_head").unwrap();
//! assert_eq!(head.links[0].theirs, "lm_head.weight");
//! assert_eq!(head.links[0].shape, vec![512, 256]); // [vocab, d]: theirs is [out, in]
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::Result;
use stackscan::fsdp::StackModel;
use stackscan::hf_map::{HfMap, Link, Step, WeightLinks};

/// The map of `model`'s weights, `link(name, layer)` giving the links that fill our weight
/// `name` (a [`StackModel::weight_names`] path) at `layer`: `None` for an outer weight, else
/// the layer's index in the whole stack (their `model.layers.{i}`), whatever its kind. One
/// link fills a layer, or several fill blocks of it (an expert bank from per-expert
/// matrices).
pub fn map_of(
    model: &StackModel,
    mut link: impl FnMut(&str, Option<usize>) -> Result<Vec<Link>>,
) -> Result<HfMap> {
    let outer = model.outer_params.len();
    let names = model.weight_names();
    let mut weights = Vec::with_capacity(names.len());
    // Each kind's layers' indices in the whole stack.
    let stack = &model.stack;
    let of_kind: Vec<Vec<usize>> = (0..stack.num_kinds())
        .map(|k| {
            (0..stack.len())
                .filter(|&l| stack.kind_of(l) == k)
                .collect()
        })
        .collect();
    let mut kind_of_weight = Vec::new();
    for (k, kind) in model.kinds.iter().enumerate() {
        kind_of_weight.extend(kind.params.iter().map(|_| k));
    }
    for (j, (name, (spec, layers))) in names.iter().zip(model.weights()).enumerate() {
        let mut shape = Vec::with_capacity(spec.shape.len() + 1);
        let links = if j < outer {
            link(name, None)?
        } else {
            shape.push(layers as i64);
            let mut links = Vec::new();
            for (i, &l) in of_kind[kind_of_weight[j - outer]].iter().enumerate() {
                links.extend(link(name, Some(l))?.into_iter().map(|k| k.layer(i)));
            }
            links
        };
        shape.extend_from_slice(&spec.shape);
        weights.push(WeightLinks {
            name: name.clone(),
            shape,
            stacked: j >= outer,
            links,
        });
    }
    Ok(HfMap {
        weights,
        skipped: Vec::new(),
        stored_under: Vec::new(),
    })
}

/// One link per routed expert: their `[out, in]` matrix `{at}mlp.experts.{e}.{proj}.weight`
/// into expert `e`'s block of our `[experts, in, out]` bank (how DeepSeek-V3's and Qwen3.5's
/// checkpoints store experts).
pub(crate) fn expert_links(at: &str, experts: usize, proj: &str, out: i64, inn: i64) -> Vec<Link> {
    (0..experts)
        .map(|e| {
            Link::new(&format!("{at}mlp.experts.{e}.{proj}.weight"), &[out, inn])
                .then(Step::TransposeLast2)
                .then(Step::AddLeadingDim)
                .into_block(0, e as i64, 1)
        })
        .collect()
}

/// The error for one of our weights no link is known for.
pub(crate) fn unmapped(model: &str, name: &str) -> stackscan::Error {
    stackscan::Error::InvalidOp {
        op: "hf weights",
        message: format!("{model}: no Hugging Face tensor is known for our weight `{name}`"),
    }
}
