module @rnn {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<3x4xf32>, %arg2: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<3x4xf32>) {
    %v3 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %v4 = "stablehlo.slice"(%arg0) <{start_indices = array<i64: 0>, limit_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<4xf32>) -> tensor<1xf32>
    %v5 = "stablehlo.reshape"(%v4) : (tensor<1xf32>) -> tensor<f32>
    %v6 = "stablehlo.broadcast_in_dim"(%v5) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3x4xf32>
    %v29:5 = "stablehlo.while"(%v3, %arg0, %v6, %arg1, %arg2) ({
      ^bb0(%a7: tensor<i32>, %a8: tensor<4xf32>, %a9: tensor<3x4xf32>, %a10: tensor<3x4xf32>, %a11: tensor<4x4xf32>):
        %v12 = "stablehlo.constant"() <{value = dense<3> : tensor<i32>}> : () -> tensor<i32>
        %v13 = "stablehlo.compare"(%a7, %v12) <{comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%v13) : (tensor<i1>) -> ()
      }, {
      ^bb0(%a14: tensor<i32>, %a15: tensor<4xf32>, %a16: tensor<3x4xf32>, %a17: tensor<3x4xf32>, %a18: tensor<4x4xf32>):
        %v19 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v20 = "stablehlo.dynamic_slice"(%a17, %a14, %v19) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v21 = "stablehlo.reshape"(%v20) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v22 = "stablehlo.dot_general"(%a15, %a18) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
        %v23 = "stablehlo.add"(%v22, %v21) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v24 = "stablehlo.tanh"(%v23) : (tensor<4xf32>) -> tensor<4xf32>
        %v25 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v26 = "stablehlo.add"(%a14, %v25) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v27 = "stablehlo.reshape"(%v24) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v28 = "stablehlo.dynamic_update_slice"(%a16, %v27, %a14, %v19) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        "stablehlo.return"(%v26, %v24, %v28, %a17, %a18) : (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> ()
      }) : (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>)
    "func.return"(%v29#1, %v29#2) : (tensor<4xf32>, tensor<3x4xf32>) -> ()
  }
}
