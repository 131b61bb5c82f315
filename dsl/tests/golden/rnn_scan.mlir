module @rnn {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<3x4xf32>, %arg2: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<3x4xf32>) {
    %v3 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %v4 = "stablehlo.constant"() <{value = dense<0.0> : tensor<3x4xf32>}> : () -> tensor<3x4xf32>
    %v27:5 = "stablehlo.while"(%v3, %arg0, %v4, %arg1, %arg2) ({
      ^bb0(%a5: tensor<i32>, %a6: tensor<4xf32>, %a7: tensor<3x4xf32>, %a8: tensor<3x4xf32>, %a9: tensor<4x4xf32>):
        %v10 = "stablehlo.constant"() <{value = dense<3> : tensor<i32>}> : () -> tensor<i32>
        %v11 = "stablehlo.compare"(%a5, %v10) <{comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%v11) : (tensor<i1>) -> ()
      }, {
      ^bb0(%a12: tensor<i32>, %a13: tensor<4xf32>, %a14: tensor<3x4xf32>, %a15: tensor<3x4xf32>, %a16: tensor<4x4xf32>):
        %v17 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v18 = "stablehlo.dynamic_slice"(%a15, %a12, %v17) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v19 = "stablehlo.reshape"(%v18) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v20 = "stablehlo.dot_general"(%a13, %a16) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
        %v21 = "stablehlo.add"(%v20, %v19) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v22 = "stablehlo.tanh"(%v21) : (tensor<4xf32>) -> tensor<4xf32>
        %v23 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v24 = "stablehlo.add"(%a12, %v23) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v25 = "stablehlo.reshape"(%v22) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v26 = "stablehlo.dynamic_update_slice"(%a14, %v25, %a12, %v17) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        "stablehlo.return"(%v24, %v22, %v26, %a15, %a16) : (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> ()
      }) : (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>)
    "func.return"(%v27#1, %v27#2) : (tensor<4xf32>, tensor<3x4xf32>) -> ()
  }
}
