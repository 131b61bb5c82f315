const _: () = {
    #[automatically_derived]
    impl ::stackscan::__private::SubLayer for GatedMlp<::stackscan::__private::Tensor> {
        type Config = ToyConfig;
        type Carry = Hidden;
        type Of<T> = GatedMlp<T>;
        const NAME: &'static str = "A";
        const IDENTITY: &'static str = ::core::concat!(
            ::core::module_path!(), "::", "GatedMlp", ":", ::core::line!(), ":",
            ::core::column!()
        );
        fn param_specs(
            cfg: &Self::Config,
        ) -> ::stackscan::__private::Vec<::stackscan::__private::ParamSpec> {
            let _ = cfg;
            ::stackscan::__private::list([
                ::stackscan::__private::ParamSpec::sharded(
                        "w1",
                        &[cfg.d, cfg.f],
                        ::stackscan::__private::DType::F32,
                        0usize,
                    )
                    .with_init(::stackscan::__private::Init::Normal(0.02)),
                ::stackscan::__private::ParamSpec::sharded(
                        "w2",
                        &[cfg.f, cfg.d],
                        ::stackscan::__private::DType::F32,
                        1usize,
                    )
                    .with_init(::stackscan::__private::Init::Normal(0.01)),
                ::stackscan::__private::ParamSpec::replicated(
                        "gain",
                        &[cfg.d],
                        ::stackscan::__private::DType::F32,
                    )
                    .with_init(::stackscan::__private::Init::Ones),
                ::stackscan::__private::ParamSpec::replicated(
                        "b",
                        &[cfg.d],
                        ::stackscan::__private::DType::BF16,
                    )
                    .with_init(::stackscan::__private::Init::Zeros),
            ])
        }
    }
    #[automatically_derived]
    impl<T> ::stackscan::__private::Params<T> for GatedMlp<T> {
        const LEN: usize = 4usize;
        fn from_values(
            __stackscan_values: ::stackscan::__private::Vec<T>,
        ) -> ::stackscan::__private::Result<Self> {
            match <[T; 4usize] as ::stackscan::__private::TryFrom<
                ::stackscan::__private::Vec<T>,
            >>::try_from(__stackscan_values) {
                ::stackscan::__private::Ok(
                    [__stackscan_value0,
                    __stackscan_value1,
                    __stackscan_value2,
                    __stackscan_value3,
                    ],
                ) => {
                    ::stackscan::__private::Ok(GatedMlp {
                        w1: __stackscan_value0,
                        w2: __stackscan_value1,
                        gain: __stackscan_value2,
                        bias: __stackscan_value3,
                    })
                }
                ::stackscan::__private::Err(__stackscan_values) => {
                    ::stackscan::__private::Err(
                        ::stackscan::__private::wrong_count(
                            "GatedMlp",
                            4usize,
                            __stackscan_values.len(),
                        ),
                    )
                }
            }
        }
        fn into_values(self) -> ::stackscan::__private::Vec<T> {
            ::stackscan::__private::list([self.w1, self.w2, self.gain, self.bias])
        }
        fn values(&self) -> ::stackscan::__private::Vec<&T> {
            ::stackscan::__private::list([&self.w1, &self.w2, &self.gain, &self.bias])
        }
    }
};
