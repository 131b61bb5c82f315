module @mlp_vjp {
  func.func public @main(%arg0: tensor<4x8xf32>, %arg1: tensor<8x16xf32>, %arg2: tensor<16xf32>, %arg3: tensor<16x4xf32>, %arg4: tensor<4x4xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>) {
    %v5 = "stablehlo.dot_general"(%arg0, %arg1) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %v6 = "stablehlo.broadcast_in_dim"(%arg2) <{broadcast_dimensions = array<i64: 1>}> : (tensor<16xf32>) -> tensor<4x16xf32>
    %v7 = "stablehlo.add"(%v5, %v6) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v8 = "stablehlo.logistic"(%v7) : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %v9 = "stablehlo.multiply"(%v7, %v8) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v10 = "stablehlo.dot_general"(%v9, %arg3) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32>
    %v11 = "stablehlo.dot_general"(%arg4, %arg3) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>}> : (tensor<4x4xf32>, tensor<16x4xf32>) -> tensor<4x16xf32>
    %v12 = "stablehlo.dot_general"(%v9, %arg4) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4x16xf32>, tensor<4x4xf32>) -> tensor<16x4xf32>
    %v13 = "stablehlo.multiply"(%v11, %v8) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v14 = "stablehlo.multiply"(%v11, %v7) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v15 = "stablehlo.negate"(%v8) : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %v16 = "stablehlo.constant"() <{value = dense<1.0> : tensor<4x16xf32>}> : () -> tensor<4x16xf32>
    %v17 = "stablehlo.add"(%v15, %v16) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v18 = "stablehlo.multiply"(%v8, %v17) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v19 = "stablehlo.multiply"(%v14, %v18) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v20 = "stablehlo.add"(%v13, %v19) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v21 = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %v25 = "stablehlo.reduce"(%v20, %v21) <{dimensions = array<i64: 0>}> ({
      ^bb0(%a22: tensor<f32>, %a23: tensor<f32>):
        %v24 = "stablehlo.add"(%a22, %a23) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%v24) : (tensor<f32>) -> ()
      }) : (tensor<4x16xf32>, tensor<f32>) -> tensor<16xf32>
    %v26 = "stablehlo.dot_general"(%v20, %arg1) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>}> : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
    %v27 = "stablehlo.dot_general"(%arg0, %v20) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
    "func.return"(%v26, %v27, %v25, %v12) : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>) -> ()
  }
}
