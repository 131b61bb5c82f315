// Items named like what generated code uses: a `const cfg` and a `static cfg` (the name the
// attribute expressions read the config by), and types `usize` and `str`.
#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]

use stackscan::layer::{ActivationMarker, Forward};
use stackscan::{LayerStack, Result, SubLayer, Tensor, layer_stack};

#[derive(Clone)]
pub struct Cfg {
    pub d: i64,
    pub layers: u32,
}
pub enum Hidden {}
impl ActivationMarker for Hidden {}

mod constant {
    use super::*;

    struct usize;
    struct str;
    const cfg: u8 = 0;
    const BLOCKS: std::primitive::usize = 2;

    #[derive(SubLayer)]
    #[sublayer(config = Cfg, carry = Hidden)]
    pub struct Mlp<T> {
        #[param(shape = [cfg.d, cfg.d], shard = 0, init = normal(1.0 / cfg.d as f64))]
        w: T,
    }

    impl Forward for Mlp<Tensor> {
        fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
            h.matmul(&self.w)
        }
    }

    #[layer_stack(block = [Mlp], repeat = BLOCKS)]
    pub struct Fixed;

    #[layer_stack(block = [Mlp], layers = cfg.layers)]
    pub struct Deep;
}

mod statics {
    use super::*;

    static cfg: u8 = 0;

    #[derive(SubLayer)]
    #[sublayer(config = Cfg, carry = Hidden)]
    pub struct Mlp<T> {
        #[param(shape = [cfg.d, cfg.d], shard = 0)]
        w: T,
    }

    impl Forward for Mlp<Tensor> {
        fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
            h.matmul(&self.w)
        }
    }

    #[layer_stack(block = [Mlp], layers = cfg.layers)]
    pub struct Deep;
}

fn main() {
    let config = Cfg { d: 2, layers: 3 };
    assert_eq!(constant::Fixed::layers(&config), Ok(2));
    assert_eq!(constant::Deep::layers(&config), Ok(3));
    assert_eq!(statics::Deep::layers(&config), Ok(3));
    assert_eq!(constant::Deep::kinds(&config)[0].params[0].shape, [2, 2]);
}
