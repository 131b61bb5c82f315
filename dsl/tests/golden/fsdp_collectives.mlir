module @fsdp_exchange attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["fsdp"=4]>
  func.func public @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"fsdp"}, {}]>}) -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"fsdp"}]>}) {
    %manual1 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"fsdp"}, {}]>] out_shardings=[<@mesh, [{}, {"fsdp"}]>] manual_axes={"fsdp"} (%local2: tensor<2x8xf32>) {
      %v3 = "stablehlo.all_gather"(%local2) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> : (tensor<2x8xf32>) -> tensor<8x8xf32>
      %v4 = "stablehlo.multiply"(%v3, %v3) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      %v8 = "stablehlo.reduce_scatter"(%v4) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 1 : i64, use_global_device_ids}> ({
        ^bb0(%a5: tensor<f32>, %a6: tensor<f32>):
          %v7 = "stablehlo.add"(%a5, %a6) : (tensor<f32>, tensor<f32>) -> tensor<f32>
          "stablehlo.return"(%v7) : (tensor<f32>) -> ()
        }) : (tensor<8x8xf32>) -> tensor<8x2xf32>
      sdy.return %v8 : tensor<8x2xf32>
    } : (tensor<8x8xf32>) -> (tensor<8x8xf32>)
    return %manual1 : tensor<8x8xf32>
  }
}
