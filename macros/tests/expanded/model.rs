const _: () = {
    #[automatically_derived]
    impl<S> ::stackscan::__private::Model for Llama<::stackscan::__private::Tensor, S>
    where
        Layers<S>: ::stackscan::__private::StackField,
        <Layers<
            S,
        > as ::stackscan::__private::StackField>::Stack: ::stackscan::__private::LayerStack<
            Config = LlamaConfig,
        >,
        Self: 'static,
    {
        type Config = LlamaConfig;
        type Stack = <Layers<S> as ::stackscan::__private::StackField>::Stack;
        type Inputs = Tokens<::stackscan::__private::Tensor>;
        fn outer_specs(
            __stackscan_cfg: &Self::Config,
        ) -> ::stackscan::__private::Vec<::stackscan::__private::ParamSpec> {
            let _ = __stackscan_cfg;
            let mut __stackscan_specs = ::stackscan::__private::Vec::new();
            __stackscan_specs
                .push(
                    ::stackscan::__private::ParamSpec::sharded(
                            "embed",
                            &[__stackscan_cfg.vocab, __stackscan_cfg.d],
                            ::stackscan::__private::DType::F32,
                            0usize,
                        )
                        .with_init(::stackscan::__private::Init::Normal(0.02)),
                );
            __stackscan_specs
                .append(
                    &mut ::stackscan::__private::nested(
                        "head",
                        <Head<
                            ::stackscan::__private::Tensor,
                        > as ::stackscan::__private::Module>::param_specs(
                            ::stackscan::__private::SameConfig::<
                                <Head<
                                    ::stackscan::__private::Tensor,
                                > as ::stackscan::__private::Module>::Config,
                            >::same(__stackscan_cfg),
                        ),
                    ),
                );
            __stackscan_specs
        }
    }
    #[automatically_derived]
    impl<T, S> ::stackscan::__private::Params<T> for Llama<T, S> {
        const LEN: ::stackscan::__private::primitive::usize = 1usize
            + <Head<T> as ::stackscan::__private::Params<T>>::LEN;
        fn from_values(
            __stackscan_values: ::stackscan::__private::Vec<T>,
        ) -> ::stackscan::__private::Result<Self> {
            let mut __stackscan_values = ::stackscan::__private::Values::new(
                __stackscan_values,
                "Llama",
                <Self as ::stackscan::__private::Params<T>>::LEN,
            )?;
            ::stackscan::__private::Ok(Llama {
                embed: __stackscan_values.one()?,
                layers: ::stackscan::__private::Layers::new(),
                head: __stackscan_values.module::<Head<T>>()?,
            })
        }
        fn into_values(self) -> ::stackscan::__private::Vec<T> {
            let mut __stackscan_out = ::stackscan::__private::Vec::with_capacity(
                <Self as ::stackscan::__private::Params<T>>::LEN,
            );
            __stackscan_out.push(self.embed);
            __stackscan_out
                .append(
                    &mut <Head<
                        T,
                    > as ::stackscan::__private::Params<T>>::into_values(self.head),
                );
            __stackscan_out
        }
        fn values(&self) -> ::stackscan::__private::Vec<&T> {
            let mut __stackscan_out = ::stackscan::__private::Vec::with_capacity(
                <Self as ::stackscan::__private::Params<T>>::LEN,
            );
            __stackscan_out.push(&self.embed);
            __stackscan_out
                .append(
                    &mut <Head<
                        T,
                    > as ::stackscan::__private::Params<T>>::values(&self.head),
                );
            __stackscan_out
        }
    }
};
