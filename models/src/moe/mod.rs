//! Mixture-of-experts building blocks, config-driven so any model can reuse them.
//!
//! - [`router`]: which experts each token goes to, and with what weight, for both routing
//!   schemes in use: softmax top-k renormalised (Qwen-style) and DeepSeek-V3's sigmoid
//!   scores with a selection bias and group-limited top-k;
//! - [`dispatch`]: the routed experts as capacity-padded `[E, C, d]` batched products;
//! - [`layer`]: the whole sub-layer, router, routed and shared experts (optionally gated),
//!   and what it reports and balances: dropped assignments, load imbalance, DeepSeek-V3's
//!   selection-bias rule and the load-balancing losses;
//! - [`module`]: the same as declared modules with named parameters ([`Moe`], [`GatedMoe`],
//!   [`Experts`]), what a model's sub-layer holds as a `#[module]` field;
//! - [`parallel`]: expert parallelism on an `fsdp × expert` mesh (tokens exchanged by
//!   `all_to_all`).
//!
//! ```
//! use stackscan::{DType, Scope, TensorType};
//! use stackscan_models::moe::{RouterConfig, RouterKind, route};
//! let s = Scope::new("router");
//! let logits = s.param(TensorType::new(DType::F32, [64, 16]));
//! let cfg = RouterConfig { experts: 16, top_k: 4, kind: RouterKind::Softmax };
//! let r = route(&cfg, &logits, None)?;
//! assert_eq!(r.weights.dims(), &[64, 4]);
//! assert_eq!(r.experts.dtype(), DType::I32);
//! # Ok::<(), stackscan::Error>(())
//! ```

pub mod dispatch;
pub mod layer;
pub mod module;
pub mod parallel;
pub mod router;

pub use dispatch::{
    DispatchOptions, ExpertWeights, NO_DROP, capacity, check_capacity_factor, routed_experts,
};
pub use layer::{AUX_LOSS, DROPPED, IMBALANCE, MoeConfig, MoeWeights, SharedExpert, moe};
pub use module::{ExpertDims, Experts, GatedMoe, Moe, MoeDims};
pub use parallel::{EXPERT_AXIS, ExpertMesh, FSDP_AXIS};
pub use router::{RouterConfig, RouterKind, Routing, route};
