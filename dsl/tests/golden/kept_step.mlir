module @kept_step {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>, %arg2: tensor<3x4xf32>, %arg3: tensor<4x2xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<1x2xf32>) {
    %v4 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %v5 = "stablehlo.slice"(%arg0) <{start_indices = array<i64: 0>, limit_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<4xf32>) -> tensor<1xf32>
    %v6 = "stablehlo.reshape"(%v5) : (tensor<1xf32>) -> tensor<f32>
    %v7 = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %v8 = "stablehlo.multiply"(%v6, %v7) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %v9 = "stablehlo.convert"(%v8) : (tensor<f32>) -> tensor<i32>
    %v10 = "stablehlo.add"(%v4, %v9) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %v21:5 = "stablehlo.case"(%v10) ({
        %v11 = "stablehlo.constant"() <{value = dense<0.0> : tensor<4xf32>}> : () -> tensor<4xf32>
        %v12 = "stablehlo.constant"() <{value = dense<0.0> : tensor<1x4xf32>}> : () -> tensor<1x4xf32>
        %v13 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v14 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v15 = "stablehlo.constant"() <{value = dense<0.0> : tensor<2xf32>}> : () -> tensor<2xf32>
        "stablehlo.return"(%v11, %v12, %v13, %v14, %v15) : (tensor<4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>, tensor<2xf32>) -> ()
      }, {
        %v16 = "stablehlo.tanh"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
        %v17 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v18 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v19 = "stablehlo.reshape"(%v16) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v20 = "stablehlo.dot_general"(%v16, %arg3) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4xf32>, tensor<4x2xf32>) -> tensor<2xf32>
        "stablehlo.return"(%v16, %v19, %v17, %v18, %v20) : (tensor<4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>, tensor<2xf32>) -> ()
      }) {mhlo.frontend_attributes = {"stackscan_loop" = "a kept step"}} : (tensor<i32>) -> (tensor<4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>, tensor<2xf32>)
    %v22 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %v38:5 = "stablehlo.while"(%v22, %arg2, %v21#1, %v21#2, %v21#3) ({
      ^bb0(%a23: tensor<i32>, %a24: tensor<3x4xf32>, %a25: tensor<1x4xf32>, %a26: tensor<i32>, %a27: tensor<i32>):
        %v28 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v29 = "stablehlo.compare"(%a23, %v28) <{comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%v29) : (tensor<i1>) -> ()
      }, {
      ^bb0(%a30: tensor<i32>, %a31: tensor<3x4xf32>, %a32: tensor<1x4xf32>, %a33: tensor<i32>, %a34: tensor<i32>):
        %v35 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v36 = "stablehlo.add"(%a30, %v35) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v37 = "stablehlo.dynamic_update_slice"(%a31, %a32, %a33, %a34) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        "stablehlo.return"(%v36, %v37, %a32, %a33, %a34) : (tensor<i32>, tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> ()
      }) {mhlo.frontend_attributes = {"skip-simplify-while-loops_trip-count-one" = "true"}} : (tensor<i32>, tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> (tensor<i32>, tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>)
    %v39 = "stablehlo.reshape"(%v21#4) : (tensor<2xf32>) -> tensor<1x2xf32>
    "func.return"(%v21#0, %arg1, %v38#1, %v39) : (tensor<4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<1x2xf32>) -> ()
  }
}
