module @mlp_vjp {
  func.func public @main(%arg0: tensor<4x8xf32>, %arg1: tensor<8x16xf32>, %arg2: tensor<16xf32>, %arg3: tensor<16x4xf32>, %arg4: tensor<4x4xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>) {
    %v5 = "stablehlo.dot_general"(%arg0, %arg1) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %v6 = "stablehlo.broadcast_in_dim"(%arg2) <{broadcast_dimensions = array<i64: 1>}> : (tensor<16xf32>) -> tensor<4x16xf32>
    %v7 = "stablehlo.add"(%v5, %v6) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v8 = "stablehlo.logistic"(%v7) : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %v9 = "stablehlo.multiply"(%v7, %v8) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v10 = "stablehlo.dot_general"(%v9, %arg3) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32>
    %v11 = "stablehlo.dot_general"(%arg4, %arg3) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>}> : (tensor<4x4xf32>, tensor<16x4xf32>) -> tensor<4x16xf32>
    %v12 = "stablehlo.dot_general"(%arg4, %v9) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4x4xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v13 = "stablehlo.transpose"(%v12) <{permutation = array<i64: 1, 0>}> : (tensor<4x16xf32>) -> tensor<16x4xf32>
    %v14 = "stablehlo.multiply"(%v11, %v8) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v15 = "stablehlo.multiply"(%v11, %v7) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v16 = "stablehlo.negate"(%v8) : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %v17 = "stablehlo.constant"() <{value = dense<1.0> : tensor<4x16xf32>}> : () -> tensor<4x16xf32>
    %v18 = "stablehlo.add"(%v16, %v17) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v19 = "stablehlo.multiply"(%v8, %v18) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v20 = "stablehlo.multiply"(%v15, %v19) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v21 = "stablehlo.add"(%v14, %v20) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v22 = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %v26 = "stablehlo.reduce"(%v21, %v22) <{dimensions = array<i64: 0>}> ({
      ^bb0(%a23: tensor<f32>, %a24: tensor<f32>):
        %v25 = "stablehlo.add"(%a23, %a24) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%v25) : (tensor<f32>) -> ()
      }) : (tensor<4x16xf32>, tensor<f32>) -> tensor<16xf32>
    %v27 = "stablehlo.dot_general"(%v21, %arg1) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>}> : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
    %v28 = "stablehlo.dot_general"(%v21, %arg0) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
    %v29 = "stablehlo.transpose"(%v28) <{permutation = array<i64: 1, 0>}> : (tensor<16x8xf32>) -> tensor<8x16xf32>
    "func.return"(%v27, %v29, %v26, %v13) : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>) -> ()
  }
}
