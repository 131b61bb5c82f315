// `inputs = …` as the struct's path (`Batch`, a longer path) or over the model's value type
// (`Batch<T>`): each is the inputs struct over `Tensor`.
use stackscan::Model;
use stackscan::model::Layers;
use stackscan_ui_tests::{Batch, Cfg, TwoMlps};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch<T>)]
struct OverT<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack]
    layers: Layers<TwoMlps>,
}

#[derive(Model)]
#[model(config = Cfg, inputs = stackscan_ui_tests::Batch)]
struct ByPath<V> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: V,
    #[stack]
    layers: Layers<TwoMlps>,
}

fn same<A: 'static, B: 'static>() -> bool {
    std::any::TypeId::of::<A>() == std::any::TypeId::of::<B>()
}

fn main() {
    type Inputs<M> = <M as Model>::Inputs;
    assert!(same::<Inputs<OverT<stackscan::Tensor>>, Batch<stackscan::Tensor>>());
    assert!(same::<Inputs<ByPath<stackscan::Tensor>>, Batch<stackscan::Tensor>>());
}
