module @rnn_vjp {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<3x4xf32>, %arg2: tensor<4x4xf32>, %arg3: tensor<4xf32>, %arg4: tensor<3x4xf32>) -> (tensor<4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) {
    %v5 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %v6 = "stablehlo.slice"(%arg0) <{start_indices = array<i64: 0>, limit_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<4xf32>) -> tensor<1xf32>
    %v7 = "stablehlo.reshape"(%v6) : (tensor<1xf32>) -> tensor<f32>
    %v8 = "stablehlo.broadcast_in_dim"(%v7) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3x4xf32>
    %v9 = "stablehlo.slice"(%arg0) <{start_indices = array<i64: 1>, limit_indices = array<i64: 2>, strides = array<i64: 1>}> : (tensor<4xf32>) -> tensor<1xf32>
    %v10 = "stablehlo.reshape"(%v9) : (tensor<1xf32>) -> tensor<f32>
    %v11 = "stablehlo.broadcast_in_dim"(%v10) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3x4xf32>
    %v38:6 = "stablehlo.while"(%v5, %arg0, %v8, %v11, %arg1, %arg2) ({
      ^bb0(%a12: tensor<i32>, %a13: tensor<4xf32>, %a14: tensor<3x4xf32>, %a15: tensor<3x4xf32>, %a16: tensor<3x4xf32>, %a17: tensor<4x4xf32>):
        %v18 = "stablehlo.constant"() <{value = dense<3> : tensor<i32>}> : () -> tensor<i32>
        %v19 = "stablehlo.compare"(%a12, %v18) <{comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%v19) : (tensor<i1>) -> ()
      }, {
      ^bb0(%a20: tensor<i32>, %a21: tensor<4xf32>, %a22: tensor<3x4xf32>, %a23: tensor<3x4xf32>, %a24: tensor<3x4xf32>, %a25: tensor<4x4xf32>):
        %v26 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v27 = "stablehlo.dynamic_slice"(%a24, %a20, %v26) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v28 = "stablehlo.reshape"(%v27) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v29 = "stablehlo.dot_general"(%a21, %a25) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
        %v30 = "stablehlo.add"(%v29, %v28) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v31 = "stablehlo.tanh"(%v30) : (tensor<4xf32>) -> tensor<4xf32>
        %v32 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v33 = "stablehlo.add"(%a20, %v32) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v34 = "stablehlo.reshape"(%v31) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v35 = "stablehlo.dynamic_update_slice"(%a22, %v34, %a20, %v26) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        %v36 = "stablehlo.reshape"(%a21) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v37 = "stablehlo.dynamic_update_slice"(%a23, %v36, %a20, %v26) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        "stablehlo.return"(%v33, %v31, %v35, %v37, %a24, %a25) : (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> ()
      }) : (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>)
    %v39 = "stablehlo.constant"() <{value = dense<0.0> : tensor<4x4xf32>}> : () -> tensor<4x4xf32>
    %v40 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %v41 = "stablehlo.slice"(%arg3) <{start_indices = array<i64: 0>, limit_indices = array<i64: 1>, strides = array<i64: 1>}> : (tensor<4xf32>) -> tensor<1xf32>
    %v42 = "stablehlo.reshape"(%v41) : (tensor<1xf32>) -> tensor<f32>
    %v43 = "stablehlo.broadcast_in_dim"(%v42) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<3x4xf32>
    %v87:8 = "stablehlo.while"(%v40, %arg3, %v39, %v43, %v38#3, %arg1, %arg4, %arg2) ({
      ^bb0(%a44: tensor<i32>, %a45: tensor<4xf32>, %a46: tensor<4x4xf32>, %a47: tensor<3x4xf32>, %a48: tensor<3x4xf32>, %a49: tensor<3x4xf32>, %a50: tensor<3x4xf32>, %a51: tensor<4x4xf32>):
        %v52 = "stablehlo.constant"() <{value = dense<3> : tensor<i32>}> : () -> tensor<i32>
        %v53 = "stablehlo.compare"(%a44, %v52) <{comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%v53) : (tensor<i1>) -> ()
      }, {
      ^bb0(%a54: tensor<i32>, %a55: tensor<4xf32>, %a56: tensor<4x4xf32>, %a57: tensor<3x4xf32>, %a58: tensor<3x4xf32>, %a59: tensor<3x4xf32>, %a60: tensor<3x4xf32>, %a61: tensor<4x4xf32>):
        %v62 = "stablehlo.constant"() <{value = dense<2> : tensor<i32>}> : () -> tensor<i32>
        %v63 = "stablehlo.subtract"(%v62, %a54) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v64 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v65 = "stablehlo.dynamic_slice"(%a58, %v63, %v64) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v66 = "stablehlo.reshape"(%v65) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v67 = "stablehlo.dynamic_slice"(%a59, %v63, %v64) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v68 = "stablehlo.reshape"(%v67) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v69 = "stablehlo.dynamic_slice"(%a60, %v63, %v64) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v70 = "stablehlo.reshape"(%v69) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v71 = "stablehlo.dot_general"(%v66, %a61) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
        %v72 = "stablehlo.add"(%v71, %v68) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v73 = "stablehlo.tanh"(%v72) : (tensor<4xf32>) -> tensor<4xf32>
        %v74 = "stablehlo.add"(%a55, %v70) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v75 = "stablehlo.multiply"(%v73, %v73) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v76 = "stablehlo.negate"(%v75) : (tensor<4xf32>) -> tensor<4xf32>
        %v77 = "stablehlo.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
        %v78 = "stablehlo.add"(%v76, %v77) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v79 = "stablehlo.multiply"(%v74, %v78) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v80 = "stablehlo.dot_general"(%v79, %a61) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [1]>}> : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
        %v81 = "stablehlo.dot_general"(%v66, %v79) <{dot_dimension_numbers = #stablehlo.dot<>}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
        %v82 = "stablehlo.add"(%a56, %v81) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
        %v83 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v84 = "stablehlo.add"(%a54, %v83) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v85 = "stablehlo.reshape"(%v79) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v86 = "stablehlo.dynamic_update_slice"(%a57, %v85, %v63, %v64) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        "stablehlo.return"(%v84, %v80, %v82, %v86, %a58, %a59, %a60, %a61) : (tensor<i32>, tensor<4xf32>, tensor<4x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> ()
      }) : (tensor<i32>, tensor<4xf32>, tensor<4x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> (tensor<i32>, tensor<4xf32>, tensor<4x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>)
    "func.return"(%v87#1, %v87#3, %v87#2) : (tensor<4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> ()
  }
}
