// One declaration holds host arrays, names or tensors: `Params<T>` for every `T`.
use stackscan::layer::Params;
use stackscan::{SubLayer, Tensor};
use stackscan_ui_tests::{Attn, Mlp};

fn main() {
    let host = Attn::from_values(vec![vec![1.0f32; 16], vec![2.0f32; 4]]).unwrap();
    assert_eq!(host.gain, [2.0; 4]);
    assert_eq!(host.values().len(), 2);
    let names: Attn<&str> = Params::from_values(vec!["u", "gain"]).unwrap();
    assert_eq!(names.into_values(), ["u", "gain"]);
    assert!(Mlp::<u8>::from_values(vec![1, 2]).is_err(), "one value too many");
    assert_eq!(<Attn<Tensor> as Params<Tensor>>::LEN, 2);
    assert_eq!(<Attn<Tensor> as SubLayer>::NAME, "attention");
    let _: Option<<Attn<Tensor> as SubLayer>::Of<String>> = None::<Attn<String>>;
}
