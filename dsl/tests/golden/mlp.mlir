module @mlp {
  func.func public @main(%arg0: tensor<4x8xf32>, %arg1: tensor<8x16xf32>, %arg2: tensor<16xf32>, %arg3: tensor<16x4xf32>) -> (tensor<4x4xf32>) {
    %v4 = "stablehlo.dot_general"(%arg0, %arg1) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %v5 = "stablehlo.broadcast_in_dim"(%arg2) <{broadcast_dimensions = array<i64: 1>}> : (tensor<16xf32>) -> tensor<4x16xf32>
    %v6 = "stablehlo.add"(%v4, %v5) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v7 = "stablehlo.logistic"(%v6) : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %v8 = "stablehlo.multiply"(%v6, %v7) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v9 = "stablehlo.dot_general"(%v8, %arg3) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32>
    "func.return"(%v9) : (tensor<4x4xf32>) -> ()
  }
}
