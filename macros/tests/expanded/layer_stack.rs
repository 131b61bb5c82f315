pub struct Toy;
const _: () = {
    use ::stackscan::__private::Entry as _;
    fn __stackscan_stack(
        _: &<Toy as ::stackscan::__private::LayerStack>::Config,
    ) -> ::stackscan::__private::Result<::stackscan::__private::Stack> {
        const __STACKSCAN_NAMES: (
            [&'static ::stackscan::__private::primitive::str; 0usize],
            [&'static ::stackscan::__private::primitive::str; 4usize],
        ) = {
            let __stackscan_entry0 = GatedMlp::__STACKSCAN_ENTRY;
            let __stackscan_entry1 = SineResidual::__STACKSCAN_ENTRY;
            if ::stackscan::__private::clash(__stackscan_entry0, __stackscan_entry1) {
                ::stackscan::__private::panic!(
                    "{}",
                    "sub-layers `GatedMlp` and `SineResidual` have the same kind name; give one of them another `name` in `#[sublayer(...)]`"
                )
            }
            (
                [],
                [
                    ::stackscan::__private::name(__stackscan_entry0),
                    ::stackscan::__private::name(__stackscan_entry0),
                    ::stackscan::__private::name(__stackscan_entry0),
                    ::stackscan::__private::name(__stackscan_entry1),
                ],
            )
        };
        ::stackscan::__private::stack_of::<
            Toy,
        >(
            &__STACKSCAN_NAMES.0,
            &__STACKSCAN_NAMES.1,
            ::stackscan::__private::Count::Layers(
                ::stackscan::__private::count_value(12usize),
            ),
            ::stackscan::__private::Source::Const,
        )
    }
    fn __stackscan_kinds(
        __stackscan_cfg: &<Toy as ::stackscan::__private::LayerStack>::Config,
    ) -> ::stackscan::__private::Vec<::stackscan::__private::LayerKind> {
        let __stackscan_entry0 = GatedMlp::__STACKSCAN_ENTRY;
        let __stackscan_entry1 = SineResidual::__STACKSCAN_ENTRY;
        let (__stackscan_entry0, __stackscan_cfg) = ::stackscan::__private::with_config::<
            <Toy as ::stackscan::__private::LayerStack>::Config,
            _,
        >(__stackscan_entry0, __stackscan_cfg);
        ::stackscan::__private::distinct([
            ::stackscan::__private::kind(
                __stackscan_entry0,
                __stackscan_entry0,
                __stackscan_cfg,
            ),
            ::stackscan::__private::kind(
                __stackscan_entry0,
                __stackscan_entry1,
                __stackscan_cfg,
            ),
        ])
    }
    #[automatically_derived]
    impl<__StackscanConfig> ::stackscan::__private::LayerStack for Toy
    where
        GatedMlp<
            ::stackscan::__private::Tensor,
        >: ::stackscan::__private::SubLayer<Config = __StackscanConfig>,
        __StackscanConfig: ::stackscan::__private::Clone + 'static,
    {
        type Config = __StackscanConfig;
        const OPTIONS: ::stackscan::__private::PlanOptions = ::stackscan::__private::PlanOptions {
            prefetch_fsdp_weights: true,
            defer_grad_reduce_scatter: true,
            unroll: 2usize,
            precision: ::stackscan::__private::Precision::F32,
            ..::stackscan::__private::PlanOptions::baseline()
        };
        fn stack(
            __stackscan_cfg: &Self::Config,
        ) -> ::stackscan::__private::Result<::stackscan::__private::Stack> {
            __stackscan_stack(__stackscan_cfg)
        }
        fn kinds(
            __stackscan_cfg: &Self::Config,
        ) -> ::stackscan::__private::Vec<::stackscan::__private::LayerKind> {
            __stackscan_kinds(__stackscan_cfg)
        }
    }
    const _: () = match <Toy as ::stackscan::__private::LayerStack>::OPTIONS.validate() {
        ::stackscan::__private::Ok(()) => {}
        ::stackscan::__private::Err(__stackscan_message) => {
            ::stackscan::__private::panic!("{}", __stackscan_message)
        }
    };
};
