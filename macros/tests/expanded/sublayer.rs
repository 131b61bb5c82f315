const _: () = {
    #[automatically_derived]
    impl ::stackscan::__private::SubLayer for GatedMlp<::stackscan::__private::Tensor> {
        type Config = ToyConfig;
        type Carry = Hidden;
        type Of<T> = GatedMlp<T>;
        const NAME: &'static ::stackscan::__private::primitive::str = "A";
        const IDENTITY: &'static ::stackscan::__private::primitive::str = ::stackscan::__private::concat!(
            ::stackscan::__private::module_path!(), "::", "GatedMlp", ":",
            ::stackscan::__private::line!(), ":", ::stackscan::__private::column!()
        );
        fn param_specs(
            __stackscan_cfg: &Self::Config,
        ) -> ::stackscan::__private::Vec<::stackscan::__private::ParamSpec> {
            let _ = __stackscan_cfg;
            let mut __stackscan_specs = ::stackscan::__private::Vec::new();
            __stackscan_specs
                .push(
                    ::stackscan::__private::ParamSpec::sharded(
                            "w1",
                            &[__stackscan_cfg.d, __stackscan_cfg.f],
                            ::stackscan::__private::DType::F32,
                            0usize,
                        )
                        .with_init(::stackscan::__private::Init::Normal(0.02)),
                );
            __stackscan_specs
                .push(
                    ::stackscan::__private::ParamSpec::sharded(
                            "w2",
                            &[__stackscan_cfg.f, __stackscan_cfg.d],
                            ::stackscan::__private::DType::F32,
                            1usize,
                        )
                        .with_init(::stackscan::__private::Init::Normal(0.01)),
                );
            __stackscan_specs
                .push(
                    ::stackscan::__private::ParamSpec::replicated(
                            "gain",
                            &[__stackscan_cfg.d],
                            ::stackscan::__private::DType::F32,
                        )
                        .with_init(::stackscan::__private::Init::Ones),
                );
            __stackscan_specs
                .push(
                    ::stackscan::__private::ParamSpec::replicated(
                            "b",
                            &[__stackscan_cfg.d],
                            ::stackscan::__private::DType::BF16,
                        )
                        .with_init(::stackscan::__private::Init::Zeros),
                );
            __stackscan_specs
        }
    }
    #[automatically_derived]
    impl<T> ::stackscan::__private::Params<T> for GatedMlp<T> {
        const LEN: ::stackscan::__private::primitive::usize = 4usize;
        fn from_values(
            __stackscan_values: ::stackscan::__private::Vec<T>,
        ) -> ::stackscan::__private::Result<Self> {
            let mut __stackscan_values = ::stackscan::__private::Values::new(
                __stackscan_values,
                "GatedMlp",
                <Self as ::stackscan::__private::Params<T>>::LEN,
            )?;
            ::stackscan::__private::Ok(GatedMlp {
                w1: __stackscan_values.one()?,
                w2: __stackscan_values.one()?,
                gain: __stackscan_values.one()?,
                bias: __stackscan_values.one()?,
            })
        }
        fn into_values(self) -> ::stackscan::__private::Vec<T> {
            let mut __stackscan_out = ::stackscan::__private::Vec::with_capacity(
                <Self as ::stackscan::__private::Params<T>>::LEN,
            );
            __stackscan_out.push(self.w1);
            __stackscan_out.push(self.w2);
            __stackscan_out.push(self.gain);
            __stackscan_out.push(self.bias);
            __stackscan_out
        }
        fn values(&self) -> ::stackscan::__private::Vec<&T> {
            let mut __stackscan_out = ::stackscan::__private::Vec::with_capacity(
                <Self as ::stackscan::__private::Params<T>>::LEN,
            );
            __stackscan_out.push(&self.w1);
            __stackscan_out.push(&self.w2);
            __stackscan_out.push(&self.gain);
            __stackscan_out.push(&self.bias);
            __stackscan_out
        }
    }
};
