// Generated code names nothing of the user's scope: a module that shadows prelude names
// (`Vec`, `Ok`, `Result`, `String`, `Some`) and declares a `cfg`, `values` and `LAYERS`.
#![no_implicit_prelude]

mod model {
    use ::stackscan::layer::{ActivationMarker, Forward};
    use ::stackscan::{LayerStack, SubLayer, Tensor, layer_stack};

    #[allow(dead_code)]
    struct Vec;
    #[allow(dead_code)]
    struct String;
    #[allow(dead_code)]
    enum Result { Ok, Err }
    #[allow(dead_code)]
    struct Some;
    #[allow(dead_code, non_upper_case_globals)]
    const values: u8 = 0;
    const LAYERS: usize = 4;

    #[derive(::core::clone::Clone)]
    pub struct Cfg { pub d: i64 }
    pub enum Hidden {}
    impl ActivationMarker for Hidden {}

    #[derive(SubLayer)]
    #[sublayer(config = Cfg, carry = Hidden)]
    pub struct Values<T> {
        #[param(shape = [cfg.d, cfg.d], shard = 0)]
        values: T,
    }

    impl Forward for Values<Tensor> {
        fn forward(&self, _: &Cfg, h: &Tensor) -> ::stackscan::Result<Tensor> {
            h.matmul(&self.values)
        }
    }

    #[layer_stack(block = [Values], layers = LAYERS, prefetch_fsdp_weights)]
    pub struct Model;

    pub fn check() {
        ::core::assert_eq!(<Model as LayerStack>::layers(&Cfg { d: 2 }), ::core::result::Result::Ok(4));
        ::core::assert_eq!(<Model as LayerStack>::kinds(&Cfg { d: 2 }).len(), 1);
    }
}

fn main() {
    model::check();
}
