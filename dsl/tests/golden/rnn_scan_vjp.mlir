module @rnn_vjp {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<3x4xf32>, %arg2: tensor<4x4xf32>, %arg3: tensor<4xf32>, %arg4: tensor<3x4xf32>) -> (tensor<4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) {
    %v5 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %v6 = "stablehlo.constant"() <{value = dense<0.0> : tensor<3x4xf32>}> : () -> tensor<3x4xf32>
    %v7 = "stablehlo.constant"() <{value = dense<0.0> : tensor<3x4xf32>}> : () -> tensor<3x4xf32>
    %v34:6 = "stablehlo.while"(%v5, %arg0, %v6, %v7, %arg1, %arg2) ({
      ^bb0(%a8: tensor<i32>, %a9: tensor<4xf32>, %a10: tensor<3x4xf32>, %a11: tensor<3x4xf32>, %a12: tensor<3x4xf32>, %a13: tensor<4x4xf32>):
        %v14 = "stablehlo.constant"() <{value = dense<3> : tensor<i32>}> : () -> tensor<i32>
        %v15 = "stablehlo.compare"(%a8, %v14) <{comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%v15) : (tensor<i1>) -> ()
      }, {
      ^bb0(%a16: tensor<i32>, %a17: tensor<4xf32>, %a18: tensor<3x4xf32>, %a19: tensor<3x4xf32>, %a20: tensor<3x4xf32>, %a21: tensor<4x4xf32>):
        %v22 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v23 = "stablehlo.dynamic_slice"(%a20, %a16, %v22) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v24 = "stablehlo.reshape"(%v23) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v25 = "stablehlo.dot_general"(%a17, %a21) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
        %v26 = "stablehlo.add"(%v25, %v24) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v27 = "stablehlo.tanh"(%v26) : (tensor<4xf32>) -> tensor<4xf32>
        %v28 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v29 = "stablehlo.add"(%a16, %v28) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v30 = "stablehlo.reshape"(%v27) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v31 = "stablehlo.dynamic_update_slice"(%a18, %v30, %a16, %v22) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        %v32 = "stablehlo.reshape"(%a17) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v33 = "stablehlo.dynamic_update_slice"(%a19, %v32, %a16, %v22) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        "stablehlo.return"(%v29, %v27, %v31, %v33, %a20, %a21) : (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> ()
      }) : (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> (tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>)
    %v35 = "stablehlo.constant"() <{value = dense<0.0> : tensor<4x4xf32>}> : () -> tensor<4x4xf32>
    %v36 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
    %v37 = "stablehlo.constant"() <{value = dense<0.0> : tensor<3x4xf32>}> : () -> tensor<3x4xf32>
    %v81:8 = "stablehlo.while"(%v36, %arg3, %v35, %v37, %v34#3, %arg1, %arg4, %arg2) ({
      ^bb0(%a38: tensor<i32>, %a39: tensor<4xf32>, %a40: tensor<4x4xf32>, %a41: tensor<3x4xf32>, %a42: tensor<3x4xf32>, %a43: tensor<3x4xf32>, %a44: tensor<3x4xf32>, %a45: tensor<4x4xf32>):
        %v46 = "stablehlo.constant"() <{value = dense<3> : tensor<i32>}> : () -> tensor<i32>
        %v47 = "stablehlo.compare"(%a38, %v46) <{comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>
        "stablehlo.return"(%v47) : (tensor<i1>) -> ()
      }, {
      ^bb0(%a48: tensor<i32>, %a49: tensor<4xf32>, %a50: tensor<4x4xf32>, %a51: tensor<3x4xf32>, %a52: tensor<3x4xf32>, %a53: tensor<3x4xf32>, %a54: tensor<3x4xf32>, %a55: tensor<4x4xf32>):
        %v56 = "stablehlo.constant"() <{value = dense<2> : tensor<i32>}> : () -> tensor<i32>
        %v57 = "stablehlo.subtract"(%v56, %a48) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v58 = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
        %v59 = "stablehlo.dynamic_slice"(%a52, %v57, %v58) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v60 = "stablehlo.reshape"(%v59) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v61 = "stablehlo.dynamic_slice"(%a53, %v57, %v58) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v62 = "stablehlo.reshape"(%v61) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v63 = "stablehlo.dynamic_slice"(%a54, %v57, %v58) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
        %v64 = "stablehlo.reshape"(%v63) : (tensor<1x4xf32>) -> tensor<4xf32>
        %v65 = "stablehlo.dot_general"(%v60, %a55) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
        %v66 = "stablehlo.add"(%v65, %v62) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v67 = "stablehlo.tanh"(%v66) : (tensor<4xf32>) -> tensor<4xf32>
        %v68 = "stablehlo.add"(%a49, %v64) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v69 = "stablehlo.multiply"(%v67, %v67) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v70 = "stablehlo.negate"(%v69) : (tensor<4xf32>) -> tensor<4xf32>
        %v71 = "stablehlo.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
        %v72 = "stablehlo.add"(%v70, %v71) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v73 = "stablehlo.multiply"(%v68, %v72) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %v74 = "stablehlo.dot_general"(%v73, %a55) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [1]>}> : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
        %v75 = "stablehlo.dot_general"(%v60, %v73) <{dot_dimension_numbers = #stablehlo.dot<>}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
        %v76 = "stablehlo.add"(%a50, %v75) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
        %v77 = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
        %v78 = "stablehlo.add"(%a48, %v77) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        %v79 = "stablehlo.reshape"(%v73) : (tensor<4xf32>) -> tensor<1x4xf32>
        %v80 = "stablehlo.dynamic_update_slice"(%a51, %v79, %v57, %v58) : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
        "stablehlo.return"(%v78, %v74, %v76, %v80, %a52, %a53, %a54, %a55) : (tensor<i32>, tensor<4xf32>, tensor<4x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> ()
      }) : (tensor<i32>, tensor<4xf32>, tensor<4x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> (tensor<i32>, tensor<4xf32>, tensor<4x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<4x4xf32>)
    "func.return"(%v81#1, %v81#3, %v81#2) : (tensor<4xf32>, tensor<3x4xf32>, tensor<4x4xf32>) -> ()
  }
}
