pub struct Toy;
const _: () = {
    #[automatically_derived]
    impl ::stackscan::__private::LayerStack for Toy {
        type Config = <GatedMlp<
            ::stackscan::__private::Tensor,
        > as ::stackscan::__private::SubLayer>::Config;
        const OPTIONS: ::stackscan::__private::PlanOptions = ::stackscan::__private::PlanOptions {
            prefetch_fsdp_weights: true,
            defer_grad_reduce_scatter: true,
            unroll: 2usize,
            scheduling_tags: true,
        };
        const LAYERS: usize = 12usize;
        const REPEAT: usize = <Toy as ::stackscan::__private::LayerStack>::LAYERS
            .saturating_sub(0usize) / 4usize;
        fn stack() -> ::stackscan::__private::Result<::stackscan::__private::Stack> {
            ::stackscan::__private::Stack::with_prefix(
                &[],
                &[
                    <GatedMlp<
                        ::stackscan::__private::Tensor,
                    > as ::stackscan::__private::SubLayer>::NAME,
                    <GatedMlp<
                        ::stackscan::__private::Tensor,
                    > as ::stackscan::__private::SubLayer>::NAME,
                    <GatedMlp<
                        ::stackscan::__private::Tensor,
                    > as ::stackscan::__private::SubLayer>::NAME,
                    <SineResidual<
                        ::stackscan::__private::Tensor,
                    > as ::stackscan::__private::SubLayer>::NAME,
                ],
                <Self as ::stackscan::__private::LayerStack>::REPEAT,
            )
        }
        fn kinds(
            __stackscan_cfg: &Self::Config,
        ) -> ::stackscan::__private::Vec<::stackscan::__private::LayerKind> {
            ::stackscan::__private::list([
                ::stackscan::__private::kind::<
                    GatedMlp<::stackscan::__private::Tensor>,
                    GatedMlp<::stackscan::__private::Tensor>,
                >(__stackscan_cfg),
                ::stackscan::__private::kind::<
                    GatedMlp<::stackscan::__private::Tensor>,
                    SineResidual<::stackscan::__private::Tensor>,
                >(__stackscan_cfg),
            ])
        }
    }
    const _: () = match <Toy as ::stackscan::__private::LayerStack>::OPTIONS.validate() {
        ::stackscan::__private::Ok(()) => {}
        ::stackscan::__private::Err(__stackscan_message) => {
            ::core::panic!("{}", __stackscan_message)
        }
    };
    const _: () = if ::stackscan::__private::str_eq(
        <GatedMlp<
            ::stackscan::__private::Tensor,
        > as ::stackscan::__private::SubLayer>::NAME,
        <SineResidual<
            ::stackscan::__private::Tensor,
        > as ::stackscan::__private::SubLayer>::NAME,
    ) {
        ::core::panic!(
            "{}",
            "sub-layers `GatedMlp` and `SineResidual` have the same kind name; give one of them another `name` in `#[sublayer(...)]`"
        )
    };
};
